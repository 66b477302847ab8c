package gate

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
)

// TestMatchBudget: a tenant's matching time comes from a bucket of burst
// refilled at rate; a reservation takes the estimate, settling corrects it
// to what was measured, and an empty bucket makes the next check wait as
// long as the bucket takes to hold time again. Tenants have buckets of their
// own.
func TestMatchBudget(t *testing.T) {
	t.Parallel()
	b := newMatchBudget(0.05, 20*time.Millisecond)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// A full bucket: reservations go until it is spent.
	for i := range 20 {
		if w := b.reserve("a", t0, time.Millisecond); w != 0 {
			t.Fatalf("reservation %d of a full bucket waits %s", i, w)
		}
	}
	// Spent (20 ms): the next waits until 1 ms has come back at 5 %: 20 ms.
	if w := b.reserve("a", t0, time.Millisecond); w <= 0 || w > 21*time.Millisecond {
		t.Errorf("an empty bucket: wait %s, want just over 0 (it holds nothing, not less)", w)
	}
	// The checks took 3 ms each, not 1: the tenant owes 40 ms more, which
	// takes 800 ms to come back.
	for range 20 {
		b.settle("a", t0, 3*time.Millisecond, time.Millisecond)
	}
	if w := b.reserve("a", t0, time.Millisecond); w < 799*time.Millisecond || w > 801*time.Millisecond {
		t.Errorf("owing 40 ms at 5 %%: wait %s, want 800 ms", w)
	}
	if w := b.reserve("a", at(801*time.Millisecond), time.Millisecond); w != 0 {
		t.Errorf("after the wait: %s", w)
	}
	// Another tenant is untouched.
	if w := b.reserve("b", t0, 10*time.Millisecond); w != 0 {
		t.Errorf("tenant b waits %s", w)
	}
	// A bucket that has refilled is dropped: only tenants that owe are held.
	b.settle("b", at(time.Second), 10*time.Millisecond, 10*time.Millisecond)
	b.mu.Lock()
	_, held := b.m["b"]
	b.mu.Unlock()
	if held {
		t.Error("a full bucket is still held")
	}
}

// Many requests of one tenant racing for its units with checks of 1 to 4
// items: no more than the limit is ever held, every request gets its turn
// (a wakeup lost would leave one waiting out its 10 s), and when all are
// done nothing is held or queued.
func TestInflightUnitsUnderRace(t *testing.T) {
	t.Parallel()
	const limit = 4
	f := newInflight(limit, 10*time.Second)
	var held atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				n := int64(1 + (g+i)%limit)
				h, ok := f.acquire(context.Background(), "t", n)
				if !ok {
					t.Errorf("a request of %d units was refused after waiting", n)
					return
				}
				if now := held.Add(n); now > limit {
					t.Errorf("%d units held, more than %d", now, limit)
				}
				if i%7 == 0 {
					runtime.Gosched()
				}
				held.Add(-n)
				h.release()
			}
		}()
	}
	wg.Wait()
	w := f.m["t"]
	if w == nil {
		return // swept: nothing held
	}
	if w.held.Load() != 0 || w.queued.Load() != 0 || w.waiters.Len() != 0 || w.users.Load() != 0 {
		t.Errorf("after every release: held %d, queued %d, waiters %d, users %d", w.held.Load(), w.queued.Load(), w.waiters.Len(), w.users.Load())
	}
}

// Waiters are served in the order they came: a big request first in line is
// not overtaken by small ones that arrive after it, and a waiter that gives
// up lets the next in at once.
func TestInflightFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	f := newInflight(4, 10*time.Second)
	queued := func(n int64) func() bool {
		return func() bool {
			f.mu.RLock()
			defer f.mu.RUnlock()
			return f.m["t"].queued.Load() == n
		}
	}
	first, _ := f.acquire(context.Background(), "t", 3)
	bigGot := make(chan held)
	go func() {
		h, ok := f.acquire(context.Background(), "t", 4)
		if !ok {
			t.Error("the big request was refused")
		}
		bigGot <- h
	}()
	eventually.True(t, 5*time.Second, "one waiter in line", queued(1))
	// One unit is free, but the big request is first in line.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, ok := f.acquire(ctx, "t", 1); ok {
		t.Error("a small request overtook the big one waiting")
	}
	cancel()
	first.release()
	(<-bigGot).release()

	// Three units held, a request of four first in line, one of one behind
	// it: when the first gives up, the second fits and goes in.
	first, _ = f.acquire(context.Background(), "t", 3)
	ctx, cancel = context.WithCancel(context.Background())
	gaveUp := make(chan bool)
	go func() { _, ok := f.acquire(ctx, "t", 4); gaveUp <- ok }()
	eventually.True(t, 5*time.Second, "one waiter in line", queued(1))
	second := make(chan held)
	go func() {
		h, ok := f.acquire(context.Background(), "t", 1)
		if !ok {
			t.Error("the request behind the one that gave up was refused")
		}
		second <- h
	}()
	eventually.True(t, 5*time.Second, "two waiters in line", queued(2))
	cancel()
	if <-gaveUp {
		t.Error("the cancelled waiter got units")
	}
	(<-second).release()
	first.release()
}
