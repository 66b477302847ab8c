package gate

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// inflight bounds each tenant's work in progress on this instance: a check
// weighs as many units as it has items (a request of another route one), and
// a tenant may hold at most limit units at once. A request beyond that waits
// its turn (first come, first served) for at most wait, then is refused, so
// that one tenant's burst of the heaviest checks the API allows queues
// behind itself instead of taking the CPU and the store from every other
// tenant.
//
// Tenants without work in progress keep their entry until idleTenants of
// them have piled up.
type inflight struct {
	limit int64
	wait  time.Duration

	// mu guards m: read-locked to find a tenant's entry and join its
	// users (so that no sweep can drop an entry a request is joining),
	// locked to add or sweep entries.
	mu   sync.RWMutex
	m    map[string]*tenantWork
	idle atomic.Int64 // entries left idle since the last sweep, at most
}

// tenantWork is one tenant's units and how many requests hold or await
// them. Every check passes through it, so taking and returning units is one
// atomic compare-and-swap while nobody waits; only requests that must wait,
// and returns that may let a waiter in, take the lock.
type tenantWork struct {
	users  atomic.Int64 // requests holding or awaiting units
	held   atomic.Int64 // units held
	queued atomic.Int64 // len(waiters), readable without mu

	mu      sync.Mutex
	waiters list.List // of *waiter, first come, first served
}

// waiter is a request waiting for n units; ready is closed once they are
// its.
type waiter struct {
	n     int64
	ready chan struct{}
}

// hold takes one unit of the tenant's work in progress for a request that
// works on the store after Admit (a renewal, a release, a reset), so that
// a flood of them is bounded as checks are; ErrBusy past the wait.
func (g *Gate) hold(ctx context.Context, tenantID string) (held, error) {
	h, ok := g.inflight.acquire(ctx, tenantID, 1)
	if !ok {
		if err := ctx.Err(); err != nil {
			return h, err
		}
		return h, fmt.Errorf("tenant %s: %w", tenantID, ErrBusy)
	}
	return h, nil
}

func newInflight(limit int64, wait time.Duration) *inflight {
	return &inflight{limit: limit, wait: wait, m: make(map[string]*tenantWork)}
}

// held is units a request holds; release gives them back.
type held struct {
	f *inflight
	w *tenantWork
	n int64
}

func (h held) release() {
	h.w.held.Add(-h.n)
	if h.w.queued.Load() > 0 {
		h.w.mu.Lock()
		h.f.admitWaiters(h.w)
		h.w.mu.Unlock()
	}
	h.f.leave(h.w)
}

// acquire takes n units for tenant, waiting at most f.wait (and no longer
// than ctx). It returns what to release, or ok false when the tenant's
// units stayed taken.
func (f *inflight) acquire(ctx context.Context, tenant string, n int64) (h held, ok bool) {
	n = min(max(n, 1), f.limit)
	f.mu.RLock()
	w := f.m[tenant]
	if w != nil {
		w.users.Add(1)
	}
	f.mu.RUnlock()
	if w == nil {
		f.mu.Lock()
		if w = f.m[tenant]; w == nil {
			w = &tenantWork{}
			f.m[tenant] = w
		}
		w.users.Add(1)
		f.mu.Unlock()
	}
	// Nobody waiting: take the units if they are free. Requests that
	// wait go first, so a stream of new ones cannot starve them.
	if w.queued.Load() == 0 && f.tryTake(w, n) {
		return held{f: f, w: w, n: n}, true
	}
	if f.queue(ctx, w, n) {
		return held{f: f, w: w, n: n}, true
	}
	f.leave(w)
	return held{}, false
}

// tryTake takes n of w's units if they are free.
func (f *inflight) tryTake(w *tenantWork, n int64) bool {
	for {
		c := w.held.Load()
		if c+n > f.limit {
			return false
		}
		if w.held.CompareAndSwap(c, c+n) {
			return true
		}
	}
}

// queue waits in line for n of w's units, for at most f.wait and no longer than
// ctx; true when they were taken.
//
// No wakeup is lost: a waiter is counted in queued before it last looks at
// held, under mu, and every release lowers held before it looks at queued,
// then admits waiters under mu.
func (f *inflight) queue(ctx context.Context, w *tenantWork, n int64) bool {
	w.mu.Lock()
	w.queued.Add(1)
	if w.waiters.Len() == 0 && f.tryTake(w, n) {
		w.queued.Add(-1)
		w.mu.Unlock()
		return true
	}
	me := &waiter{n: n, ready: make(chan struct{})}
	place := w.waiters.PushBack(me)
	w.mu.Unlock()

	timer := time.NewTimer(f.wait)
	defer timer.Stop()
	select {
	case <-me.ready:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-me.ready:
		// Admitted as it gave up: the units are its.
		return true
	default:
	}
	// Out of line at once, wherever it stood: a tenant's thousands of
	// waiters giving up together each cost one step, not a walk of the line.
	w.waiters.Remove(place)
	w.queued.Add(-1)
	// It may have been the first in line, too big to fit: the next may.
	f.admitWaiters(w)
	return false
}

// admitWaiters gives free units to the waiters in order, until the first
// that does not fit. The caller holds w.mu.
func (f *inflight) admitWaiters(w *tenantWork) {
	for e := w.waiters.Front(); e != nil; e = w.waiters.Front() {
		first := e.Value.(*waiter)
		if !f.tryTake(w, first.n) {
			return
		}
		w.waiters.Remove(e)
		w.queued.Add(-1)
		close(first.ready)
	}
}

// leave notes that a request no longer holds or awaits the tenant's units.
// Entries nobody holds are kept for the tenant's next request (a semaphore
// a request would cost an allocation) until idleTenants of them pile up,
// then swept.
func (f *inflight) leave(w *tenantWork) {
	if w.users.Add(-1) != 0 || f.idle.Add(1) <= idleTenants {
		return
	}
	f.mu.Lock()
	if f.idle.Load() > idleTenants {
		for k, e := range f.m {
			// Under the lock no request joins e: one that has not joined
			// yet will find no entry and make one.
			if e.users.Load() == 0 {
				delete(f.m, k)
			}
		}
		f.idle.Store(0)
	}
	f.mu.Unlock()
}

// idleTenants is how many tenants without work in progress inflight keeps.
const idleTenants = 4096

// matchBudget bounds the time each tenant's checks spend matching wildcard
// overrides on this instance: a bucket of matching time per tenant, burst
// deep, refilled at rate seconds a second, charged with the time each check
// measurably spent (not an estimate). A tenant whose bucket is empty waits
// (or is refused) until it has refilled, so that however many of the
// heaviest checks it sends, it takes a bounded share of the processors from
// the other tenants. Checks that try no wildcard never touch it.
//
// Only tenants whose bucket is not full have an entry.
type matchBudget struct {
	rate  float64       // seconds of matching a second
	burst time.Duration // what a full bucket holds

	mu sync.Mutex
	m  map[string]*bucket
}

// bucket is a tenant's matching time left, as of at; below zero it owes.
type bucket struct {
	left time.Duration
	at   time.Time
}

func newMatchBudget(rate float64, burst time.Duration) *matchBudget {
	return &matchBudget{rate: rate, burst: burst, m: make(map[string]*bucket)}
}

// refill brings k up to now; it reports whether k is full. b.mu is held.
func (b *matchBudget) refill(k *bucket, now time.Time) bool {
	k.left = min(b.burst, k.left+time.Duration(float64(now.Sub(k.at))*b.rate))
	k.at = now
	return k.left >= b.burst
}

// reserve takes estimate from tenant's bucket at now when it holds time,
// and reports 0; otherwise it takes nothing and reports how long until the
// bucket holds time again. A reservation keeps requests that wait together
// from all going at once when the bucket refills.
func (b *matchBudget) reserve(tenant string, now time.Time, estimate time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.m[tenant]
	if k == nil {
		k = &bucket{left: b.burst, at: now}
		b.m[tenant] = k
	} else {
		b.refill(k, now)
	}
	if k.left <= 0 {
		return time.Duration(float64(-k.left)/b.rate) + 1
	}
	k.left -= estimate
	return 0
}

// settle corrects tenant's reservation at now by what the matching really
// took, over or under the estimate, and drops a full bucket.
func (b *matchBudget) settle(tenant string, now time.Time, took, estimate time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.m[tenant]
	if k == nil {
		return
	}
	k.left -= took - estimate
	if b.refill(k, now) {
		delete(b.m, tenant)
	}
}

// awaitMatching reserves estimate of tenantID's matching budget, waiting its
// turn while the budget is spent. Past matchWait it gives up: ok is false
// and retry says when the budget has room again. A refusal comes only after
// the whole wait, so that a client that does not back off sends one such
// check a second per connection, not as many as it can. The error is ctx's.
func (g *Gate) awaitMatching(ctx context.Context, tenantID string, estimate time.Duration) (retry time.Duration, ok bool, err error) {
	waitUntil := time.Now().Add(matchWait)
	for {
		wait := g.matching.reserve(tenantID, g.cfg.Now(), estimate)
		if wait == 0 {
			return 0, true, nil
		}
		last := false
		if left := time.Until(waitUntil); wait >= left {
			wait, last = max(left, 0), true
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return 0, false, ctx.Err()
		}
		if last {
			return g.matching.reserve(tenantID, g.cfg.Now(), 0), false, nil
		}
	}
}
