package gate

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// inflight bounds each tenant's work in progress on this instance: a check
// weighs as many units as it has items (a request of another route one), and
// a tenant may hold at most limit units at once. A request beyond that waits
// its turn (first come, first served) for at most wait, then is refused, so
// that one tenant's burst of the heaviest checks the API allows queues
// behind itself instead of taking the CPU and the store from every other
// tenant.
//
// Only tenants with work in progress have an entry.
type inflight struct {
	limit int64
	wait  time.Duration

	mu sync.Mutex
	m  map[string]*tenantWork
}

// tenantWork is one tenant's semaphore and how many requests hold or await it.
type tenantWork struct {
	sem   *semaphore.Weighted
	users int
}

func newInflight(limit int64, wait time.Duration) *inflight {
	return &inflight{limit: limit, wait: wait, m: make(map[string]*tenantWork)}
}

// held is units a request holds; release gives them back.
type held struct {
	f      *inflight
	tenant string
	w      *tenantWork
	n      int64
}

func (h held) release() {
	h.w.sem.Release(h.n)
	h.f.leave(h.tenant, h.w)
}

// acquire takes n units for tenant, waiting at most f.wait (and no longer
// than ctx). It returns what to release, or ok false when the tenant's
// units stayed taken.
func (f *inflight) acquire(ctx context.Context, tenant string, n int64) (h held, ok bool) {
	n = min(max(n, 1), f.limit)
	f.mu.Lock()
	w := f.m[tenant]
	if w == nil {
		w = &tenantWork{sem: semaphore.NewWeighted(f.limit)}
		f.m[tenant] = w
	}
	w.users++
	f.mu.Unlock()

	if !w.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, f.wait)
		err := w.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			f.leave(tenant, w)
			return held{}, false
		}
	}
	return held{f: f, tenant: tenant, w: w, n: n}, true
}

// leave drops the tenant's entry when nobody holds or awaits it.
func (f *inflight) leave(tenant string, w *tenantWork) {
	f.mu.Lock()
	w.users--
	if w.users == 0 {
		delete(f.m, tenant)
	}
	f.mu.Unlock()
}
