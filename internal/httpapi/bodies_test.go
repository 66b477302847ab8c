package httpapi

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// Many goroutines reserving and returning bodies for a few addresses at
// once: no address ever holds more than its share, the instance never more
// than its total, and when all are done nothing is left reserved and no
// address is still tracked.
func TestBodyBudgetRaceOfClients(t *testing.T) {
	const perIP, total = 100, 250
	b := newBodyBudget(perIP, total, nil)
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
				b.give(ips[i], c, n)
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
	b.byIP.Range(func(k, v any) bool {
		t.Errorf("address %v still tracked, holding %d", k, v.(*ipBytes).n.Load())
		return true
	})
}

// Two clients of one address whose bodies together fit its share are never
// refused, however their reservations and returns interleave with the
// address's counter being removed and made again.
func TestBodyBudgetRaceNeverRefusesWhatFits(t *testing.T) {
	b := newBodyBudget(2*64, 1<<20, nil)
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
				b.give("198.51.100.7", c, 64)
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
	if _, ok := b.byIP.Load("198.51.100.7"); ok {
		t.Error("the address is still tracked with nothing in flight")
	}
}
