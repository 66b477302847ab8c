package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
)

// apiStatus calls GET /v1/usage of e's API with key and returns the status
// and the problem's type ("" for none).
func (e *env) apiStatus(key string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/usage", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Type
}

// tenantWithRaw creates a tenant on starter with one live key and returns
// the key's credential too.
func (e *env) tenantWithRaw(name string) (tenant.Tenant, string) {
	e.t.Helper()
	raw, k, err := tenant.NewKey(false)
	if err != nil {
		e.t.Fatal(err)
	}
	tn, err := e.tenants.CreateTenant(context.Background(), name, tenant.PlanStarter, k)
	if err != nil {
		e.t.Fatal(err)
	}
	return tn, raw
}

// TestOperatorDisablesATenant: the tenant's page links to a confirmation
// page of its own (a GET that changes nothing) with a reason field; its
// post needs the form token, refuses a reason too long next to the field,
// 404s an unknown tenant; once posted, this instance's API refuses the
// tenant's key with 403 tenant-disabled at once (another tenant's key
// works), the page and the list show the state, the audit log has
// tenant_disabled by the operator with the reason; asking again is a 409;
// enabling gives the key back and is audited too.
func TestOperatorDisablesATenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, acmeKey := e.tenantWithRaw("Acme Rockets")
	other, otherKey := e.tenantWithRaw("Other")
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	ask := tp + "/disable"
	if s, _ := e.apiStatus(acmeKey); s != http.StatusOK {
		t.Fatalf("Acme's key before: %d", s)
	}

	p := b.get(tp).mustStatus(http.StatusOK)
	if st := p.text("tenant-state"); st != "active" {
		t.Errorf("state before: %q", st)
	}
	link := p.one("disable-tenant")
	if link.Data != "a" || formOf(link) != nil || attr(link, "href") != ask {
		t.Fatalf("disable-tenant is a <%s> to %q, want a link to %s", link.Data, attr(link, "href"), ask)
	}

	q := b.get(ask).mustStatus(http.StatusOK)
	if tn, _ := e.tenants.Tenant(ctx, acme.ID); tn.Disabled() {
		t.Fatal("asking disabled the tenant")
	}
	for _, want := range []string{"Acme Rockets", acme.ID, "403", "Nothing is deleted"} {
		if !strings.Contains(textOf(q.root), want) {
			t.Errorf("the confirmation page does not say %q", want)
		}
	}
	form := formOf(q.one("confirm"))
	if form == nil || attr(form, "method") != "post" || attr(form, "action") != ask {
		t.Fatalf("the confirm button is not in a form posting to %s", ask)
	}
	if f := q.one("confirm-field"); attr(f, "name") != "reason" || attr(f, "maxlength") != "200" || formOf(f) != form {
		t.Errorf("the reason field: name %q, maxlength %q, in the form %t", attr(f, "name"), attr(f, "maxlength"), formOf(f) == form)
	}
	if href := attr(q.one("cancel"), "href"); !strings.HasPrefix(href, tp) {
		t.Errorf("cancel goes to %q", href)
	}

	csrf := b.csrf(tp)
	b.post(ask, url.Values{"reason": {"abuse"}}).mustStatus(http.StatusForbidden)
	long := b.post(ask, url.Values{"csrf": {csrf}, "reason": {strings.Repeat("x", 201)}}).mustStatus(http.StatusBadRequest)
	if msg := long.text("confirm-field-error"); !strings.Contains(msg, "200") || attr(long.one("confirm-field"), "aria-invalid") != "true" {
		t.Errorf("a reason too long: error %q next to the field", msg)
	}
	b.post("/admin/tenants/00000000-0000-0000-0000-000000000000/disable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	b.post("/admin/tenants/nope/disable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	b.post("/admin/tenants/nope/enable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	if tn, _ := e.tenants.Tenant(ctx, acme.ID); tn.Disabled() {
		t.Fatal("a refused post disabled the tenant")
	}

	done := b.post(ask, url.Values{"csrf": {csrf}, "reason": {"  chargeback #42  "}}).mustStatus(http.StatusSeeOther)
	if s, typ := e.apiStatus(acmeKey); s != http.StatusForbidden || typ != "https://tollgate.dev/problems/tenant-disabled" {
		t.Errorf("Acme's key right after the disable: %d %q, want 403 tenant-disabled", s, typ)
	}
	if s, _ := e.apiStatus(otherKey); s != http.StatusOK {
		t.Errorf("another tenant's key: %d", s)
	}
	after := b.get(done.header.Get("Location")).mustStatus(http.StatusOK)
	if st := after.text("tenant-state"); !strings.HasPrefix(st, "disabled since") {
		t.Errorf("state after: %q", st)
	}
	if r := after.text("tenant-disabled-reason"); r != "Reason: chargeback #42" {
		t.Errorf("reason shown: %q", r)
	}
	if len(after.all("enable-tenant")) != 1 || len(after.all("disable-tenant")) != 0 || !strings.Contains(after.text("flash"), "Workspace disabled") {
		t.Errorf("after disabling: enable %d, disable %d, flash %q", len(after.all("enable-tenant")), len(after.all("disable-tenant")), after.text("flash"))
	}
	list := b.get("/admin/tenants").mustStatus(http.StatusOK)
	for _, row := range list.all("tenant-row") {
		marked := len(within(row, "tenant-disabled")) == 1
		if id := attr(row, "data-tenant-id"); marked != (id == acme.ID) {
			t.Errorf("tenant %s in the list: marked disabled %t", id, marked)
		}
	}
	if !strings.Contains(strings.Join(e.changes(), " "), "tenant:"+acme.ID) {
		t.Errorf("this instance's caches were not told: %v", e.changes())
	}
	b.get(ask).mustStatus(http.StatusConflict)

	es, _ := e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kind: audit.KindTenantDisabled})
	if len(es) != 1 || es[0].Actor != "ops@example.com" || es[0].Detail["reason"] != "chargeback #42" {
		t.Fatalf("audit: %+v", es)
	}

	b.post(tp+"/enable", url.Values{}).mustStatus(http.StatusForbidden)
	b.post(tp+"/enable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	if s, _ := e.apiStatus(acmeKey); s != http.StatusOK {
		t.Errorf("Acme's key after enabling: %d", s)
	}
	if st := b.get(tp).mustStatus(http.StatusOK).text("tenant-state"); st != "active" {
		t.Errorf("state after enabling: %q", st)
	}
	es, _ = e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kind: audit.KindTenantEnabled})
	if len(es) != 1 || es[0].Actor != "ops@example.com" {
		t.Fatalf("audit of the enable: %+v", es)
	}
	if es, _ := e.audit.List(ctx, audit.Filter{TenantID: other.ID}); len(es) != 0 {
		t.Errorf("the other tenant's audit: %+v", es)
	}
	// The audit page's filter knows the two kinds.
	b.get("/admin/audit?kind=" + audit.KindTenantDisabled).mustStatus(http.StatusOK)
}
