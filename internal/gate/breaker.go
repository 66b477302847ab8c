package gate

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/metrics"
)

// breaker keeps calls away from a counter store that keeps failing: after
// `failures` consecutive failures it opens for `openFor`, then lets one call
// through (half-open); a success closes it, a failure opens it again.
type breaker struct {
	failures int
	openFor  time.Duration
	metrics  *metrics.Metrics

	mu        sync.Mutex
	streak    int
	openUntil time.Time
	probing   bool
}

// allow reports whether a call may go to the store now.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streak < b.failures {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) failure(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streak++
	b.probing = false
	if b.streak >= b.failures {
		b.openUntil = now.Add(b.openFor)
		b.metrics.BreakerOpen.Set(1)
	}
}

// release ends a call that says nothing about the store's health.
func (b *breaker) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streak >= b.failures {
		b.metrics.BreakerOpen.Set(0)
	}
	b.streak = 0
	b.probing = false
}
