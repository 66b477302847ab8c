package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestTenantPageShowsLeasesInFlight: each concurrency policy of a tenant
// shows its live keys' leases in flight, taken through a real gate; a
// global one also as a meter of its limit; the other policies take none.
func TestTenantPageShowsLeasesInFlight(t *testing.T) {
	t.Parallel()
	leases := memory.New(memory.Config{})
	t.Cleanup(func() { leases.Close() })
	// The gate needs the env's database, and the env the gate: the page
	// asks it through late, set once both exist.
	late := &lateGate{}
	e := newEnv(t, func(c *dashboard.Config) { c.Leases = late })
	e.admin("ops@example.com")
	ctx := context.Background()
	raw, live, _ := tenant.NewKey(false)
	rawTest, test, _ := tenant.NewKey(true)
	acme, err := e.tenants.CreateTenant(ctx, "Acme", tenant.PlanPro, live, test)
	if err != nil {
		t.Fatal(err)
	}
	policies := pgstore.NewPolicies(e.pool)
	for name, body := range map[string]string{
		"jobs":    `{"limit":3,"algorithm":"concurrency"}`,
		"exports": `{"limit":4,"algorithm":"concurrency","scope":"global"}`,
		"login":   `{"limit":5,"window":"1m"}`,
	} {
		p, err := policy.Parse(name, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policies.PutPolicy(ctx, acme.ID, p); err != nil {
			t.Fatal(err)
		}
	}
	local := memory.New(memory.Config{})
	t.Cleanup(func() { local.Close() })
	g, err := gate.New(gate.Config{
		Store: leases, Local: local, Tenants: tenant.NewDirectory(tenant.DirectoryConfig{Store: e.tenants, Logger: slog.New(slog.DiscardHandler)}),
		Policies: policy.NewCatalog(policies, policy.CatalogConfig{}), Pepper: []byte("test pepper"),
	})
	if err != nil {
		t.Fatal(err)
	}
	late.g = g
	take := func(bearer, pol, subject string) {
		t.Helper()
		v, err := g.Acquire(ctx, gate.Request{Route: "leases", Bearer: bearer}, gate.Lease{Policy: pol, Subject: subject, TTL: time.Minute})
		if err != nil || !v.Allowed {
			t.Fatalf("lease of %s: %+v, %v", pol, v.Lease, err)
		}
	}
	take(raw, "jobs", "a")
	take(raw, "jobs", "b")
	take(raw, "exports", "")
	take(raw, "exports", "")
	take(raw, "exports", "")
	// A test key's leases are the sandbox's, not shown.
	take(rawTest, "jobs", "a")

	b := e.browser()
	b.signIn("ops@example.com")
	tp := b.get("/admin/tenants/" + acme.ID).mustStatus(http.StatusOK)
	got := map[string]string{}
	for _, row := range tp.all("policy-row") {
		if cells := within(row, "in-flight"); len(cells) > 0 {
			got[strings.Fields(textOf(row))[0]] = textOf(cells[0])
		}
	}
	for name, want := range map[string]string{"jobs": "2 in flight across subjects", "exports": "3 of 4 in flight"} {
		if got[name] != want {
			t.Errorf("%s in flight: %q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["login"]; ok || len(got) != 2 {
		t.Errorf("in flight shown for %v, want the two concurrency policies", got)
	}
	// On a narrow screen the policies' table is one block per policy
	// (class stack), no wider than the screen: the browser suite checks it
	// at 390 px.
	if got := attr(tp.one("policies"), "class"); got != "stack" {
		t.Errorf("policies table class %q, want stack", got)
	}
	meters := find(tp.root, func(n *html.Node) bool {
		return n.Data == "svg" && attr(n, "aria-label") == "exports: 3 of 4 in flight"
	})
	if len(meters) != 1 {
		t.Fatalf("%d meters labelled for exports, want one", len(meters))
	}
	if w := attr(find(meters[0], cls("meter-fill"))[0], "width"); w != "45.0" {
		t.Errorf("exports meter fill %s of 60, want 45.0 (3 of 4)", w)
	}
}

// lateGate is a *gate.Gate set after the dashboard is built.
type lateGate struct{ g *gate.Gate }

func (l *lateGate) InFlight(ctx context.Context, tenantID string, policies []string) ([]int64, error) {
	return l.g.InFlight(ctx, tenantID, policies)
}

func (l *lateGate) Budgets(ctx context.Context, tenantID string, policies []string, subject string) ([]gate.Budget, error) {
	return l.g.Budgets(ctx, tenantID, policies, subject)
}

func (l *lateGate) Reset(ctx context.Context, tenantID string, test bool, policy, subject string) (string, error) {
	return l.g.Reset(ctx, tenantID, test, policy, subject)
}

// TestOverviewReloadsOnlyWhenAsked: the overview does not reload by itself
// (a page that changes under its reader fails WCAG 2.2.1); a link, which
// works without JavaScript, turns reloading on every 30 s and another
// turns it off.
func TestOverviewReloadsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	refresh := func(p page) []*html.Node {
		return find(p.root, func(n *html.Node) bool {
			return n.Data == "meta" && strings.EqualFold(attr(n, "http-equiv"), "refresh")
		})
	}
	ov := b.get("/admin").mustStatus(http.StatusOK)
	if n := len(refresh(ov)); n != 0 {
		t.Fatalf("the overview reloads by itself: %d meta refresh", n)
	}
	if href := attr(ov.one("refresh-start"), "href"); href != "/admin?refresh=30" {
		t.Fatalf("reload link %q", href)
	}
	on := b.get("/admin?refresh=30").mustStatus(http.StatusOK)
	if m := refresh(on); len(m) != 1 || attr(m[0], "content") != "30" {
		t.Fatalf("after asking: %d meta refresh, want one of 30 s", len(m))
	}
	if href := attr(on.one("refresh-stop"), "href"); href != "/admin" {
		t.Fatalf("stop link %q", href)
	}
	if !strings.Contains(on.text("refresh-state"), "every 30 seconds") {
		t.Errorf("state %q", on.text("refresh-state"))
	}
	b.get("/admin?refresh=1").mustStatus(http.StatusBadRequest)
}
