package envoyconf_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// countingLoader is the real PostgreSQL store, counting the Catalog's loads
// and the bytes of the files they fetched.
type countingLoader struct {
	envoyconf.Loader
	loads, fetched atomic.Int64
}

func (l *countingLoader) LoadDomains(ctx context.Context, tenantID string, held []int64) ([]envoyconf.Domain, error) {
	l.loads.Add(1)
	ds, err := l.Loader.LoadDomains(ctx, tenantID, held)
	for _, d := range ds {
		l.fetched.Add(int64(len(d.Source)))
	}
	return ds, err
}

// db is a test's own database. The Catalog reads it through loader, whose
// pool goes through proxy, so that a test can cut the link for real; store
// is the same database without the proxy, for writing what the Catalog
// reads.
type db struct {
	pool   *pgxpool.Pool
	store  *pgstore.EnvoyDomains
	loader *countingLoader
	proxy  *faultnet.Proxy
}

func newDB(t *testing.T) *db {
	t.Helper()
	dsn := pgtest.New(t)
	proxiedDSN, proxy := pgtest.Proxied(t, dsn)
	pool := pgtest.PoolAt(t, dsn)
	return &db{
		pool:   pool,
		store:  pgstore.NewEnvoyDomains(pool),
		loader: &countingLoader{Loader: pgstore.NewEnvoyDomains(pgtest.PoolAt(t, proxiedDSN))},
		proxy:  proxy,
	}
}

func (db *db) tenant(t *testing.T) string {
	t.Helper()
	return pgtest.Tenant(t, db.pool, tenant.PlanStarter)
}

// file is a file of domain d whose one rule, for key "k", allows n
// requests a minute, so that a Config tells which version it was parsed
// from.
func file(d string, n int) []byte {
	return fmt.Appendf(nil, "domain: %s\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", d, n)
}

// put stores file(d, n) for the tenant behind the Catalog's back.
func (db *db) put(t *testing.T, tenantID, d string, n int) {
	t.Helper()
	if _, err := db.store.PutDomain(context.Background(), tenantID, envoyconf.Domain{Name: d, Source: file(d, n), Rules: 1}); err != nil {
		t.Fatal(err)
	}
}

// limitOf is the limit of domain d's rule in ds, 0 when ds lack d.
func limitOf(t *testing.T, ds envoyconf.Domains, d string) int64 {
	t.Helper()
	c, ok := ds.Lookup(d)
	if !ok {
		return 0
	}
	m := c.Match([]envoyconf.Entry{{Key: "k", Value: "v"}})
	if m.Rule == nil {
		t.Fatalf("domain %s: no rule matched", d)
	}
	return m.Rule.Policy.Limit
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
	a, b := db.tenant(t), db.tenant(t)
	clk := &clock{t: time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)}
	c := envoyconf.NewCatalog(db.loader, envoyconf.CatalogConfig{TTL: 30 * time.Second, Now: clk.now})
	want := func(tenant, d string, limit int64) {
		t.Helper()
		ds, err := c.For(ctx, tenant)
		if err != nil {
			t.Fatalf("For(%s): %v", tenant, err)
		}
		if got := limitOf(t, ds, d); got != limit {
			t.Errorf("For(%s) served domain %s with limit %d, want %d", tenant, d, got, limit)
		}
	}
	want(a, "edge", 0) // none yet
	db.put(t, a, "edge", 1)
	db.put(t, b, "edge", 1)
	want(a, "edge", 0) // cached
	c.Invalidate(a)
	want(a, "edge", 1)
	want(b, "edge", 1)
	db.put(t, a, "edge", 2)
	db.put(t, a, "api", 5)
	want(a, "edge", 1)
	want(b, "edge", 1) // b's own, untouched by a's
	clk.add(30 * time.Second)
	want(a, "edge", 2)
	want(a, "api", 5)
	if err := db.store.DeleteDomain(ctx, a, "edge"); err != nil {
		t.Fatal(err)
	}
	c.InvalidateAll()
	want(a, "edge", 0)
	want(a, "api", 5)
	if got := db.loader.loads.Load(); got != 5 {
		t.Errorf("%d loads, want 5", got)
	}
}

// TestCatalogReparsesOnlyWhatChanged: a reload fetches and parses only the
// files changed since the last load; the others' Configs are kept as they
// are.
func TestCatalogReparsesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a := db.tenant(t)
	db.put(t, a, "edge", 1)
	db.put(t, a, "api", 1)
	c := envoyconf.NewCatalog(db.loader, envoyconf.CatalogConfig{})
	configs := func() (edge, api *envoyconf.Config) {
		t.Helper()
		ds, err := c.For(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		edge, _ = ds.Lookup("edge")
		api, _ = ds.Lookup("api")
		return edge, api
	}
	edge1, api1 := configs()
	if got, want := db.loader.fetched.Load(), int64(len(file("edge", 1))+len(file("api", 1))); got != want {
		t.Errorf("the first load fetched %d bytes, want %d", got, want)
	}
	c.Invalidate(a)
	if edge, api := configs(); edge != edge1 || api != api1 || db.loader.loads.Load() != 2 {
		t.Errorf("reloaded without a change: %d loads, Configs kept %v %v; want 2 loads, both kept", db.loader.loads.Load(), edge == edge1, api == api1)
	}
	db.loader.fetched.Store(0)
	db.put(t, a, "edge", 2)
	c.Invalidate(a)
	edge2, api2 := configs()
	if api2 != api1 || edge2 == edge1 || edge2.Rules[0].Policy.Limit != 2 {
		t.Errorf("after edge changed: edge parsed again %v, api kept %v; want true, true", edge2 != edge1, api2 == api1)
	}
	if got, want := db.loader.fetched.Load(), int64(len(file("edge", 2))); got != want {
		t.Errorf("the reload after edge changed fetched %d bytes, want edge's %d", got, want)
	}
	// Deleted and put again as it was: a new version, parsed again.
	if err := db.store.DeleteDomain(ctx, a, "api"); err != nil {
		t.Fatal(err)
	}
	db.put(t, a, "api", 1)
	c.Invalidate(a)
	if _, api3 := configs(); api3 == api1 || api3 == nil {
		t.Error("api put again: its old Config served")
	}
}

// TestCatalogSkipsAFileThatNoLongerParses: a stored file Parse refuses (as
// after a bound tightened since its upload) leaves its domain out, is logged
// once with its tenant and domain, and leaves the tenant's other domains
// alone.
func TestCatalogSkipsAFileThatNoLongerParses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a := db.tenant(t)
	db.put(t, a, "good", 3)
	for _, bad := range []struct{ domain, source string }{
		{"bad-yaml", "domain: bad-yaml\ndescriptors: [\n"},
		{"bad-domain", "domain: another\n"},
		{"bad-limit", "domain: bad-limit\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 99999999999}\n"},
		{"empty", ""},
	} {
		if _, err := db.pool.Exec(ctx, `INSERT INTO envoy_domains (tenant_id, domain, source, rules) VALUES ($1, $2, $3, 1)`,
			a, bad.domain, bad.source); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logbuf.Buffer{}
	c := envoyconf.NewCatalog(db.loader, envoyconf.CatalogConfig{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ds, err := c.For(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 1 || limitOf(t, ds, "good") != 3 {
		t.Errorf("For served %d domains, good's limit %d; want good alone, limit 3", ds.Len(), limitOf(t, ds, "good"))
	}
	for _, d := range []string{"bad-yaml", "bad-domain", "bad-limit", "empty"} {
		if _, ok := ds.Lookup(d); ok {
			t.Errorf("domain %s served", d)
		}
		if !strings.Contains(logs.String(), "domain="+d+" ") || !strings.Contains(logs.String(), "tenant_id="+a) {
			t.Errorf("domain %s not logged with its tenant:\n%s", d, logs)
		}
	}
	// Reloaded, the same files are neither fetched nor logged again.
	c.Invalidate(a)
	db.put(t, a, "good", 4)
	c.Invalidate(a)
	if ds, err = c.For(ctx, a); err != nil || ds.Len() != 1 || limitOf(t, ds, "good") != 4 {
		t.Errorf("after a reload: %v, %d domains", err, ds.Len())
	}
	if n := strings.Count(logs.String(), `level=ERROR msg="stored envoy configuration does not parse; its domain is left out"`); n != 4 {
		t.Errorf("%d errors logged, want 4:\n%s", n, logs)
	}
}

// TestCatalogServesTheLastDomainsThroughAnOutage: Domains invalidated just
// before the database becomes unreachable, or past their TTL during the
// outage, are served as last read (Stale), not forgotten; once the
// database answers again the changes made meanwhile are read within about
// a second.
func TestCatalogServesTheLastDomainsThroughAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a := db.tenant(t)
	clk := &clock{t: time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)}
	c := envoyconf.NewCatalog(db.loader, envoyconf.CatalogConfig{TTL: 30 * time.Second, Now: clk.now})
	want := func(what string, limit int64, stale bool) {
		t.Helper()
		ds, err := c.For(ctx, a)
		if err != nil {
			t.Fatalf("%s: For: %v, want the Domains last read", what, err)
		}
		if got := limitOf(t, ds, "edge"); got != limit {
			t.Errorf("%s: limit %d, want %d", what, got, limit)
		}
		if ds.Stale() != stale {
			t.Errorf("%s: Stale() %v, want %v", what, ds.Stale(), stale)
		}
	}
	db.put(t, a, "edge", 1)
	want("before the outage", 1, false)
	c.Invalidate(a)
	db.proxy.Cut()
	want("invalidated, database cut off", 1, true)
	clk.add(31 * time.Second)
	want("past the TTL, database cut off", 1, true)
	// A tenant never read has nothing to fall back on: an error, not
	// empty Domains that would pass its requests as unconfigured.
	if _, err := c.For(ctx, db.tenant(t)); err == nil || errors.Is(err, policy.ErrNotFound) {
		t.Errorf("a tenant never read, database cut off: %v, want the store's failure", err)
	}

	db.put(t, a, "edge", 2)
	if err := db.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the change made during the outage", func() bool {
		clk.add(100 * time.Millisecond)
		ds, err := c.For(ctx, a)
		return err == nil && limitOf(t, ds, "edge") == 2
	})
	want("after the outage", 2, false)
}

// TestCatalogBoundsTheBytesItHolds: the files behind the Domains kept stay
// within MaxBytes; the tenant just loaded is kept.
func TestCatalogBoundsTheBytesItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	size := len(file("edge", 1))
	c := envoyconf.NewCatalog(db.loader, envoyconf.CatalogConfig{MaxBytes: 5 * size / 2})
	var last string
	for range 4 {
		last = db.tenant(t)
		db.put(t, last, "edge", 1)
		if _, err := c.For(ctx, last); err != nil {
			t.Fatal(err)
		}
		if got := c.CachedBytes(); got > 5*size/2 {
			t.Fatalf("%d bytes of files cached, want at most %d", got, 5*size/2)
		}
	}
	if got := c.Cached(); got != 2 {
		t.Errorf("%d tenants cached, want 2", got)
	}
	before := db.loader.loads.Load()
	if _, err := c.For(ctx, last); err != nil {
		t.Fatal(err)
	}
	if db.loader.loads.Load() != before {
		t.Error("the tenant just loaded was dropped")
	}
}

// auditLog collects a Service's audit entries.
type auditLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *auditLog) record(_ context.Context, tenantID, kind string, detail map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf("%s %s %v %v", tenantID, kind, detail["domain"], detail["rules"]))
}

// TestServiceInvalidatesAndAudits: a change through the Service reaches
// the next For of its instance's Catalog at once, and is audited; what it
// refuses changes nothing and audits nothing.
func TestServiceInvalidatesAndAudits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a := db.tenant(t)
	c := envoyconf.NewCatalog(db.loader, envoyconf.CatalogConfig{TTL: time.Hour})
	log := &auditLog{}
	svc := envoyconf.Service{Store: db.store, Catalog: c, Audit: log.record}
	if _, err := c.For(ctx, a); err != nil {
		t.Fatal(err)
	}
	d, err := svc.Put(ctx, a, "edge", file("edge", 7))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "edge" || d.Rules != 1 || d.CreatedAt.IsZero() {
		t.Errorf("Put returned %+v", d)
	}
	ds, err := c.For(ctx, a)
	if err != nil || limitOf(t, ds, "edge") != 7 {
		t.Errorf("For after Put: %v, limit %d, want 7", err, limitOf(t, ds, "edge"))
	}
	if conf, err := c.Config(ctx, a, "edge"); err != nil || conf == nil || conf.Rules[0].Policy.Limit != 7 {
		t.Errorf("Config after Put: %v, %v", conf, err)
	}
	got, err := svc.Get(ctx, a, "edge")
	if err != nil || string(got.Source) != string(file("edge", 7)) {
		t.Errorf("Get: %q, %v", got.Source, err)
	}

	utf16File := func() []byte {
		var b []byte
		b = append(b, 0xff, 0xfe)
		for _, u := range utf16.Encode([]rune(string(file("edge", 9)))) {
			b = append(b, byte(u), byte(u>>8))
		}
		return b
	}()
	for _, tc := range []struct {
		name, domain string
		src          []byte
		want         func(error) bool
	}{
		{"a domain with a slash", "a/b", file("a/b", 1), func(err error) bool {
			fe, ok := errors.AsType[*policy.FieldError](err)
			return ok && fe.Field == "domain"
		}},
		{"a file with an error at line 6", "edge", []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: lots\n"), func(err error) bool {
			e, ok := errors.AsType[*envoyconf.Error](err)
			return ok && e.Line == 6 && errors.Is(err, envoyconf.ErrInvalid)
		}},
		{"a file of another domain", "edge", file("api", 1), func(err error) bool {
			e, ok := errors.AsType[*envoyconf.Error](err)
			return ok && e.Line == 1
		}},
		{"a UTF-16 file", "edge", utf16File, func(err error) bool {
			e, ok := errors.AsType[*envoyconf.Error](err)
			return ok && strings.Contains(e.Reason, "UTF-8")
		}},
	} {
		if _, err := svc.Put(ctx, a, tc.domain, tc.src); !tc.want(err) {
			t.Errorf("%s: Put: %v", tc.name, err)
		}
	}
	if got, err := svc.Get(ctx, a, "edge"); err != nil || string(got.Source) != string(file("edge", 7)) {
		t.Errorf("after the refusals: %q, %v, want the file put", got.Source, err)
	}

	if err := svc.Delete(ctx, a, "edge"); err != nil {
		t.Fatal(err)
	}
	ds, err = c.For(ctx, a)
	if err != nil || ds.Len() != 0 {
		t.Errorf("For after Delete: %d domains, %v", ds.Len(), err)
	}
	if conf, err := c.Config(ctx, a, "edge"); err != nil || conf != nil {
		t.Errorf("Config after Delete: %v, %v; want nil, nil", conf, err)
	}
	if err := svc.Delete(ctx, a, "edge"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("deleting again: %v, want not found", err)
	}
	want := []string{a + " envoy_domain_put edge 1", a + " envoy_domain_deleted edge <nil>"}
	if fmt.Sprint(log.entries) != fmt.Sprint(want) {
		t.Errorf("audited %q, want %q", log.entries, want)
	}
}
