package gate

import (
	"testing"
	"time"
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
