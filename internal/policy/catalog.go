package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CatalogConfig tunes a Catalog; the zero value takes the defaults.
type CatalogConfig struct {
	// TTL bounds how long a Set is served without being reloaded, in case an
	// invalidation was missed. Default 30 s.
	TTL time.Duration
	// MaxTenants bounds how many tenants' Sets are kept; beyond it an
	// arbitrary one is dropped. Default 10,000.
	MaxTenants int
	// MaxOverrides bounds how many overrides the kept Sets hold together
	// (each is at most a few hundred bytes); beyond it arbitrary other
	// tenants' Sets are dropped. Default 1,000,000.
	MaxOverrides int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Catalog caches each tenant's Set in memory in front of a Loader, so that a
// check reads its policies without a database round trip. Invalidate drops a
// tenant's Set when its policies change (the serve wiring calls it on the
// "policy:<tenant_id>" notification); TTL is the safety net. A Catalog is
// safe for concurrent use.
type Catalog struct {
	src          Loader
	ttl          time.Duration
	max          int
	maxOverrides int
	now          func() time.Time

	mu sync.Mutex
	m  map[string]*slot
	// overrides is the sum of the kept Sets' Overrides.
	overrides int
}

// slot is one tenant's place in the cache. It is replaced, never reused, when
// the tenant is invalidated: a load that finishes into a slot no longer in the
// map was started before the change and is not kept.
type slot struct {
	set     Set
	expires time.Time // zero until a load succeeds
	load    *load     // the load in flight, if any
}

// load is one call of the Loader that concurrent callers share.
type load struct {
	done chan struct{}
	set  Set
	err  error
}

// NewCatalog returns a Catalog over src.
func NewCatalog(src Loader, cfg CatalogConfig) *Catalog {
	c := &Catalog{src: src, ttl: cfg.TTL, max: cfg.MaxTenants, maxOverrides: cfg.MaxOverrides, now: cfg.Now, m: make(map[string]*slot)}
	if c.ttl <= 0 {
		c.ttl = 30 * time.Second
	}
	if c.max <= 0 {
		c.max = 10_000
	}
	if c.maxOverrides <= 0 {
		c.maxOverrides = 1_000_000
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// For returns a tenant's Set: the cached one while it is fresh, else a new
// load. Concurrent callers for one tenant share one load; each waits no longer
// than its own ctx. An error of the Loader is returned wrapped and not cached.
func (c *Catalog) For(ctx context.Context, tenantID string) (Set, error) {
	for {
		c.mu.Lock()
		s := c.m[tenantID]
		if s != nil && !s.expires.IsZero() && c.now().Before(s.expires) {
			set := s.set
			c.mu.Unlock()
			return set, nil
		}
		if s == nil {
			s = c.add(tenantID)
		}
		l := s.load
		lead := l == nil
		if lead {
			l = &load{done: make(chan struct{})}
			s.load = l
		}
		c.mu.Unlock()

		if lead {
			c.run(ctx, tenantID, s, l)
		} else {
			select {
			case <-l.done:
			case <-ctx.Done():
				return Set{}, ctx.Err()
			}
		}
		if l.err == nil {
			return l.set, nil
		}
		// The leader gave up with its own context: this caller, whose
		// context is still alive, tries again rather than inherit that.
		if !lead && ctx.Err() == nil && (errors.Is(l.err, context.Canceled) || errors.Is(l.err, context.DeadlineExceeded)) {
			continue
		}
		return Set{}, l.err
	}
}

// run performs load l for slot s, and keeps its result if s is still the
// tenant's slot.
func (c *Catalog) run(ctx context.Context, tenantID string, s *slot, l *load) {
	defer close(l.done)
	// Set before the call so that waiters see an error even if it panics.
	l.err = fmt.Errorf("load policies of tenant %s: loader panicked", tenantID)
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		s.load = nil
		if c.m[tenantID] != s {
			return
		}
		if l.err == nil {
			c.overrides += l.set.Overrides() - s.set.Overrides()
			s.set, s.expires = l.set, c.now().Add(c.ttl)
			c.shed(s)
		} else if s.expires.IsZero() {
			delete(c.m, tenantID)
		}
	}()
	set, err := c.src.LoadSet(ctx, tenantID)
	if err != nil {
		err = fmt.Errorf("load policies of tenant %s: %w", tenantID, err)
	}
	l.set, l.err = set, err
}

// add puts an empty slot for a tenant, first dropping one when the cache is
// full. Which one does not matter much (map iteration picks one at random):
// a dropped tenant costs one load on its next check.
func (c *Catalog) add(tenantID string) *slot {
	if len(c.m) >= c.max {
		for k := range c.m {
			c.drop(k)
			break
		}
	}
	s := &slot{}
	c.m[tenantID] = s
	return s
}

// Invalidate drops a tenant's Set: the next For loads it again, and a load
// already in flight is not kept.
func (c *Catalog) Invalidate(tenantID string) {
	c.mu.Lock()
	c.drop(tenantID)
	c.mu.Unlock()
}

// drop removes a tenant's slot and its weight; c.mu is held.
func (c *Catalog) drop(tenantID string) {
	if s, ok := c.m[tenantID]; ok {
		c.overrides -= s.set.Overrides()
		delete(c.m, tenantID)
	}
}

// shed drops other tenants' Sets, arbitrary ones, while the kept Sets hold
// more than MaxOverrides overrides; keep stays even when it alone is over.
// c.mu is held.
func (c *Catalog) shed(keep *slot) {
	for k, s := range c.m {
		if c.overrides <= c.maxOverrides {
			return
		}
		if s != keep {
			c.drop(k)
		}
	}
}

// InvalidateAll drops every tenant's Set, as after a lost connection to the
// notifications that would have named the tenants that changed.
func (c *Catalog) InvalidateAll() {
	c.mu.Lock()
	c.m = make(map[string]*slot)
	c.overrides = 0
	c.mu.Unlock()
}
