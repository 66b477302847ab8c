package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/kit/cache"
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
// check reads its policies without a database round trip. Invalidate marks a
// tenant's Set stale when its policies change (the serve wiring calls it on
// the "policy:<tenant_id>" notification); TTL is the safety net. A stale Set
// is read again by the next For; while the Loader fails, the Set last read
// is served instead (a known configuration is never forgotten because the
// database is down: the policies' fail modes then decide, not a 503), and
// read again in the background about once a second until it can be. Loads
// follow package cache's rules: one per tenant at a time, detached from the
// callers that wait for it. A Catalog is safe for concurrent use.
type Catalog struct {
	sets *cache.Cache[Set]
}

// NewCatalog returns a Catalog over src.
func NewCatalog(src Loader, cfg CatalogConfig) *Catalog {
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.MaxTenants <= 0 {
		cfg.MaxTenants = 10_000
	}
	if cfg.MaxOverrides <= 0 {
		cfg.MaxOverrides = 1_000_000
	}
	return &Catalog{sets: cache.New(cache.Config[Set]{
		Load: func(ctx context.Context, tenantID string) (Set, error) {
			set, err := src.LoadSet(ctx, tenantID)
			if err != nil {
				return Set{}, fmt.Errorf("load policies of tenant %s: %w", tenantID, err)
			}
			return set, nil
		},
		TTL: cfg.TTL, MaxEntries: cfg.MaxTenants,
		Weight: Set.Overrides, MaxWeight: cfg.MaxOverrides,
		// Only "not found" is the database's answer; anything else is
		// the database not answering.
		Stale: func(err error) bool { return !errors.Is(err, ErrNotFound) },
		Now:   cfg.Now,
	})}
}

// For returns a tenant's Set: the cached one while it is fresh, else a new
// load. Concurrent callers for one tenant share one load; each waits no longer
// than its own ctx. When the load fails, a stale Set held is returned (waiting
// at most cache.DefaultStaleWait for the load); without one, the Loader's
// error, wrapped and not cached.
func (c *Catalog) For(ctx context.Context, tenantID string) (Set, error) {
	set, stale, err := c.sets.Lookup(ctx, tenantID)
	set.stale = stale
	return set, err
}

// Invalidate marks a tenant's Set stale: the next For loads it again (and
// falls back on it only when the load fails), and a load already in flight
// is not kept.
func (c *Catalog) Invalidate(tenantID string) { c.sets.MarkStale(tenantID) }

// InvalidateAll marks every tenant's Set stale, as after a lost connection
// to the notifications that would have named the tenants that changed.
func (c *Catalog) InvalidateAll() { c.sets.MarkAllStale() }
