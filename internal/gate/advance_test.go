package gate

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAdvanceUnitsAreSpentOnceUnderRenewals: requests spend an advance's units
// without a lock, one or several at a time, while other requests renew it;
// every unit granted is spent exactly once (those of a grant replaced meanwhile move to the new one),
// units given back are spent again, and none is spent after the advance
// lapses.
func TestAdvanceUnitsAreSpentOnceUnderRenewals(t *testing.T) {
	t.Parallel()
	l := newAdvances()
	k := advanceID{"tenant", "quota:minute"}
	now := time.Now()
	end := now.Add(time.Minute)
	const grants, size, takers = 200, 50, 8
	var spent, given atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range takers {
		// Takers take one to four units at a time, as batches do.
		n := int64(1 + w%4)
		wg.Go(func() {
			for {
				ok, _, _, from := l.takeN(k, now, n)
				if ok {
					spent.Add(n)
					// Every tenth unit is given back, as when another
					// ceiling refuses the request.
					if spent.Load()%10 == 0 {
						l.giveBack(from)
						given.Add(1)
					}
					continue
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	for i := range grants {
		// One unit of each grant is the granting request's own.
		l.grant(k, now, end, 1_000_000, size, 1_000_000-int64(i*size))
		spent.Add(1)
	}
	// Drain what is left, then stop the takers.
	for {
		ok, _, _, _ := l.take(k, now)
		if !ok {
			break
		}
		spent.Add(1)
	}
	close(stop)
	wg.Wait()
	for {
		ok, _, _, _ := l.take(k, now)
		if !ok {
			break
		}
		spent.Add(1)
	}
	// Given back units may land in a grant replaced meanwhile and lapse;
	// never is a unit spent twice.
	if got, most, least := spent.Load()-given.Load(), int64(grants*size), int64(grants*size)-given.Load(); got > most || got < least {
		t.Fatalf("units spent net of those given back: %d, want %d (at most %d given back lost)", got, most, given.Load())
	}
	if ok, _, _, _ := l.take(k, end); ok {
		t.Fatal("a unit spent at the advance's end")
	}
}

// TestTakeNTakesAllOrNone: a batch's take of n units spends n when the
// advance holds n, else none, and says what the counter has left after them.
func TestTakeNTakesAllOrNone(t *testing.T) {
	t.Parallel()
	l := newAdvances()
	k := advanceID{"tenant", "quota:minute"}
	now := time.Now()
	// Ten units granted, one of them the granting request's: nine held, and
	// the store said 100 were left after the grant.
	l.grant(k, now, now.Add(time.Minute), 1000, 10, 100)
	for _, step := range []struct {
		n             int64
		ok            bool
		remainingWant int64
	}{{4, true, 105}, {4, true, 101}, {4, false, 0}, {2, false, 0}, {1, true, 100}, {1, false, 0}} {
		ok, remaining, _, from := l.takeN(k, now, step.n)
		if ok != step.ok || (ok && (remaining != step.remainingWant || from == nil)) {
			t.Fatalf("takeN(%d) = %v, %d remaining; want %v, %d", step.n, ok, remaining, step.ok, step.remainingWant)
		}
	}
}

// TestAdvancesKeepEachTenantsShare: the advance table is shared by every
// tenant of the instance. A tenant that makes far more advances than the
// table holds, each still holding units (its per-IP counters of many
// client addresses, say), makes room from its own; a neighbour's live
// advances stay.
func TestAdvancesKeepEachTenantsShare(t *testing.T) {
	t.Parallel()
	l := newAdvances()
	now := time.Now()
	end := now.Add(time.Minute)
	neighbour := []advanceID{{"neighbour", "quota:minute"}, {"neighbour", "quota:hour"}, {"neighbour", "allotment"}}
	for _, k := range neighbour {
		l.grant(k, now, end, 1_000_000, 100, 10_000)
	}
	for i := range 4 * advanceShards * advancesPerShard {
		l.grant(advanceID{"hostile", "ip:" + strconv.Itoa(i)}, now, end, 1_000_000, 100, 10_000)
	}
	for _, k := range neighbour {
		if ok, _, _, _ := l.take(k, now); !ok {
			t.Errorf("the neighbour's advance on %s is gone: the hostile tenant's advances evicted it", k.key)
		}
	}
	if n := l.held("hostile"); n > advanceShards*advancesPerTenant {
		t.Errorf("the hostile tenant holds %d advances, want at most its share %d", n, advanceShards*advancesPerTenant)
	}
}

// held counts the advances the table holds for group.
func (l *advances) held(group string) int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.RLock()
		for k := range sh.m {
			if k.group == group {
				n++
			}
		}
		sh.mu.RUnlock()
	}
	return n
}
