package tenant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/kit/atomicmap"
	"github.com/tollgate/tollgate/internal/kit/cache"
	"github.com/tollgate/tollgate/internal/kit/writebehind"
)

// storeTimeout bounds one call of the store: a load (which runs detached
// from the callers that wait for it, as package cache says) or the last
// write of the keys' last use.
const storeTimeout = cache.DefaultTimeout

// DirectoryConfig configures a Directory. Only Store is required; a zero
// field takes the default written next to it.
type DirectoryConfig struct {
	Store  Store
	Logger *slog.Logger // default: slog.Default()
	// TTL is how long a tenant, key or plan is served from memory without
	// asking the store again, should a change notification be lost
	// (default 30 s).
	TTL time.Duration
	// MissTTL is how long an unknown key prefix is answered from memory
	// (default 5 s), and MaxMisses how many are kept at most (default
	// 10,000; the oldest goes first).
	MissTTL   time.Duration
	MaxMisses int
	// FlushEvery is how often Run writes the keys' last use (default 5 s).
	FlushEvery time.Duration
	Now        func() time.Time // default: time.Now
}

// Directory answers who a key belongs to and what its tenant's plan allows,
// from memory: tenants, keys and plans are loaded from the Store on first
// use (one load per entry at a time, however many callers wait) and kept
// until Invalidate says they changed, or TTL passes; then they are read
// again on their next use. While the Store cannot be read, a tenant, key or
// plans read before are served as last read (stale), and read again in the
// background about once a second, so that an outage of the database leaves
// the tenants this instance has served in the last ten minutes
// (cache.DefaultKeep) answered by their policies' fail modes. The exception
// is a key whose own change notification arrived: keys change only when
// revoked or deleted, so such a key is forgotten at once and fails until it
// can be read. It is safe for concurrent use.
type Directory struct {
	store      Store
	log        *slog.Logger
	now        func() time.Time
	flushEvery time.Duration

	keys    *cache.Cache[Key]    // by prefix
	tenants *cache.Cache[Tenant] // by ID
	plans   *cache.Cache[[]Plan] // one entry, ""
	// maxIP is the last MaxIPPerMinute computed, for when the store fails.
	maxIP atomic.Int64

	// used is the keys' last use not yet written, in Unix nanoseconds, by
	// key ID. Every check notes one, so it takes no lock.
	used atomicmap.Map[string]
}

// noteUse records that key id was used at t, unless a later use is noted.
func (d *Directory) noteUse(id string, t time.Time) {
	at := t.UnixNano()
	d.used.Update(id, func(last int64) (int64, bool) { return at, at > last })
}

// NewDirectory returns a Directory in front of cfg.Store. Call Run to have
// the keys' last use written.
func NewDirectory(cfg DirectoryConfig) *Directory {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.MissTTL <= 0 {
		cfg.MissTTL = 5 * time.Second
	}
	if cfg.MaxMisses <= 0 {
		cfg.MaxMisses = 10_000
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 5 * time.Second
	}
	s := cfg.Store
	// Only "not found" is the store's answer; anything else is the store
	// not answering, and the value last read is served meanwhile.
	stale := func(err error) bool { return !errors.Is(err, ErrNotFound) }
	return &Directory{
		store:      s,
		log:        cfg.Logger,
		now:        cfg.Now,
		flushEvery: cfg.FlushEvery,
		keys: cache.New(cache.Config[Key]{
			Load: s.KeyByPrefix, TTL: cfg.TTL, Timeout: storeTimeout, Now: cfg.Now, Stale: stale,
			// An unknown prefix is asked for again and again by whoever
			// guesses keys: the answer is remembered, briefly.
			Miss: func(err error) bool { return errors.Is(err, ErrNotFound) }, MissTTL: cfg.MissTTL, MaxMisses: cfg.MaxMisses,
		}),
		tenants: cache.New(cache.Config[Tenant]{Load: s.Tenant, TTL: cfg.TTL, Timeout: storeTimeout, Now: cfg.Now, Stale: stale}),
		plans: cache.New(cache.Config[[]Plan]{
			Load: func(ctx context.Context, _ string) ([]Plan, error) { return s.Plans(ctx) },
			TTL:  cfg.TTL, Timeout: storeTimeout, Now: cfg.Now, Stale: stale,
		}),
	}
}

// Authenticate returns the key that bearer (the credential of an
// "Authorization: Bearer" header, without the scheme) is, and its tenant.
// A missing, malformed, unknown or revoked key is ErrUnauthorized, which
// does not say which; an expired one is an *ExpiredKeyError, which wraps it;
// a valid key of a disabled tenant is ErrDisabled (its use not noted); any
// other error is the store failing. The key's use is
// noted for Run to write; the Key returned has no Hash.
func (d *Directory) Authenticate(ctx context.Context, bearer string) (Key, Tenant, error) {
	prefix, test, ok := parseKey(bearer)
	if !ok {
		return Key{}, Tenant{}, ErrUnauthorized
	}
	k, err := d.keys.Get(ctx, prefix)
	if errors.Is(err, ErrNotFound) {
		return Key{}, Tenant{}, ErrUnauthorized
	}
	if err != nil {
		return Key{}, Tenant{}, fmt.Errorf("authenticate: %w", err)
	}
	if !k.matches(bearer) || k.Test != test || k.RevokedAt != nil {
		return Key{}, Tenant{}, ErrUnauthorized
	}
	if k.Expired(d.now()) {
		return Key{}, Tenant{}, &ExpiredKeyError{ExpiredAt: *k.ExpiresAt}
	}
	t, err := d.tenants.Get(ctx, k.TenantID)
	if errors.Is(err, ErrNotFound) {
		// Deleted since the key was cached: its keys went with it.
		return Key{}, Tenant{}, ErrUnauthorized
	}
	if err != nil {
		return Key{}, Tenant{}, fmt.Errorf("authenticate: %w", err)
	}
	if t.Disabled() {
		// Only now, with the key proven whole, valid and the tenant's:
		// an unknown or revoked key learned nothing above.
		return Key{}, Tenant{}, ErrDisabled
	}
	d.noteUse(k.ID, d.now())
	k.Hash = nil
	return k, t, nil
}

// Tenant returns the tenant with id; ErrNotFound when there is none.
func (d *Directory) Tenant(ctx context.Context, id string) (Tenant, error) {
	t, err := d.tenants.Get(ctx, id)
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant %s: %w", id, err)
	}
	return t, nil
}

// Plans returns every plan, smallest first, in a slice the caller may keep.
func (d *Directory) Plans(ctx context.Context) ([]Plan, error) {
	ps, err := d.plans.Get(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	return slices.Clone(ps), nil
}

// Plan returns the plan named name; ErrNotFound when there is none. Pass
// EffectivePlanName's answer to get the limits that apply to a tenant.
func (d *Directory) Plan(ctx context.Context, name string) (Plan, error) {
	ps, err := d.plans.Get(ctx, "")
	if err != nil {
		return Plan{}, fmt.Errorf("plan %s: %w", name, err)
	}
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return Plan{}, fmt.Errorf("plan %s: %w", name, ErrNotFound)
}

// MaxIPPerMinute returns the highest per-IP limit of any plan, the limit of
// the pre-authentication bucket. It cannot fail: when the store does, it
// returns the last value it found, or DefaultIPPerMinute if it never found
// one.
func (d *Directory) MaxIPPerMinute(ctx context.Context) int64 {
	ps, err := d.plans.Get(ctx, "")
	if err != nil {
		if v := d.maxIP.Load(); v > 0 {
			return v
		}
		return DefaultIPPerMinute
	}
	var m int64
	for _, p := range ps {
		m = max(m, p.IPPerMinute)
	}
	if m <= 0 {
		m = DefaultIPPerMinute
	}
	d.maxIP.Store(m)
	return m
}

// Invalidate notes what changed, as the store's change notifications name
// it: kind "tenant" with a tenant ID, "key" with a key prefix, "plan" with a
// plan name. Other kinds are not the Directory's and are ignored. A tenant
// or the plans are marked stale: read again on their next use, served as
// they were only while the store cannot be read. A key is dropped: a key
// changes only when it is revoked or deleted, so the notification is itself
// the news that it no longer works, and it must not keep working because the
// store happens to be down. A load under way for the entry is not cached,
// so the next caller reads the change.
func (d *Directory) Invalidate(kind, id string) {
	switch kind {
	case "tenant":
		d.tenants.MarkStale(id)
	case "key":
		d.keys.Drop(id)
	case "plan":
		d.plans.MarkAllStale()
	}
}

// InvalidateAll marks everything stale: for when change notifications may
// have been missed (a listener that reconnected). Keys included: what a
// notification would have said is unknown, and the store can be read again.
func (d *Directory) InvalidateAll() {
	d.keys.MarkAllStale()
	d.tenants.MarkAllStale()
	d.plans.MarkAllStale()
}

// Run writes the keys' last use every FlushEvery, all keys in one store
// call, and forgets expired entries, until ctx is cancelled; then it writes
// what is left and returns that write's error (writebehind.Loop). A failed write
// is logged and tried again at the next tick. Run it once per Directory.
func (d *Directory) Run(ctx context.Context) error {
	return writebehind.Loop{
		What: "api key last uses", Every: d.flushEvery, Timeout: storeTimeout, Flush: d.flush,
		Tick: func() {
			d.keys.Sweep()
			d.tenants.Sweep()
			d.plans.Sweep()
		},
		Log: d.log,
	}.Run(ctx)
}

// flush writes the uses noted since the last flush; when that fails, they
// are kept for the next one. Keys not used since the last flush leave the
// map.
func (d *Directory) flush(ctx context.Context) error {
	used := map[string]time.Time{}
	d.used.Take(func(id string, at int64) { used[id] = time.Unix(0, at).UTC() })
	if len(used) == 0 {
		return nil
	}
	err := d.store.TouchKeys(ctx, used)
	if err == nil {
		return nil
	}
	for id, at := range used {
		d.noteUse(id, at)
	}
	return fmt.Errorf("last use of %d keys: %w", len(used), err)
}
