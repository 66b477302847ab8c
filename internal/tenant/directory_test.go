package tenant_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/bg"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is a time source that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// countingStore is the real PostgreSQL store, instrumented: it counts the
// Directory's loads, records its successful writes of last use and reports
// every write's outcome, and can hold one key load, after it has read, until
// released.
type countingStore struct {
	tenant.Store

	keyLoads, tenantLoads, planLoads atomic.Int64

	mu      sync.Mutex
	touches []map[string]time.Time // the writes that succeeded
	// touched, when set, gets each write's outcome, unless it is full.
	touched chan error
	// hold and started, when set, are taken by the next KeyByPrefix: having
	// read, it reports on started and waits for hold to close.
	hold, started chan struct{}
}

func (s *countingStore) KeyByPrefix(ctx context.Context, prefix string) (tenant.Key, error) {
	s.keyLoads.Add(1)
	k, err := s.Store.KeyByPrefix(ctx, prefix)
	s.mu.Lock()
	hold, started := s.hold, s.started
	s.hold, s.started = nil, nil
	s.mu.Unlock()
	if hold != nil {
		started <- struct{}{}
		<-hold
	}
	return k, err
}

func (s *countingStore) Tenant(ctx context.Context, id string) (tenant.Tenant, error) {
	s.tenantLoads.Add(1)
	return s.Store.Tenant(ctx, id)
}

func (s *countingStore) Plans(ctx context.Context) ([]tenant.Plan, error) {
	s.planLoads.Add(1)
	return s.Store.Plans(ctx)
}

func (s *countingStore) TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	err := s.Store.TouchKeys(ctx, lastUsed)
	s.mu.Lock()
	if err == nil {
		s.touches = append(s.touches, maps.Clone(lastUsed))
	}
	touched := s.touched
	s.mu.Unlock()
	if touched != nil {
		select {
		case touched <- err:
		default:
		}
	}
	return err
}

// holdNextKeyLoad makes the next key load, once it has read the key, wait
// until release is called; started is ready when it is waiting.
func (s *countingStore) holdNextKeyLoad() (started <-chan struct{}, release func()) {
	hold, st := make(chan struct{}), make(chan struct{}, 1)
	s.mu.Lock()
	s.hold, s.started = hold, st
	s.mu.Unlock()
	return st, func() { close(hold) }
}

func (s *countingStore) writes() []map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.touches)
}

// db is a test's own database. The Directory reads it through store, whose
// pool goes through proxy, so that a test can cut the link for real; direct
// is the same database without the proxy, for setting up and changing what
// the Directory reads.
type db struct {
	direct *pgstore.Tenants
	pool   *pgxpool.Pool // direct's
	store  *countingStore
	proxy  *faultnet.Proxy
	acme   tenant.Tenant // on the pro plan, without keys
}

func newDB(t *testing.T) *db {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.New(t)
	proxiedDSN, proxy := pgtest.Proxied(t, dsn)
	pool, proxied := pgtest.PoolAt(t, dsn), pgtest.PoolAt(t, proxiedDSN)
	direct := pgstore.NewTenants(pool)
	acme, err := direct.CreateTenant(ctx, "Acme", tenant.PlanPro)
	if err != nil {
		t.Fatal(err)
	}
	return &db{
		direct: direct,
		pool:   pool,
		store:  &countingStore{Store: pgstore.NewTenants(proxied)},
		proxy:  proxy,
		acme:   acme,
	}
}

// addKey stores a new key of the tenant with id and returns it with its
// credential.
func (db *db) addKey(t *testing.T, tenantID string, test bool) (string, tenant.Key) {
	t.Helper()
	raw, k, err := tenant.NewKey(test)
	if err != nil {
		t.Fatal(err)
	}
	k.TenantID = tenantID
	if _, err := db.direct.CreateKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return raw, k
}

func newTestDirectory(db *db, clk *clock, cfg tenant.DirectoryConfig) *tenant.Directory {
	cfg.Store = db.store
	cfg.Now = clk.Now
	cfg.Logger = slog.New(slog.DiscardHandler)
	return tenant.NewDirectory(cfg)
}

func newRawKey(t *testing.T) (string, tenant.Key) {
	t.Helper()
	raw, k, err := tenant.NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	return raw, k
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{})
	live, liveKey := db.addKey(t, db.acme.ID, false)
	test, testKey := db.addKey(t, db.acme.ID, true)
	revoked, revokedKey := db.addKey(t, db.acme.ID, false)
	if _, err := db.direct.RevokeKey(ctx, revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	// A tenant deleted after its key was cached, the notification for the
	// tenant read first: its keys went with it (ON DELETE CASCADE), but the
	// Directory still holds the key.
	gone, err := db.direct.CreateTenant(ctx, "Gone", tenant.PlanStarter)
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := db.addKey(t, gone.ID, false)
	if _, _, err := d.Authenticate(ctx, orphan); err != nil {
		t.Fatalf("the key of a tenant not yet deleted: %v", err)
	}
	if _, err := db.pool.Exec(ctx, "DELETE FROM tenants WHERE id = $1", gone.ID); err != nil {
		t.Fatal(err)
	}
	d.Invalidate("tenant", gone.ID)
	stranger, _ := newRawKey(t)
	// The secret follows the last '_'; a prefix has none.
	wrongSecret := live[:strings.LastIndexByte(live, '_')] + stranger[strings.LastIndexByte(stranger, '_'):]

	cases := []struct {
		name    string
		bearer  string
		wantKey tenant.Key
	}{
		{"live key", live, liveKey},
		{"test key", test, testKey},
		{"empty", "", tenant.Key{}},
		{"malformed", "tg_live_nope", tenant.Key{}},
		{"unknown prefix", stranger, tenant.Key{}},
		{"known prefix, wrong secret", wrongSecret, tenant.Key{}},
		{"known prefix and secret, wrong mode", "tg_test_" + live[len("tg_live_"):], tenant.Key{}},
		{"revoked", revoked, tenant.Key{}},
		{"tenant gone", orphan, tenant.Key{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k, tn, err := d.Authenticate(context.Background(), c.bearer)
			if c.wantKey.ID == "" {
				// ErrUnauthorized itself, unwrapped: nothing says which case.
				if err != tenant.ErrUnauthorized {
					t.Fatalf("got %v, want exactly ErrUnauthorized", err)
				}
				if k.ID != "" || tn.ID != "" {
					t.Fatalf("refused, yet got key %q of tenant %q", k.ID, tn.ID)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want the key", err)
			}
			if k.ID != c.wantKey.ID || k.Test != c.wantKey.Test || tn.ID != db.acme.ID {
				t.Errorf("got key %s (test %v) of tenant %s, want %s (test %v) of %s", k.ID, k.Test, tn.ID, c.wantKey.ID, c.wantKey.Test, db.acme.ID)
			}
			if k.Hash != nil {
				t.Errorf("Authenticate handed out the key's hash")
			}
		})
	}
}

func TestAuthenticateStoreDown(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	live, _ := db.addKey(t, db.acme.ID, false)
	db.proxy.Cut()
	_, _, err := d.Authenticate(context.Background(), live)
	if err == nil || errors.Is(err, tenant.ErrUnauthorized) {
		t.Fatalf("got %v, want the store's failure, not ErrUnauthorized", err)
	}
	if err := db.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Authenticate(context.Background(), live); err != nil {
		t.Fatalf("after the store came back: %v (a failure must not be cached)", err)
	}
}

func TestConcurrentMissesLoadOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	live, _ := db.addKey(t, db.acme.ID, false)
	started, release := db.store.holdNextKeyLoad()
	const callers = 50
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, _, err := d.Authenticate(context.Background(), live)
			errs <- err
		}()
	}
	<-started
	release()
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if keys, tenants := db.store.keyLoads.Load(), db.store.tenantLoads.Load(); keys != 1 || tenants != 1 {
		t.Fatalf("%d callers: %d key loads and %d tenant loads, want 1 and 1", callers, keys, tenants)
	}
}

func TestCallerGivingUpDoesNotFailOthers(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	live, _ := db.addKey(t, db.acme.ID, false)
	started, release := db.store.holdNextKeyLoad()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, _, err := d.Authenticate(ctx, live)
		first <- err
	}()
	<-started
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: got %v, want context.Canceled", err)
	}
	second := make(chan error, 1)
	go func() {
		_, _, err := d.Authenticate(context.Background(), live)
		second <- err
	}()
	release()
	if err := <-second; err != nil {
		t.Fatalf("a caller waiting on the same load: %v", err)
	}
	if keys := db.store.keyLoads.Load(); keys != 1 {
		t.Fatalf("%d key loads, want 1", keys)
	}
}

func TestUnknownPrefixRemembered(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	clk := &clock{}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{MissTTL: 5 * time.Second})
	raw, k := newRawKey(t)
	for range 10 {
		if _, _, err := d.Authenticate(context.Background(), raw); err != tenant.ErrUnauthorized {
			t.Fatalf("unknown key: got %v, want ErrUnauthorized", err)
		}
	}
	if keys := db.store.keyLoads.Load(); keys != 1 {
		t.Fatalf("10 tries of one unknown key: %d loads, want 1", keys)
	}
	clk.Advance(5 * time.Second)
	d.Authenticate(context.Background(), raw)
	if keys := db.store.keyLoads.Load(); keys != 2 {
		t.Fatalf("after MissTTL: %d loads, want 2", keys)
	}
	// The key is created, and its notification arrives.
	k.TenantID = db.acme.ID
	if _, err := db.direct.CreateKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	d.Invalidate("key", k.Prefix)
	if _, _, err := d.Authenticate(context.Background(), raw); err != nil {
		t.Fatalf("a key created after a miss, once invalidated: %v", err)
	}
}

func TestUnknownPrefixesBounded(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{MaxMisses: 3})
	var raws []string
	for range 10 {
		raw, _ := newRawKey(t)
		raws = append(raws, raw)
		d.Authenticate(context.Background(), raw)
	}
	if n := d.MissesHeld(); n != 3 {
		t.Fatalf("10 unknown prefixes, MaxMisses 3: %d remembered, want 3", n)
	}
	for _, raw := range raws[7:] {
		d.Authenticate(context.Background(), raw)
	}
	if keys := db.store.keyLoads.Load(); keys != 10 {
		t.Fatalf("the 3 newest misses again: %d loads in all, want 10 (answered from memory)", keys)
	}
	d.Authenticate(context.Background(), raws[0])
	if keys := db.store.keyLoads.Load(); keys != 11 {
		t.Fatalf("the oldest miss again: %d loads in all, want 11 (it was forgotten)", keys)
	}
}

func TestEntriesExpireAfterTTL(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	clk := &clock{}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{TTL: 30 * time.Second})
	live, k := db.addKey(t, db.acme.ID, false)
	if _, _, err := d.Authenticate(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	// Revoked, and the notification lost.
	if _, err := db.direct.RevokeKey(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Second)
	if _, _, err := d.Authenticate(context.Background(), live); err != nil {
		t.Fatalf("within TTL: got %v, want the cached key", err)
	}
	clk.Advance(time.Second)
	if _, _, err := d.Authenticate(context.Background(), live); err != tenant.ErrUnauthorized {
		t.Fatalf("after TTL: got %v, want ErrUnauthorized", err)
	}
}

func TestInvalidateDuringLoad(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	live, k := db.addKey(t, db.acme.ID, false)
	started, release := db.store.holdNextKeyLoad()
	done := make(chan error, 1)
	go func() {
		_, _, err := d.Authenticate(context.Background(), live)
		done <- err
	}()
	<-started // the load has read the key, not yet revoked
	if _, err := db.direct.RevokeKey(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	d.Invalidate("key", k.Prefix)
	if _, _, err := d.Authenticate(context.Background(), live); err != tenant.ErrUnauthorized {
		t.Fatalf("after the invalidation, while the old load runs: got %v, want ErrUnauthorized", err)
	}
	release()
	// Answered as of before the revocation, when it asked.
	if err := <-done; err != nil {
		t.Fatalf("the caller of the old load: %v, want the key as it read it", err)
	}
	if _, _, err := d.Authenticate(context.Background(), live); err != tenant.ErrUnauthorized {
		t.Fatalf("after the old load finished: got %v, want ErrUnauthorized (its result must not be cached)", err)
	}
	if keys := db.store.keyLoads.Load(); keys != 2 {
		t.Fatalf("%d key loads, want 2", keys)
	}
}

func TestInvalidateKinds(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	ctx := context.Background()
	id := db.acme.ID
	setTenant := func(rate int64) {
		t.Helper()
		if _, err := db.direct.SetTenantLimits(ctx, id, tenant.TenantLimits{RateLimitPerMinute: rate}); err != nil {
			t.Fatal(err)
		}
	}
	setStarter := func(ip int64) {
		t.Helper()
		if _, err := db.direct.SetPlanLimits(ctx, tenant.PlanStarter, tenant.PlanLimits{IPPerMinute: &ip}); err != nil {
			t.Fatal(err)
		}
	}
	setTenant(100)
	setStarter(600)
	if _, err := d.Tenant(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Plans(ctx); err != nil {
		t.Fatal(err)
	}
	setTenant(200)
	setStarter(900)

	d.Invalidate("policy", id) // not the Directory's
	if tn, _ := d.Tenant(ctx, id); tn.RateLimitPerMinute != 100 {
		t.Fatalf("a policy notification dropped the tenant")
	}
	d.Invalidate("tenant", id)
	if tn, _ := d.Tenant(ctx, id); tn.RateLimitPerMinute != 200 {
		t.Fatalf("after tenant:%s: rate limit %d, want 200", id, tn.RateLimitPerMinute)
	}
	if p, _ := d.Plan(ctx, tenant.PlanStarter); p.IPPerMinute != 600 {
		t.Fatalf("a tenant notification dropped the plans")
	}
	d.Invalidate("plan", tenant.PlanStarter)
	if p, _ := d.Plan(ctx, tenant.PlanStarter); p.IPPerMinute != 900 {
		t.Fatalf("after plan:starter: ip_per_minute %d, want 900", p.IPPerMinute)
	}
	if _, err := d.Plan(ctx, "platinum"); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("unknown plan: got %v, want ErrNotFound", err)
	}

	setTenant(300)
	setStarter(700)
	d.InvalidateAll()
	if tn, _ := d.Tenant(ctx, id); tn.RateLimitPerMinute != 300 {
		t.Fatalf("after InvalidateAll: tenant rate limit %d, want 300", tn.RateLimitPerMinute)
	}
	if p, _ := d.Plan(ctx, tenant.PlanStarter); p.IPPerMinute != 700 {
		t.Fatalf("after InvalidateAll: ip_per_minute %d, want 700", p.IPPerMinute)
	}
}

func TestMaxIPPerMinute(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	ctx := context.Background()
	top := int64(900_000) // above every plan the migrations seed
	if _, err := db.direct.SetPlanLimits(ctx, tenant.PlanEnterprise, tenant.PlanLimits{IPPerMinute: &top}); err != nil {
		t.Fatal(err)
	}
	if got := d.MaxIPPerMinute(ctx); got != top {
		t.Fatalf("got %d, want %d", got, top)
	}
	db.proxy.Cut()
	d.InvalidateAll()
	if got := d.MaxIPPerMinute(ctx); got != top {
		t.Fatalf("store down: got %d, want the last value, %d", got, top)
	}
	cold := newTestDirectory(db, &clock{}, tenant.DirectoryConfig{})
	if got := cold.MaxIPPerMinute(ctx); got != tenant.DefaultIPPerMinute {
		t.Fatalf("store down from the start: got %d, want DefaultIPPerMinute", got)
	}
	if n := db.store.planLoads.Load(); n != 3 {
		t.Fatalf("%d plan loads, want 3: the failures must have asked the store", n)
	}
}

// lastUsed returns the last use of each of the tenant's keys, as stored.
func lastUsed(t *testing.T, db *db, tenantID string) map[string]time.Time {
	t.Helper()
	keys, err := db.direct.Keys(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]time.Time{}
	for _, k := range keys {
		if k.LastUsedAt != nil {
			m[k.ID] = k.LastUsedAt.UTC()
		}
	}
	return m
}

func TestRunWritesUsesInOneFlush(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{FlushEvery: time.Hour})
	var raws []string
	want := map[string]time.Time{}
	for range 3 {
		raw, k := db.addKey(t, db.acme.ID, false)
		raws = append(raws, raw)
		want[k.ID] = clk.Now().Add(100 * time.Millisecond) // the last of 100 uses
	}
	stop := bg.Run(d.Run)
	for range 100 {
		clk.Advance(time.Millisecond)
		for _, raw := range raws {
			if _, _, err := d.Authenticate(context.Background(), raw); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	writes := db.store.writes()
	if len(writes) != 1 {
		t.Fatalf("300 uses of 3 keys: %d writes, want 1", len(writes))
	}
	if !maps.Equal(writes[0], want) {
		t.Fatalf("written %v, want %v", writes[0], want)
	}
	if got := lastUsed(t, db, db.acme.ID); !maps.Equal(got, want) {
		t.Fatalf("stored last use %v, want %v", got, want)
	}
}

func TestFailedFlushIsRetried(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	// Run's ticker is real time; FlushEvery short so the test need not wait.
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{FlushEvery: 5 * time.Millisecond})
	a, ka := db.addKey(t, db.acme.ID, false)
	b, kb := db.addKey(t, db.acme.ID, false)
	ctx := context.Background()
	for _, raw := range []string{a, b} {
		if _, _, err := d.Authenticate(ctx, raw); err != nil {
			t.Fatal(err)
		}
	}
	touched := make(chan error, 1)
	db.store.mu.Lock()
	db.store.touched = touched
	db.store.mu.Unlock()
	db.proxy.Cut()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	for err := range touched {
		if err != nil {
			break // a write failed
		}
		t.Fatal("a write succeeded with the link cut")
	}
	// b is used again, from memory, while the writes fail.
	clk.Advance(time.Second)
	if _, _, err := d.Authenticate(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := db.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	for err := range touched {
		if err == nil {
			break // a write succeeded
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := map[string]time.Time{ka.ID: t0, kb.ID: t0.Add(time.Second)}
	if writes := db.store.writes(); len(writes) != 1 || !maps.Equal(writes[0], want) {
		t.Fatalf("after failed writes: writes %v, want one of %v", writes, want)
	}
	if got := lastUsed(t, db, db.acme.ID); !maps.Equal(got, want) {
		t.Fatalf("stored last use %v, want %v", got, want)
	}
}

// TestDirectoryServesTheLastReadThroughAnOutage: a tenant, key and plans whose
// change notifications arrive just before the database becomes unreachable,
// or whose TTL passes during the outage, are served as last read, not
// forgotten; once the database answers again the changes made meanwhile are
// read within about a second. A key whose own notification arrived (a
// revocation) is not served from memory: it fails while it cannot be read.
func TestDirectoryServesTheLastReadThroughAnOutage(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{TTL: 30 * time.Second})
	ctx := context.Background()
	live, _ := db.addKey(t, db.acme.ID, false)
	revoked, rk := db.addKey(t, db.acme.ID, false)
	serves := func(what string) {
		t.Helper()
		for _, raw := range []string{live} {
			if _, tn, err := d.Authenticate(ctx, raw); err != nil || tn.ID != db.acme.ID {
				t.Fatalf("%s: Authenticate: %v, %s; want the key and tenant last read", what, err, tn.ID)
			}
		}
		if p, err := d.Plan(ctx, tenant.PlanPro); err != nil || p.Name != tenant.PlanPro {
			t.Fatalf("%s: Plan: %v; want the plans last read", what, err)
		}
	}
	serves("before the outage")
	if _, _, err := d.Authenticate(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	if _, err := db.direct.RevokeKey(ctx, rk.ID); err != nil {
		t.Fatal(err)
	}
	// Changes' notifications, just before the outage.
	d.Invalidate("tenant", db.acme.ID)
	d.Invalidate("plan", tenant.PlanPro)
	d.Invalidate("key", rk.Prefix)
	db.proxy.Cut()
	serves("invalidated, database cut off")
	serves("asked again")
	if _, _, err := d.Authenticate(ctx, revoked); err == nil {
		t.Fatal("a key whose revocation was notified authenticated while the database was cut off")
	}
	clk.Advance(31 * time.Second)
	serves("past the TTL, database cut off")

	// A change this Directory cannot read yet.
	if _, err := db.direct.SetTenantLimits(ctx, db.acme.ID, tenant.TenantLimits{RateLimitPerMinute: 250}); err != nil {
		t.Fatal(err)
	}
	if err := db.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the change made during the outage", func() bool {
		clk.Advance(100 * time.Millisecond)
		_, tn, err := d.Authenticate(ctx, live)
		return err == nil && tn.RateLimitPerMinute == 250
	})
	if _, _, err := d.Authenticate(ctx, revoked); !errors.Is(err, tenant.ErrUnauthorized) {
		t.Fatalf("the revoked key after the outage: %v, want ErrUnauthorized", err)
	}
}

// TestAuthenticateExpiredKey: a key works until its expiry and from that
// instant is refused as a revoked key is (ErrUnauthorized), by an
// *ExpiredKeyError saying when it expired.
func TestAuthenticateExpiredKey(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{})
	raw, k, err := tenant.NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	expiry := clk.Now().Add(time.Hour)
	k.TenantID, k.Name, k.ExpiresAt = db.acme.ID, "nightly export", &expiry
	if _, err := db.direct.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	got, _, err := d.Authenticate(ctx, raw)
	if err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	if got.Name != "nightly export" || got.ExpiresAt == nil || !got.ExpiresAt.Equal(expiry) {
		t.Errorf("key name %q, expiry %v; want %q, %v", got.Name, got.ExpiresAt, "nightly export", expiry)
	}
	clk.Advance(time.Hour)
	_, _, err = d.Authenticate(ctx, raw)
	var expired *tenant.ExpiredKeyError
	if !errors.Is(err, tenant.ErrUnauthorized) || !errors.As(err, &expired) || !expired.ExpiredAt.Equal(expiry) {
		t.Fatalf("at its expiry: %v, want an ExpiredKeyError at %v wrapping ErrUnauthorized", err, expiry)
	}
	// Whoever does not hold the whole key learns nothing of the expiry.
	wrong := raw[:len(raw)-1] + "a"
	if wrong == raw {
		wrong = raw[:len(raw)-1] + "b"
	}
	if _, _, err := d.Authenticate(ctx, wrong); err != tenant.ErrUnauthorized {
		t.Errorf("wrong secret of an expired key: %v, want exactly ErrUnauthorized", err)
	}
}
