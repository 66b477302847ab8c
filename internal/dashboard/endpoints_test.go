package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// TestOperatorDisablesAWebhookEndpoint: the tenant page lists the
// tenant's endpoints; an operator disables one (CSRF required), which the
// audit log and the endpoint's reason name; another tenant's endpoint is
// out of reach.
func TestOperatorDisablesAWebhookEndpoint(t *testing.T) {
	t.Parallel()
	var svc *webhooks.Service
	e := newEnv(t, func(c *dashboard.Config) {
		sealer, _ := webhooks.NewSealer(make([]byte, 32))
		svc = &webhooks.Service{Sealer: sealer}
		c.Endpoints = svc
	})
	// The database is the env's, made after the options ran.
	svc.Store = pgstore.NewWebhooks(e.pool)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	other, _ := e.tenantWith("Other", tenant.PlanStarter)
	ep, err := svc.Create(ctx, acme.ID, "https://hooks.acme.example/tollgate", []string{webhooks.EventKeyRevoked, webhooks.EventPlanChanged})
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn("ops@example.com")
	path := "/admin/tenants/" + acme.ID
	p := b.get(path).mustStatus(http.StatusOK)
	rows := p.all("endpoint-row")
	if len(rows) != 1 || !strings.Contains(p.text("endpoints"), "hooks.acme.example") || p.text("endpoint-state") != "enabled" {
		t.Fatalf("endpoints table %q", p.text("endpoints"))
	}
	action := path + "/endpoints/" + ep.ID + "/disable"
	b.post(action, url.Values{}).mustStatus(http.StatusForbidden)
	csrf := b.csrf(path)
	b.post("/admin/tenants/"+other.ID+"/endpoints/"+ep.ID+"/disable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	p = b.post(action, url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	after := b.get(p.header.Get("Location")).mustStatus(http.StatusOK)
	if st := after.text("endpoint-state"); !strings.Contains(st, "ops@example.com") || len(after.all("disable-endpoint")) != 0 {
		t.Errorf("after disabling: state %q, %d disable buttons", st, len(after.all("disable-endpoint")))
	}
	got, _ := svc.Endpoint(ctx, acme.ID, ep.ID)
	if got.Enabled {
		t.Error("the endpoint is still enabled")
	}
}

// TestOperatorEnablesAWebhookEndpoint: beside a disabled endpoint the
// tenant page offers Enable (CSRF required), which the audit log records;
// the endpoint is enabled and offers Disable again; another tenant's
// endpoint is out of reach.
func TestOperatorEnablesAWebhookEndpoint(t *testing.T) {
	t.Parallel()
	var svc *webhooks.Service
	e := newEnv(t, func(c *dashboard.Config) {
		sealer, _ := webhooks.NewSealer(make([]byte, 32))
		svc = &webhooks.Service{Sealer: sealer}
		c.Endpoints = svc
	})
	svc.Store = pgstore.NewWebhooks(e.pool)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	other, _ := e.tenantWith("Other", tenant.PlanStarter)
	ep, err := svc.Create(ctx, acme.ID, "https://hooks.acme.example/tollgate", []string{webhooks.EventKeyRevoked})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetEnabled(ctx, acme.ID, ep.ID, false, webhooks.DisabledForFailures); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn("ops@example.com")
	path := "/admin/tenants/" + acme.ID
	p := b.get(path).mustStatus(http.StatusOK)
	if len(p.all("enable-endpoint")) != 1 || len(p.all("disable-endpoint")) != 0 {
		t.Fatalf("a disabled endpoint shows %d enable and %d disable buttons, want 1 and 0", len(p.all("enable-endpoint")), len(p.all("disable-endpoint")))
	}
	action := path + "/endpoints/" + ep.ID + "/enable"
	b.post(action, url.Values{}).mustStatus(http.StatusForbidden)
	csrf := b.csrf(path)
	b.post("/admin/tenants/"+other.ID+"/endpoints/"+ep.ID+"/enable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	if got, _ := svc.Endpoint(ctx, acme.ID, ep.ID); got.Enabled {
		t.Fatal("enabled without a CSRF token or through another tenant")
	}
	p = b.post(action, url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	after := b.get(p.header.Get("Location")).mustStatus(http.StatusOK)
	if st := after.text("endpoint-state"); st != "enabled" || len(after.all("disable-endpoint")) != 1 || len(after.all("enable-endpoint")) != 0 {
		t.Errorf("after enabling: state %q, %d disable and %d enable buttons", st, len(after.all("disable-endpoint")), len(after.all("enable-endpoint")))
	}
	if got, _ := svc.Endpoint(ctx, acme.ID, ep.ID); !got.Enabled || got.DisabledReason != "" {
		t.Errorf("endpoint after enabling: %+v", got)
	}
	au := b.get("/admin/audit?tenant=" + acme.ID + "&kind=" + dashboard.KindEndpointEnabled).mustStatus(http.StatusOK)
	if rows := au.all("audit-row"); len(rows) != 1 || !strings.Contains(au.text("audit-row"), "ops@example.com") {
		t.Errorf("audit of the enabling: %d rows: %q", len(rows), au.text("audit-row"))
	}
}

// TestOperatorFindsConsoleEndpointDeletions: the audit page's changes
// filter knows the console's webhook_endpoint_deleted (a kind outside the
// list is a 400), and lists the member who deleted.
func TestOperatorFindsConsoleEndpointDeletions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	if err := e.audit.Record(ctx, audit.Entry{TenantID: acme.ID, Actor: "dev@acme.example", Kind: audit.KindEndpointDeleted,
		Detail: map[string]any{"endpoint_id": "e1", "host": "hooks.acme.example"}}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn("ops@example.com")
	au := b.get("/admin/audit?tenant=" + acme.ID + "&kind=" + audit.KindEndpointDeleted).mustStatus(http.StatusOK)
	if rows := au.all("audit-row"); len(rows) != 1 || !strings.Contains(au.text("audit-row"), "dev@acme.example") {
		t.Errorf("the console's endpoint deletion on the audit page: %d rows: %q", len(rows), au.text("audit-row"))
	}
}
