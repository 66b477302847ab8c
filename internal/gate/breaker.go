package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/counter"
)

// breakers keeps calls away from a counter store that keeps failing, one
// circuit per tenant: after `failures` consecutive failures of a tenant's
// calls its circuit opens for `openFor`, then lets one call through
// (half-open); a success closes it, a failure opens it again.
//
// The circuits are per tenant so that a store slow for one tenant's work
// (its hot rows, its burst) opens that tenant's circuit and no other: the
// other tenants keep exact answers for as long as the store answers them. A
// store that is down for everyone opens every active tenant's circuit after
// that tenant's own few failures, which costs each a few deadlines once.
//
// Only tenants with a failure streak have an entry, so the map holds the
// tenants in trouble, not every tenant; beyond max of them a new failure is
// not tracked (that tenant's calls still run under the store deadline).
// While no tenant has one (the store is healthy), allow and success read
// one atomic and take no lock.
type breakers struct {
	failures int
	openFor  time.Duration
	max      int
	// openGauge is tollgate_counter_breaker_open of the gate's store.
	openGauge prometheus.Gauge

	mu      sync.Mutex
	m       map[string]*circuit
	tracked atomic.Int64 // len(m), written under mu
	open    int          // circuits with streak >= failures
}

// circuit is one tenant's breaker state.
type circuit struct {
	streak    int
	openUntil time.Time
	probing   bool
}

func newBreakers(failures int, openFor time.Duration, max int, open prometheus.Gauge) *breakers {
	open.Set(0)
	return &breakers{failures: failures, openFor: openFor, max: max, openGauge: open, m: make(map[string]*circuit)}
}

// allow reports whether a call for tenant may go to the store now.
func (b *breakers) allow(tenant string, now time.Time) bool {
	if b.tracked.Load() == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.m[tenant]
	if c == nil || c.streak < b.failures {
		return true
	}
	if now.Before(c.openUntil) || c.probing {
		return false
	}
	c.probing = true
	return true
}

func (b *breakers) failure(tenant string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.m[tenant]
	if c == nil {
		if len(b.m) >= b.max {
			return
		}
		c = &circuit{}
		b.m[tenant] = c
		b.tracked.Store(int64(len(b.m)))
	}
	c.streak++
	c.probing = false
	if c.streak == b.failures {
		b.open++
		b.openGauge.Set(float64(b.open))
	}
	if c.streak >= b.failures {
		c.openUntil = now.Add(b.openFor)
	}
}

// release ends a call that says nothing about the store's health.
func (b *breakers) release(tenant string) {
	if b.tracked.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.m[tenant]; c != nil {
		c.probing = false
	}
}

func (b *breakers) success(tenant string) {
	if b.tracked.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.m[tenant]
	if c == nil {
		return
	}
	if c.streak >= b.failures {
		b.open--
		b.openGauge.Set(float64(b.open))
	}
	delete(b.m, tenant)
	b.tracked.Store(int64(len(b.m)))
}

// throughBreaker makes one call of the shared store for tenantID, under
// ctx, through the tenant's circuit breaker: skipped, as
// counter.ErrUnavailable, while the circuit is open; otherwise timed and
// counted as a success or a failure of the store (an answer such as "no
// such reservation" is a success). A malformed request (the caller's bug)
// or a caller that went away (its client hung up) says nothing about the
// store's health: it leaves the circuit as it was.
func throughBreaker[T any](ctx context.Context, g *Gate, op storeOp, tenantID string, call func() (T, error)) (T, error) {
	if !g.breakers.allow(tenantID, g.cfg.Now()) {
		g.met.store[op].skipped.Observe(0)
		var zero T
		return zero, fmt.Errorf("circuit open: %w", counter.ErrUnavailable)
	}
	start := time.Now()
	res, err := call()
	g.met.timed(ctx, op, start, err)
	switch {
	case errors.Is(err, counter.ErrInvalid), err != nil && callerGone(ctx):
		g.breakers.release(tenantID)
	case storeFailed(ctx, err):
		g.breakers.failure(tenantID, g.cfg.Now())
	default:
		g.breakers.success(tenantID)
	}
	return res, err
}
