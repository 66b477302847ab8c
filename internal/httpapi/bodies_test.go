package httpapi

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
)

// Many goroutines reserving and returning bodies for a few addresses at
// once: no address ever holds more than its share, the instance never more
// than its total, and when all are done nothing is left reserved and no
// address is still tracked.
func TestBodyBudgetRaceOfClients(t *testing.T) {
	const perIP, total = 100, 250
	b := newBodyPool("ip", "instance", perIP, total, 0, metrics.New())
	b.sweepEvery, b.sweepAfter = 0, 1 // sweeps race with the reservations
	// Two addresses: each goroutine keeps finding its address's counter
	// at zero, removed, or made again by another.
	ips := []string{"198.51.100.1", "2001:db8::/64"}
	var held [2]atomic.Int64
	var all, taken, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 50000 {
				i := r.IntN(len(ips))
				n := 30 + r.Int64N(31)
				c, scope := b.take(ips[i], n)
				if scope != "" {
					refused.Add(1)
					continue
				}
				taken.Add(1)
				if h := held[i].Add(n); h > perIP {
					t.Errorf("%s holds %d bytes, more than its %d", ips[i], h, perIP)
				}
				if a := all.Add(n); a > total {
					t.Errorf("the instance holds %d bytes, more than its %d", a, total)
				}
				held[i].Add(-n)
				all.Add(-n)
				c.give()
			}
		}()
	}
	wg.Wait()
	if taken.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("taken %d, refused %d: the race did not reach the bounds", taken.Load(), refused.Load())
	}
	if u := b.used.Load(); u != 0 {
		t.Errorf("%d bytes still reserved after every body was returned", u)
	}
	for _, ip := range ips {
		if c, ok := b.byParty.Load(ip); ok && c.Value() != 0 {
			t.Errorf("address %s still holds %d bytes", ip, c.Value())
		}
	}
	b.sweep(true)
	if n := b.byParty.Len(); n != 0 {
		t.Errorf("%d addresses still tracked after a sweep", n)
	}
}

// Two clients of one address whose bodies together fit its share are never
// refused, however their reservations and returns interleave with the
// address's counter being removed and made again.
func TestBodyBudgetRaceNeverRefusesWhatFits(t *testing.T) {
	b := newBodyPool("ip", "instance", 2*64, 1<<20, 0, metrics.New())
	b.sweepEvery, b.sweepAfter = 0, 1
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100000 {
				c, scope := b.take("198.51.100.7", 64)
				if scope != "" {
					refused.Add(1)
					continue
				}
				c.give()
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Errorf("%d reservations refused though both clients together fit", n)
	}
	if u := b.used.Load(); u != 0 {
		t.Errorf("%d bytes still reserved", u)
	}
}

// Clients come and go: the counters of those gone are swept, so the map
// holds about the clients of the last sweep, not every client ever seen;
// and sweeps racing with reservations lose none.
func TestBodyBudgetRaceOfSweeps(t *testing.T) {
	b := newBodyPool("ip", "instance", 1<<10, 1<<30, 0, metrics.New())
	b.sweepEvery = 0
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50000 {
				ip := fmt.Sprintf("10.%d.%d.%d", g, i>>8&255, i&255)
				c, scope := b.take(ip, 100)
				if scope != "" {
					t.Errorf("%s refused (%s)", ip, scope)
					return
				}
				c.give()
			}
		}()
	}
	wg.Wait()
	// The last sweeps run beside the requests that called for them.
	eventually.True(t, 5*time.Second, "the sweeps to leave at most 4 × sweepAfter of 200,000 addresses",
		func() bool { return b.byParty.Len() <= 4*defaultSweepAfter })
	if u := b.used.Load(); u != 0 {
		t.Errorf("%d bytes still reserved", u)
	}
}

// A client at its share keeps sending: its refused reservations never show
// in the instance's total, so another client whose body fits beside it is
// never refused for the instance.
func TestBodyBudgetRaceRefusedClientTakesNothing(t *testing.T) {
	b := newBodyPool("ip", "instance", 100, 150, 0, metrics.New())
	if _, scope := b.take("198.51.100.66", 100); scope != "" {
		t.Fatal(scope)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, scope := b.take("198.51.100.66", 100); scope != "ip" {
					t.Errorf("the client past its share: scope %q, want ip", scope)
					return
				}
			}
		}()
	}
	refused := 0
	for range 100000 {
		c, scope := b.take("198.51.100.77", 50)
		if scope != "" {
			refused++
			continue
		}
		c.give()
	}
	close(stop)
	wg.Wait()
	if refused > 0 {
		t.Errorf("%d of 100,000 bodies that fit beside the full client were refused", refused)
	}
}
