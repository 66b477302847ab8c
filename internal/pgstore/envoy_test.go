package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// envoyFile is a file of domain d, as a tenant would write it, with rules
// rate_limit blocks.
func envoyFile(d string, rules int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\r\ndescriptors:\r\n", d)
	for i := range rules {
		fmt.Fprintf(&b, "  - key: k%d   # kept as written\r\n    rate_limit: {unit: minute, requests_per_unit: %d}\r\n", i, i+1)
	}
	return []byte(b.String())
}

func TestEnvoyDomainRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s, tid := pgstore.NewEnvoyDomains(pool), pgtest.Tenant(t, pool, tenant.PlanStarter)

	if ds, err := s.ListDomains(ctx, tid); err != nil || len(ds) != 0 {
		t.Fatalf("a new tenant's domains: %v, %v", ds, err)
	}
	src := envoyFile("edge", 2)
	put, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "edge", Source: src, Rules: 2})
	if err != nil {
		t.Fatal(err)
	}
	if put.Name != "edge" || put.Rules != 2 || put.CreatedAt.IsZero() || !put.UpdatedAt.Equal(put.CreatedAt) || put.Source != nil {
		t.Errorf("put returned %+v", put)
	}
	got, err := s.GetDomain(ctx, tid, "edge")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Source) != string(src) || got.Rules != 2 || !got.CreatedAt.Equal(put.CreatedAt) {
		t.Errorf("get returned %+v, source %q; want the file byte for byte", got, got.Source)
	}

	// Replacing keeps created_at.
	src2 := envoyFile("edge", 3)
	re, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "edge", Source: src2, Rules: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !re.CreatedAt.Equal(put.CreatedAt) || !re.UpdatedAt.After(put.UpdatedAt) || re.Rules != 3 {
		t.Errorf("replace returned %+v, want created_at %v kept and updated_at later", re, put.CreatedAt)
	}
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "api", Source: envoyFile("api", 1), Rules: 1}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.ListDomains(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Name != "api" || ds[1].Name != "edge" || ds[1].Rules != 3 || ds[0].Source != nil {
		t.Errorf("list returned %+v, want api and edge without sources", ds)
	}
	loaded, err := s.LoadDomains(ctx, tid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 2 || string(loaded[1].Source) != string(src2) || loaded[1].Version != re.Version {
		t.Fatalf("load returned %+v, want both with sources, edge at version %d", loaded, re.Version)
	}
	// A version is the content of one row: a new one at every write.
	if re.Version == put.Version || loaded[0].Version == put.Version || loaded[0].Version == re.Version {
		t.Errorf("versions %d (put), %d (replaced), %d (api): want all different", put.Version, re.Version, loaded[0].Version)
	}
	// The versions the caller holds come without their source.
	again, err := s.LoadDomains(ctx, tid, []int64{loaded[0].Version, put.Version})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 || again[0].Source != nil || again[0].Version != loaded[0].Version || string(again[1].Source) != string(src2) {
		t.Errorf("load holding api's version returned %+v, want api without its source and edge with", again)
	}

	if err := s.DeleteDomain(ctx, tid, "edge"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		s.DeleteDomain(ctx, tid, "edge"),
		func() error { _, err := s.GetDomain(ctx, tid, "edge"); return err }(),
	} {
		var nf *envoyconf.NotFoundError
		if !errors.As(err, &nf) || nf.Domain != "edge" || !errors.Is(err, policy.ErrNotFound) {
			t.Errorf("after delete: %v, want a *envoyconf.NotFoundError of edge", err)
		}
	}

	// Another tenant sees none of it.
	other := pgtest.Tenant(t, pool, tenant.PlanStarter)
	if _, err := s.GetDomain(ctx, other, "api"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("another tenant's get: %v, want not found", err)
	}
	if err := s.DeleteDomain(ctx, other, "api"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("another tenant's delete: %v, want not found", err)
	}
	if _, err := s.GetDomain(ctx, tid, "api"); err != nil {
		t.Errorf("after another tenant's delete: %v", err)
	}
}

func TestEnvoyDomainUnknownTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.NewEnvoyDomains(pgtest.Pool(t))
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
		if _, err := s.PutDomain(ctx, id, envoyconf.Domain{Name: "edge", Source: envoyFile("edge", 1), Rules: 1}); !errors.Is(err, policy.ErrNotFound) {
			t.Errorf("put for tenant %q: %v, want ErrNotFound", id, err)
		}
	}
}

// TestEnvoyDomainBounds: a tenant holds at most MaxDomains domains and
// MaxTenantRules rules over all of them, however many puts race for the
// last room; a replacement is measured without the file it replaces.
func TestEnvoyDomainBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s, tid := pgstore.NewEnvoyDomains(pool), pgtest.Tenant(t, pool, tenant.PlanStarter)
	const short = 5
	if _, err := pool.Exec(ctx, `INSERT INTO envoy_domains (tenant_id, domain, source, rules)
		SELECT $1, 'd' || i, 'domain: d' || i, 0 FROM generate_series(1, $2::int) AS i`,
		tid, envoyconf.MaxDomains-short); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 3 * short {
		wg.Go(func() {
			name := fmt.Sprintf("new-%d", i)
			_, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: name, Source: envoyFile(name, 0)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, envoyconf.ErrTooManyDomains):
				refused++
			default:
				t.Errorf("put: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != short || refused != 2*short {
		t.Errorf("%d puts succeeded and %d were refused, want %d and %d", ok, refused, short, 2*short)
	}
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "d1", Source: envoyFile("d1", 10), Rules: 10}); err != nil {
		t.Errorf("replacing at the bound on domains: %v", err)
	}

	// Rules: d1 holds 10; d2 takes the rest but one, concurrently with
	// others that each want 2.
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "d2", Source: envoyFile("d2", 0), Rules: envoyconf.MaxTenantRules - 11}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d3", "d4", "d5"} {
		wg.Go(func() {
			_, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: name, Source: envoyFile(name, 0), Rules: 2})
			if tm, ok := errors.AsType[*envoyconf.TooManyRulesError](err); !ok || tm.Rules != 2 || tm.Others != envoyconf.MaxTenantRules-1 {
				t.Errorf("2 rules past the tenant's %d: %v, want a TooManyRulesError of 2 beside %d", envoyconf.MaxTenantRules, err, envoyconf.MaxTenantRules-1)
			}
		})
	}
	wg.Wait()
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "d3", Source: envoyFile("d3", 1), Rules: 1}); err != nil {
		t.Errorf("the last rule: %v", err)
	}
	// d1 replaced by a file of 11 rules: its own 10 are not counted twice.
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "d1", Source: envoyFile("d1", 10), Rules: 10}); err != nil {
		t.Errorf("replacing at the bound on rules: %v", err)
	}
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "d1", Source: envoyFile("d1", 11), Rules: 11}); !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("a replacement past the bound on rules: %v, want refused", err)
	}
	var rules int
	if err := pool.QueryRow(ctx, `SELECT sum(rules) FROM envoy_domains WHERE tenant_id = $1`, tid).Scan(&rules); err != nil {
		t.Fatal(err)
	}
	if rules != envoyconf.MaxTenantRules {
		t.Errorf("the tenant holds %d rules, want %d", rules, envoyconf.MaxTenantRules)
	}
}

// TestEnvoyDomainNotifications: every change of a tenant's domains, and the
// tenant's deletion, sends envoy:<tenant>.
func TestEnvoyDomainNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.New(t)
	pool := pgtest.PoolAt(t, dsn)
	s, tid := pgstore.NewEnvoyDomains(pool), pgtest.Tenant(t, pool, tenant.PlanStarter)
	ch, co := events(t, pgstore.Listen, dsn, slog.New(slog.DiscardHandler))
	waitConnect(t, co)

	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "edge", Source: envoyFile("edge", 1), Rules: 1}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "envoy:"+tid)
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "edge", Source: envoyFile("edge", 2), Rules: 2}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "envoy:"+tid)
	if err := s.DeleteDomain(ctx, tid, "edge"); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "envoy:"+tid)
	if _, err := s.PutDomain(ctx, tid, envoyconf.Domain{Name: "api", Source: envoyFile("api", 1), Rules: 1}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "envoy:"+tid)
	exec(t, dsn, `DELETE FROM tenants WHERE id = $1`, tid)
	expect(t, ch, "tenant:"+tid, "envoy:"+tid)
}
