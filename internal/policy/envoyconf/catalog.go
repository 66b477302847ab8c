package envoyconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/kit/cache"
	"github.com/tollgate/tollgate/internal/policy"
)

// CatalogConfig tunes a Catalog; the zero value takes the defaults.
type CatalogConfig struct {
	// TTL bounds how long a tenant's Domains are served without being
	// reloaded, in case an invalidation was missed. Default 30 s.
	TTL time.Duration
	// MaxTenants bounds how many tenants' Domains are kept; beyond it an
	// arbitrary one is dropped. Default 10,000.
	MaxTenants int
	// MaxBytes bounds the size of the files the kept Domains were parsed
	// from, together; beyond it arbitrary other tenants' Domains are
	// dropped. A parsed file keeps from about nothing (comments) to 6.6
	// times its size (1,000 rules of short keys; BenchmarkCatalogMemory),
	// so the default of 64 MiB keeps at most about 420 MiB: ten tenants
	// holding all they may (MaxDomains files of MaxSource bytes), or
	// thousands of ordinary ones.
	MaxBytes int
	// Logger is told of a stored file that no longer parses; nil logs
	// nowhere.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Domains are one tenant's parsed files by domain, as of one load. They
// are immutable and safe for concurrent use; the zero Domains hold none.
type Domains struct {
	files map[string]parsed
	bytes int
	// stale says these are the Domains last read, served because reading
	// them again failed.
	stale bool
}

// parsed is one stored file as a load left it: its Config, or nil for a
// file that does not parse, kept so that the next load neither fetches
// nor logs it again.
type parsed struct {
	config  *Config
	version int64
	size    int
}

// Lookup returns the parsed file of a domain, and whether the tenant has
// one that parses.
func (d Domains) Lookup(domain string) (*Config, bool) {
	f := d.files[domain]
	return f.config, f.config != nil
}

// Len is the number of domains held that parse.
func (d Domains) Len() int {
	n := 0
	for _, f := range d.files {
		if f.config != nil {
			n++
		}
	}
	return n
}

// Stale reports whether d are the last Domains read of a tenant whose
// files could not be read again (the database is down): a file uploaded
// since may be missing, or one deleted since still here.
func (d Domains) Stale() bool { return d.stale }

// Catalog caches each tenant's parsed files in memory in front of a Loader,
// so that Envoy's rate limit requests find their domain's Config without a
// database round trip. Files are parsed as they are loaded, and a reload
// fetches and parses only the files whose version it does not hold, so
// that a tenant changing one file again and again costs each instance the
// parsing of that file, not of all of them. A stored file that does not
// parse (a bound tightened since it was uploaded) is logged when it is
// first loaded and left out: its domain has no Config. Invalidate marks a tenant's Domains stale
// when its files change (the serve wiring calls it on the
// "envoy:<tenant_id>" notification); TTL is the safety net. The rules are
// policy.Catalog's: stale Domains are read again by the next For; while the
// Loader fails, the Domains last read are served instead (Stale), and read
// again in the background about once a second until they can be. One load
// per tenant runs at a time, detached from the callers that wait for it. A
// Catalog is safe for concurrent use.
type Catalog struct {
	domains *cache.Cache[Domains]
	src     Loader
	log     *slog.Logger
}

// NewCatalog returns a Catalog over src.
func NewCatalog(src Loader, cfg CatalogConfig) *Catalog {
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.MaxTenants <= 0 {
		cfg.MaxTenants = 10_000
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 64 << 20
	}
	c := &Catalog{src: src, log: cfg.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.domains = cache.New(cache.Config[Domains]{
		Load: c.load,
		TTL:  cfg.TTL, MaxEntries: cfg.MaxTenants,
		Weight: func(d Domains) int { return d.bytes }, MaxWeight: cfg.MaxBytes,
		// Only "not found" is the database's answer; anything else is
		// the database not answering.
		Stale: func(err error) bool { return !errors.Is(err, policy.ErrNotFound) },
		Now:   cfg.Now,
	})
	return c
}

// load reads a tenant's files, reusing those of the Domains held that have
// not changed (a version is never reused: the same version is the same
// file) and parsing the others.
func (c *Catalog) load(ctx context.Context, tenantID string) (Domains, error) {
	prev, _ := c.domains.Held(tenantID)
	held := make([]int64, 0, len(prev.files))
	for _, f := range prev.files {
		held = append(held, f.version)
	}
	ds, err := c.src.LoadDomains(ctx, tenantID, held)
	if err != nil {
		return Domains{}, fmt.Errorf("load envoy domains of tenant %s: %w", tenantID, err)
	}
	out := Domains{files: make(map[string]parsed, len(ds))}
	for _, d := range ds {
		f, ok := prev.files[d.Name]
		if !ok || f.version != d.Version {
			f = parsed{version: d.Version, size: len(d.Source)}
			var err error
			if f.config, err = Parse(d.Name, d.Source); err != nil {
				// Kept by its version only, which holds no memory.
				f.size = 0
				c.log.ErrorContext(ctx, "stored envoy configuration does not parse; its domain is left out",
					"tenant_id", tenantID, "domain", d.Name, "version", d.Version, "err", err)
			}
		}
		out.files[d.Name] = f
		out.bytes += f.size
	}
	return out, nil
}

// For returns a tenant's Domains: the cached ones while they are fresh,
// else a new load. Concurrent callers for one tenant share one load; each
// waits no longer than its own ctx. When the load fails, stale Domains held
// are returned (waiting at most cache.DefaultStaleWait for the load);
// without them, the Loader's error, wrapped and not cached.
func (c *Catalog) For(ctx context.Context, tenantID string) (Domains, error) {
	d, stale, err := c.domains.Lookup(ctx, tenantID)
	d.stale = stale
	return d, err
}

// Config is For and Domains.Lookup in one: the parsed file of a tenant's
// domain, or nil (and no error) when the tenant has none that parses, as
// the rate limit service asks for it (rls.Domains). Errors are For's.
func (c *Catalog) Config(ctx context.Context, tenantID, domain string) (*Config, error) {
	d, err := c.For(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	conf, _ := d.Lookup(domain)
	return conf, nil
}

// Invalidate marks a tenant's Domains stale: the next For loads them again
// (and falls back on them only when the load fails), and a load already in
// flight is not kept.
func (c *Catalog) Invalidate(tenantID string) { c.domains.MarkStale(tenantID) }

// InvalidateAll marks every tenant's Domains stale, as after a lost
// connection to the notifications that would have named the tenants that
// changed.
func (c *Catalog) InvalidateAll() { c.domains.MarkAllStale() }
