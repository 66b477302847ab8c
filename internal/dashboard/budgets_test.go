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

// TestTenantPageShowsBudgets: each budget of scope global shows what is
// spent, reserved and left of its window, as reservations through a real
// gate left it, with a meter of what is taken; a budget per subject says
// where to look instead; a policy without a unit shows none.
func TestTenantPageShowsBudgets(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	late := &lateGate{}
	e := newEnv(t, func(c *dashboard.Config) { c.Budgets = late })
	e.admin("ops@example.com")
	ctx := context.Background()
	raw, live, _ := tenant.NewKey(false)
	_, test, _ := tenant.NewKey(true)
	acme, err := e.tenants.CreateTenant(ctx, "Acme", tenant.PlanPro, live, test)
	if err != nil {
		t.Fatal(err)
	}
	policies := pgstore.NewPolicies(e.pool)
	for name, body := range map[string]string{
		"llm":   `{"limit":100000,"window":"720h","unit":"tokens","scope":"global"}`,
		"cents": `{"limit":500,"window":"24h","unit":"cents"}`,
		"login": `{"limit":5,"window":"1m"}`,
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
		Store: store, Local: local, Tenants: tenant.NewDirectory(tenant.DirectoryConfig{Store: e.tenants, Logger: slog.New(slog.DiscardHandler)}),
		Policies: policy.NewCatalog(policies, policy.CatalogConfig{}), Pepper: []byte("test pepper"),
	})
	if err != nil {
		t.Fatal(err)
	}
	late.g = g
	reserve := func(amount int64) string {
		t.Helper()
		v, err := g.Reserve(ctx, gate.Request{Route: "reservations", Bearer: raw}, gate.Reservation{Policy: "llm", Amount: amount, TTL: time.Minute})
		if err != nil || !v.Allowed {
			t.Fatalf("reserve %d: %+v, %v", amount, v.Reservation, err)
		}
		return v.Reservation.ID
	}
	first := reserve(40000)
	reserve(25000)
	if _, err := g.Settle(ctx, acme.ID, false, first, 27500); err != nil {
		t.Fatal(err)
	}

	b := e.browser()
	b.signIn("ops@example.com")
	tp := b.get("/admin/tenants/" + acme.ID).mustStatus(http.StatusOK)
	got := map[string]string{}
	for _, row := range tp.all("policy-row") {
		if cells := within(row, "budget"); len(cells) > 0 {
			got[strings.Fields(textOf(row))[0]] = strings.Join(strings.Fields(textOf(cells[0])), " ")
		}
	}
	for name, want := range map[string]string{
		"llm":   "27,500 tokens spent, 25,000 tokens reserved, 47,500 tokens left",
		"cents": "a budget of cents per subject: GET /v1/usage?subject= shows one",
	} {
		if got[name] != want {
			t.Errorf("budget %s: %q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["login"]; ok || len(got) != 2 {
		t.Errorf("budgets shown for %v, want llm and cents", got)
	}
	meters := find(tp.root, func(n *html.Node) bool {
		return n.Data == "svg" && attr(n, "aria-label") == "llm: 47,500 tokens left"
	})
	if len(meters) != 1 {
		t.Fatalf("%d meters labelled for llm, want one", len(meters))
	}
	if w := attr(find(meters[0], cls("meter-fill"))[0], "width"); w != "31.5" {
		t.Errorf("llm meter fill %s of 60, want 31.5 (52,500 of 100,000)", w)
	}
}
