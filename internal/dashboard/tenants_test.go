package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
)

var testKey = regexp.MustCompile(`^tg_test_[0-9A-Za-z]{12}_[0-9A-Za-z]{32}$`)

// TestOperatorCreatesTenant: the tenant list has a form that creates a
// tenant as `tollgate tenants create` does (tenant.Create: the same name
// rules, a plan of the plan table, a live and a test key named as the
// command names them). The new tenant's page shows both keys once; the
// creation is audited with the admin. A mistake is answered on the form,
// as typed, and creates nothing; a post without the form's token is
// refused.
func TestOperatorCreatesTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	b := e.browser()
	b.signIn("ops@example.com")
	list := b.get("/admin/tenants").mustStatus(http.StatusOK)
	assertLabelled(t, list)
	form := list.one("new-tenant-form")
	if attr(form, "method") != "post" || !strings.HasPrefix(attr(form, "action"), "/admin/tenants#") {
		t.Fatalf("the new tenant form posts to %q", attr(form, "action"))
	}
	var plans []string
	for _, o := range find(form, func(n *html.Node) bool { return n.Data == "option" }) {
		plans = append(plans, attr(o, "value"))
	}
	if strings.Join(plans, " ") != "starter growth pro enterprise enterprise_dedicated" {
		t.Errorf("plans offered %v", plans)
	}
	csrf := list.inputValue("csrf")

	if p := b.post("/admin/tenants", url.Values{"name": {"Initech"}, "plan": {"pro"}}); p.status != http.StatusForbidden {
		t.Errorf("without the form's token: %d, want 403", p.status)
	}
	for _, c := range []struct {
		form       url.Values
		field, err string
	}{
		{url.Values{"name": {""}, "plan": {"pro"}}, "name", "Not created: name must be 1 to 200 characters."},
		{url.Values{"name": {"   "}, "plan": {"pro"}}, "name", "Not created: name must not be blank."},
		{url.Values{"name": {"Initech"}, "plan": {"gold"}}, "plan", `Not created: plan "gold": no such plan; want one of starter, growth, pro, enterprise, enterprise_dedicated.`},
	} {
		c.form.Set("csrf", csrf)
		p := b.post("/admin/tenants", c.form)
		assertLandsOnForm(t, c.form.Encode(), p, "new-tenant-error", c.field)
		if got := p.text("new-tenant-error"); got != c.err {
			t.Errorf("%s: error %q, want %q", c.form.Encode(), got, c.err)
		}
		if got := find(p.one("new-tenant-form"), func(n *html.Node) bool { return attr(n, "name") == "name" }); attr(got[0], "value") != c.form.Get("name") {
			t.Errorf("%s: the name shows %q, want it as typed", c.form.Encode(), attr(got[0], "value"))
		}
	}
	if ts, _ := e.tenants.Tenants(ctx); len(ts) != 0 {
		t.Fatalf("refused forms created %d tenants", len(ts))
	}

	p := b.post("/admin/tenants", url.Values{"csrf": {csrf}, "name": {"Initech"}, "plan": {"pro"}}).mustStatus(http.StatusOK)
	if got := p.text("tenant-name"); got != "Initech" {
		t.Fatalf("after creating: the page of %q", got)
	}
	ts, _ := e.tenants.Tenants(ctx)
	if len(ts) != 1 || ts[0].Name != "Initech" || ts[0].Plan != "pro" || p.text("tenant-id") != ts[0].ID {
		t.Fatalf("tenants %+v, page of %s", ts, p.text("tenant-id"))
	}
	live, test := p.text("new-live-key"), p.text("new-test-key")
	if !liveKey.MatchString(live) || !testKey.MatchString(test) {
		t.Fatalf("the new tenant's keys show as %q and %q", live, test)
	}
	for raw, name := range map[string]string{live: tenant.FirstLiveKeyName, test: tenant.FirstTestKeyName} {
		k, err := e.tenants.KeyByPrefix(ctx, strings.Split(raw, "_")[2])
		if err != nil || k.TenantID != ts[0].ID || k.Name != name {
			t.Errorf("key %s…: %+v, %v; want the new tenant's %q", raw[:20], k, err, name)
		}
	}
	if strings.Contains(b.get("/admin/tenants/"+ts[0].ID).body, live) {
		t.Error("the live key shows again on the next visit")
	}
	es, _ := e.audit.List(ctx, audit.Filter{TenantID: ts[0].ID, Kind: "tenant_created"})
	if len(es) != 1 || es[0].Actor != "ops@example.com" || es[0].Detail["name"] != "Initech" || es[0].Detail["plan"] != "pro" {
		t.Errorf("audit %+v", es)
	}
}
