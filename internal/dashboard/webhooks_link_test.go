package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestLinkUnknownCustomer: an event billing held for a customer no tenant
// had offers a form; posting it links the customer through billing, which
// applies the event, and refusals are shown on the page.
func TestLinkUnknownCustomer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dashboard.Config) { c.Webhooks = c.Billing.(dashboard.WebhookLog) })
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	other, _ := e.tenantWith("Other Co", tenant.PlanStarter)
	if _, err := e.tenants.SetPlanPrice(ctx, tenant.PlanPro, "price_pro"); err != nil {
		t.Fatal(err)
	}
	held, err := e.billing.HandleEvent(ctx, billing.Event{
		ID: "evt_held", Type: billing.EventSubscriptionCreated, Created: time.Now().Add(-time.Minute), CustomerID: "cus_New",
		Subscription: &billing.Subscription{ID: "sub_New", Status: tenant.StatusActive, Items: []billing.Item{{ID: "si_New", PriceID: "price_pro"}}},
		Payload:      []byte(`{"id":"evt_held"}`),
	})
	if err != nil || held.Outcome != billing.OutcomeUnknownCustomer {
		t.Fatalf("HandleEvent: %+v, %v; want unknown_customer", held, err)
	}
	e.stripeEvent("evt_applied", "invoice.paid", "applied", acme.ID, 1, `{}`)
	b := e.browser()
	b.signIn("ops@example.com")

	for path, want := range map[string]int{"/admin/webhooks": 0, "/admin/webhooks/evt_applied": 0, "/admin/webhooks/evt_held": 1} {
		p := b.get(path).mustStatus(http.StatusOK)
		if n := len(p.all("link-customer-form")); n != want {
			t.Errorf("%s: %d link forms, want %d", path, n, want)
		}
		assertLabelled(t, p)
	}

	link := func(tenantID string) page {
		t.Helper()
		return b.post("/admin/webhooks/evt_held/link", url.Values{"csrf": {b.csrf("/admin/webhooks/evt_held")}, "tenant_id": {tenantID}})
	}
	// Refusals stay on the page, with what was typed.
	for name, tc := range map[string]struct {
		tenantID string
		status   int
	}{
		"no tenant":      {"", http.StatusBadRequest},
		"unknown tenant": {"00000000-0000-0000-0000-000000000000", http.StatusBadRequest},
		"not an id":      {"acme", http.StatusBadRequest},
	} {
		p := link(tc.tenantID).mustStatus(tc.status)
		if p.text("link-customer-error") == "" || p.inputValue("tenant_id") != tc.tenantID {
			t.Errorf("%s: error %q, tenant_id %q", name, p.text("link-customer-error"), p.inputValue("tenant_id"))
		}
	}
	if b.post("/admin/webhooks/evt_held/link", url.Values{"tenant_id": {acme.ID}}).status != http.StatusForbidden {
		t.Error("a link without the form token was not refused")
	}

	p := link(acme.ID).mustStatus(http.StatusSeeOther)
	loc := p.header.Get("Location")
	if loc != "/admin/webhooks/evt_held?done=linked#top" {
		t.Fatalf("redirect to %q", loc)
	}
	after := b.get(loc).mustStatus(http.StatusOK)
	if got := after.text("webhook-outcome"); got != "applied" {
		t.Errorf("outcome after linking %q, want applied", got)
	}
	if after.text("flash") == "" || len(after.all("link-customer-form")) != 0 {
		t.Errorf("after linking: flash %q, %d link forms", after.text("flash"), len(after.all("link-customer-form")))
	}
	got, err := e.tenants.Tenant(ctx, acme.ID)
	if err != nil || got.Plan != tenant.PlanPro || got.StripeCustomerID != "cus_New" {
		t.Errorf("tenant after linking: plan %s customer %q, %v", got.Plan, got.StripeCustomerID, err)
	}
	es, err := e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kind: billing.AuditKindCustomerLinked})
	if err != nil || len(es) != 1 || es[0].Actor != "ops@example.com" || es[0].At.IsZero() {
		t.Errorf("link audit entries %+v, %v", es, err)
	}

	// Posting again: the event waits for nothing now.
	if p := link(other.ID).mustStatus(http.StatusConflict); p.text("link-customer-error") == "" {
		t.Error("no error for an event already resolved")
	}
	// A held event whose customer another tenant has meanwhile.
	_, err = e.pool.Exec(ctx, `INSERT INTO stripe_events (id, type, created, livemode, customer_id, outcome, note, event, payload)
		VALUES ('evt_late', 'invoice.paid', now(), false, 'cus_New', 'unknown_customer', '', '{}', '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	p = b.post("/admin/webhooks/evt_late/link", url.Values{"csrf": {b.csrf("/admin/webhooks/evt_late")}, "tenant_id": {other.ID}})
	if p.mustStatus(http.StatusConflict); !strings.Contains(p.text("link-customer-error"), "already linked") {
		t.Errorf("conflict error %q", p.text("link-customer-error"))
	}
}
