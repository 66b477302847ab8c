package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/tenant"
)

// stripeEvent records a received event as billing does.
func (e *env) stripeEvent(id, typ, outcome, tenantID string, deliveries int, payload string) {
	e.t.Helper()
	var tid any
	if tenantID != "" {
		tid = tenantID
	}
	_, err := e.pool.Exec(context.Background(), `
		INSERT INTO stripe_events (id, type, created, livemode, customer_id, tenant_id, outcome, note, event, payload, deliveries)
		VALUES ($1, $2, now(), false, 'cus_123', $3, $4, 'a note', '{}', $5, $6)`, id, typ, tid, outcome, payload, deliveries)
	if err != nil {
		e.t.Fatal(err)
	}
}

func TestWebhookLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dashboard.Config) { c.Webhooks = c.Billing.(dashboard.WebhookLog) })
	e.admin("ops@example.com")
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	e.stripeEvent("evt_applied", "customer.subscription.updated", "applied", acme.ID, 1, `{"id":"evt_applied","object":"event","data":{"object":{"status":"active"}}}`)
	e.stripeEvent("evt_replayed", "invoice.paid", "applied", acme.ID, 3, `{"id":"evt_replayed"}`)
	e.stripeEvent("evt_unknown", "customer.subscription.created", "unknown_customer", "", 1, `not json <script>alert(1)</script>`)
	e.stripeEvent("evt_busy", "invoice.paid", "processing", acme.ID, 1, `{}`)
	e.stripeEvent("evt_conflict", "checkout.session.completed", "customer_conflict", acme.ID, 1, `{}`)
	b := e.browser()
	b.signIn("ops@example.com")

	p := b.get("/admin/webhooks").mustStatus(http.StatusOK)
	if n := len(p.all("webhook-row")); n != 4 {
		t.Fatalf("%d events listed, want 4 (not the one being processed)", n)
	}
	assertLabelled(t, p)
	for outcome, want := range map[string]int{"applied": 2, "replay": 1, "unknown_customer": 1, "customer_conflict": 1, "failed": 0} {
		got := len(b.get("/admin/webhooks?outcome=" + outcome).mustStatus(http.StatusOK).all("webhook-row"))
		if got != want {
			t.Errorf("outcome %s: %d rows, want %d", outcome, got, want)
		}
	}
	b.get("/admin/webhooks?outcome=bogus").mustStatus(http.StatusBadRequest)

	// The payload view: indented JSON, or the body as it came, escaped.
	d := b.get("/admin/webhooks/evt_applied").mustStatus(http.StatusOK)
	if got := d.text("webhook-outcome"); got != "applied" {
		t.Errorf("outcome %q", got)
	}
	if got := textOf(d.one("webhook-payload")); !strings.Contains(got, `"status": "active"`) {
		t.Errorf("payload %q", got)
	}
	if got := b.get("/admin/webhooks/evt_conflict").mustStatus(http.StatusOK).text("webhook-outcome"); got != "customer conflict" {
		t.Errorf("a checkout that named a tenant with another customer: outcome %q, want \"customer conflict\"", got)
	}
	raw := b.get("/admin/webhooks/evt_unknown").mustStatus(http.StatusOK)
	if strings.Contains(raw.body, "<script>") || !strings.Contains(textOf(raw.one("webhook-payload")), "<script>alert(1)</script>") {
		t.Error("a payload that is not JSON is not shown escaped")
	}
	b.get("/admin/webhooks/evt_nope").mustStatus(http.StatusNotFound)

	// The tenant's page lists its events.
	tp := b.get("/admin/tenants/" + acme.ID).mustStatus(http.StatusOK)
	if n := len(within(tp.one("tenant-events"), "webhook-row")); n != 3 {
		t.Errorf("tenant page: %d events, want 3", n)
	}
}

func TestWebhookLogNotWired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	if b.get("/admin/webhooks").mustStatus(http.StatusOK).text("webhooks-unavailable") == "" {
		t.Error("no explanation without a webhook log")
	}
}

// TestStripeEventsAreNamedApart: the menu entry and the page of the events
// Stripe sends Tollgate say "Stripe events", not "Webhooks", and the page
// says where the tenants' own webhook endpoints (which Tollgate calls) are,
// with a link; the tenant page's endpoints say they are the tenant's.
func TestStripeEventsAreNamedApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dashboard.Config) { c.Webhooks = c.Billing.(dashboard.WebhookLog) })
	e.admin("ops@example.com")
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	b := e.browser()
	b.signIn("ops@example.com")
	p := b.get("/admin/webhooks").mustStatus(http.StatusOK)
	if got := p.text("nav-webhooks"); got != "Stripe events" {
		t.Errorf("menu entry %q, want Stripe events", got)
	}
	title := find(p.root, func(n *html.Node) bool { return n.Data == "title" })
	if len(title) != 1 || !strings.HasPrefix(textOf(title[0]), "Stripe events") {
		t.Errorf("page title %q, want Stripe events", textOf(p.root.FirstChild))
	}
	if got := textOf(find(p.root, func(n *html.Node) bool { return n.Data == "h1" })[0]); got != "Stripe events" {
		t.Errorf("heading %q, want Stripe events", got)
	}
	link := p.one("tenant-endpoints-link")
	if attr(link, "href") != "/admin/tenants" || !strings.Contains(textOf(link.Parent), "webhook endpoints") {
		t.Errorf("the link to the tenants' endpoints: %q to %q", textOf(link.Parent), attr(link, "href"))
	}
	tp := b.get("/admin/tenants/" + acme.ID).mustStatus(http.StatusOK)
	if got := tp.text("endpoints-note"); !strings.Contains(got, "Tollgate sends this tenant's events") || !strings.Contains(got, "Stripe") {
		t.Errorf("the tenant's endpoints say %q", got)
	}
}
