package policy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// countingLoader is the real PostgreSQL store, instrumented: it counts the
// Catalog's loads and, when gate is set, holds each load on it. Set its
// fields before the Catalog first loads.
type countingLoader struct {
	policy.Loader
	loads atomic.Int64
	// gate, when set, holds each load until a value arrives on it. The load
	// reports its tenant on started (when set) and waits either before it
	// reads, giving up when its ctx ends (the store then meets the dead
	// ctx), or, with readFirst, after it has read.
	gate      chan struct{}
	started   chan string
	readFirst bool
}

func (l *countingLoader) LoadSet(ctx context.Context, tenantID string) (policy.Set, error) {
	l.loads.Add(1)
	if l.gate == nil {
		return l.Loader.LoadSet(ctx, tenantID)
	}
	if l.readFirst {
		s, err := l.Loader.LoadSet(ctx, tenantID)
		l.report(tenantID)
		<-l.gate
		return s, err
	}
	l.report(tenantID)
	select {
	case <-l.gate:
	case <-ctx.Done():
	}
	return l.Loader.LoadSet(ctx, tenantID)
}

func (l *countingLoader) report(tenantID string) {
	if l.started != nil {
		l.started <- tenantID
	}
}

// db is a test's own database. The Catalog reads it through loader, whose
// pool goes through proxy, so that a test can cut the link for real;
// policies is the same database without the proxy, for writing what the
// Catalog reads.
type db struct {
	policies *pgstore.Policies
	tenants  *pgstore.Tenants
	loader   *countingLoader
	proxy    *faultnet.Proxy
}

func newDB(t *testing.T) *db {
	t.Helper()
	dsn := pgtest.New(t)
	proxiedDSN, proxy := pgtest.Proxied(t, dsn)
	pool, proxied := pgtest.PoolAt(t, dsn), pgtest.PoolAt(t, proxiedDSN)
	return &db{
		policies: pgstore.NewPolicies(pool),
		tenants:  pgstore.NewTenants(pool),
		loader:   &countingLoader{Loader: pgstore.NewPolicies(proxied)},
		proxy:    proxy,
	}
}

// newTenant creates a tenant and returns its ID.
func (db *db) newTenant(t *testing.T, name string) string {
	t.Helper()
	tn, err := db.tenants.CreateTenant(context.Background(), name, tenant.PlanStarter)
	if err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

// setLimit stores the tenant's policy "p" with limit n, so that a Set tells
// which version of the tenant's policies it was loaded from.
func (db *db) setLimit(t *testing.T, tenantID string, n int64) {
	t.Helper()
	p, err := policy.Parse("p", fmt.Appendf(nil, `{"limit":%d,"window":"1m"}`, n))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.policies.PutPolicy(context.Background(), tenantID, p); err != nil {
		t.Fatal(err)
	}
}

// limitOf is the limit of policy "p" in s.
func limitOf(t *testing.T, s policy.Set) int64 {
	t.Helper()
	p, ok := s.Lookup("p")
	if !ok {
		t.Fatalf("the set lacks policy p")
	}
	return p.Limit
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestCatalogCachesAndInvalidates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b := db.newTenant(t, "A"), db.newTenant(t, "B")
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{TTL: 30 * time.Second, Now: clk.now})

	// Each write below is one the Catalog is not told of, unless the test
	// invalidates: what For serves tells which load it comes from.
	want := func(tenant string, limit int64) {
		t.Helper()
		s, err := c.For(ctx, tenant)
		if err != nil {
			t.Fatalf("For(%s): %v", tenant, err)
		}
		if got := limitOf(t, s); got != limit {
			t.Errorf("For(%s) served limit %d, want %d", tenant, got, limit)
		}
	}
	db.setLimit(t, a, 1)
	db.setLimit(t, b, 1)
	want(a, 1)
	db.setLimit(t, a, 2)
	want(a, 1) // cached
	want(b, 1)
	c.Invalidate(a)
	want(a, 2)
	db.setLimit(t, b, 2)
	want(b, 1) // untouched by a's invalidation
	clk.add(29 * time.Second)
	db.setLimit(t, a, 3)
	want(a, 2)
	clk.add(time.Second) // 30 s after a's load: stale
	want(a, 3)
	want(b, 2) // loaded 30 s ago as well
	db.setLimit(t, a, 4)
	db.setLimit(t, b, 3)
	c.InvalidateAll()
	want(a, 4)
	want(b, 3)
	if got := db.loader.loads.Load(); got != 7 {
		t.Errorf("%d loads, want 7", got)
	}
}

func TestCatalogSharesOneLoad(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := db.newTenant(t, "A")
	db.setLimit(t, a, 1)
	db.loader.gate, db.loader.started = make(chan struct{}), make(chan string, 100)
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{})
	const callers = 20
	var wg sync.WaitGroup
	got := make([]int64, callers)
	for i := range callers {
		wg.Go(func() {
			s, err := c.For(context.Background(), a)
			if err != nil {
				t.Errorf("For: %v", err)
				return
			}
			got[i] = limitOf(t, s)
		})
	}
	<-db.loader.started
	// Every caller either waits on the one load or asks after it and finds
	// its result cached.
	close(db.loader.gate)
	wg.Wait()
	for i, n := range got {
		if n != 1 {
			t.Errorf("caller %d got limit %d, want 1", i, n)
		}
	}
	if n := db.loader.loads.Load(); n != 1 {
		t.Errorf("%d loads for %d concurrent callers, want 1", n, callers)
	}
}

func TestCatalogDropsALoadInvalidatedInFlight(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := db.newTenant(t, "A")
	db.setLimit(t, a, 1)
	db.loader.gate, db.loader.started, db.loader.readFirst = make(chan struct{}, 1), make(chan string, 10), true
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{})
	done := make(chan policy.Set)
	go func() {
		s, err := c.For(context.Background(), a)
		if err != nil {
			t.Errorf("For: %v", err)
		}
		done <- s
	}()
	<-db.loader.started
	// The change lands after load 1 read, and before it returns.
	db.setLimit(t, a, 2)
	c.Invalidate(a)
	db.loader.gate <- struct{}{}
	if n := limitOf(t, <-done); n != 1 {
		t.Errorf("the caller that started load 1 got limit %d, want 1 (what load 1 read)", n)
	}
	db.loader.gate <- struct{}{}
	s, err := c.For(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if n := limitOf(t, s); n != 2 {
		t.Errorf("after the invalidation For served limit %d, want a new load's 2", n)
	}
	if n := db.loader.loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2", n)
	}
}

func TestCatalogDoesNotCacheErrors(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := db.newTenant(t, "A")
	db.setLimit(t, a, 1)
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{})
	db.proxy.Cut()
	for range 2 {
		if _, err := c.For(context.Background(), a); err == nil {
			t.Fatal("For with the database cut off: got no error")
		}
	}
	if n := db.loader.loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2: a failure must not be cached", n)
	}
	if err := db.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	s, err := c.For(context.Background(), a)
	if err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if n := limitOf(t, s); n != 1 {
		t.Errorf("after recovery: limit %d, want 1", n)
	}
}

func TestCatalogWaiterOutlivesLeader(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := db.newTenant(t, "A")
	db.setLimit(t, a, 1)
	db.loader.gate, db.loader.started = make(chan struct{}), make(chan string, 10)
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{})
	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error)
	go func() {
		_, err := c.For(leaderCtx, a)
		leaderErr <- err
	}()
	<-db.loader.started
	waiter := make(chan policy.Set)
	go func() {
		s, err := c.For(context.Background(), a)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiter <- s
	}()
	// The load runs detached from the caller that started it: the leader
	// giving up fails the leader alone, and the waiter gets that load's
	// Set, whether it joined before or after the leader gave up.
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: got %v, want context.Canceled", err)
	}
	close(db.loader.gate)
	if n := limitOf(t, <-waiter); n != 1 {
		t.Errorf("waiter got limit %d, want 1", n)
	}
	if n := db.loader.loads.Load(); n != 1 {
		t.Errorf("%d loads, want 1: the leader's, which outlived it", n)
	}
}

func TestCatalogWaiterGivesUp(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := db.newTenant(t, "A")
	db.loader.gate, db.loader.started = make(chan struct{}), make(chan string, 10)
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{})
	leader := make(chan error, 1)
	go func() {
		_, err := c.For(context.Background(), a)
		leader <- err
	}()
	<-db.loader.started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.For(ctx, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	close(db.loader.gate)
	if err := <-leader; err != nil {
		t.Errorf("the leader, still waiting: %v", err)
	}
}

func TestCatalogIsBounded(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{MaxTenants: 3})
	var last string
	for _, name := range []string{"A", "B", "C", "D", "E"} {
		last = db.newTenant(t, name)
		if _, err := c.For(context.Background(), last); err != nil {
			t.Fatal(err)
		}
		if n := c.Cached(); n > 3 {
			t.Fatalf("%d tenants cached, want at most 3", n)
		}
	}
	// The latest is always kept.
	before := db.loader.loads.Load()
	if _, err := c.For(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if db.loader.loads.Load() != before {
		t.Error("the tenant just loaded was evicted")
	}
}

func TestCatalogBoundsTheOverridesItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{MaxOverrides: 25})
	var ids []string
	for _, name := range []string{"A", "B", "C", "D"} {
		id := db.newTenant(t, name)
		db.setLimit(t, id, 1)
		for i := range 10 {
			o := policy.Override{Pattern: fmt.Sprintf("user-%d", i), Limit: 5}
			if _, err := db.policies.PutOverride(ctx, id, "p", o); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
		if _, err := c.For(ctx, id); err != nil {
			t.Fatal(err)
		}
		if n := c.CachedOverrides(); n > 25 {
			t.Fatalf("after %s: %d overrides cached, want at most 25", name, n)
		}
	}
	if got := c.Cached(); got != 2 {
		t.Errorf("%d tenants cached, want 2 (10 overrides each under a bound of 25)", got)
	}
	// The latest is always kept. An invalidated Set stays (stale, for an
	// outage) with its weight, counted once when it is read again.
	before := db.loader.loads.Load()
	if _, err := c.For(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if db.loader.loads.Load() != before {
		t.Error("the tenant just loaded was evicted")
	}
	c.Invalidate(ids[3])
	if got, want := c.CachedOverrides(), 10*c.Cached(); got != want {
		t.Errorf("%d overrides counted after an invalidation, want %d", got, want)
	}
	if _, err := c.For(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if got, want := c.CachedOverrides(), 10*c.Cached(); got != want {
		t.Errorf("%d overrides counted after the invalidated Set was read again, want %d", got, want)
	}
	c.InvalidateAll()
	if got, want := c.CachedOverrides(), 10*c.Cached(); got != want || got > 25 {
		t.Errorf("%d overrides counted after InvalidateAll, want %d, at most 25", got, want)
	}
}

// TestCatalogServesTheLastSetThroughAnOutage: a Set whose change notification
// arrives just before the database becomes unreachable, or whose TTL passes
// during the outage, is served as last read, not forgotten; once the database
// answers again the changes made meanwhile are read within about a second,
// and at once after InvalidateAll (a change listener that reconnected).
func TestCatalogServesTheLastSetThroughAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a := db.newTenant(t, "A")
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	c := policy.NewCatalog(db.loader, policy.CatalogConfig{TTL: 30 * time.Second, Now: clk.now})
	want := func(what string, limit int64, stale bool) {
		t.Helper()
		s, err := c.For(ctx, a)
		if err != nil {
			t.Fatalf("%s: For: %v, want the Set last read", what, err)
		}
		if got := limitOf(t, s); got != limit {
			t.Errorf("%s: limit %d, want %d", what, got, limit)
		}
		// A Set served because it could not be read again says so: a
		// policy it lacks may have been made since.
		if s.Stale() != stale {
			t.Errorf("%s: Stale() %v, want %v", what, s.Stale(), stale)
		}
	}
	db.setLimit(t, a, 1)
	want("before the outage", 1, false)
	c.Invalidate(a) // a change's notification, just before the outage
	db.proxy.Cut()
	want("invalidated, database cut off", 1, true)
	want("asked again", 1, true)
	clk.add(31 * time.Second)
	want("past the TTL, database cut off", 1, true)

	db.setLimit(t, a, 2) // a change this Catalog cannot read yet
	if err := db.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the change made during the outage", func() bool {
		clk.add(100 * time.Millisecond)
		s, err := c.For(ctx, a)
		return err == nil && limitOf(t, s) == 2
	})
	db.setLimit(t, a, 3) // its notification missed
	c.InvalidateAll()
	want("after InvalidateAll", 3, false)
}
