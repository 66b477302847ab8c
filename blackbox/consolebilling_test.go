package blackbox

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// postNoFollow posts a form of page form in b and returns the answer as
// sent, without following a redirect (Stripe's pages are not ours).
func (b *browser) postNoFollow(path string, form page, fields url.Values) *http.Response {
	b.t.Helper()
	if m := csrfField.FindStringSubmatch(form.body); m != nil && fields.Get("csrf") == "" {
		fields.Set("csrf", m[1])
	}
	c := *b.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(b.base+path, fields)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// tenantOf is the tenant of the member with email.
func tenantOf(t *testing.T, dsn, email string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var id string
	if err := conn.QueryRow(context.Background(), `SELECT tenant_id::text FROM members WHERE email = $1`, email).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestConsoleBilling is the billing page against the real binary and
// stripe-mock: a new workspace is on starter; its owner's Upgrade starts
// Checkout (303 to Stripe), the portal needs a customer first (409, then
// 303 once checkout.session.completed linked one); an unpaid subscription
// shows pro held to starter, and why; another tenant's page shows its own
// plan and its portal has no customer; a developer sees no buttons and
// gets 403 posting them.
func TestConsoleBilling(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in := start(t, dsn, append(stripeEnv(t), "TOLLGATE_DEV=1")...)
	cli(t, dsn, nil, "plans", "set-price", "pro", "price_cb_pro")

	anon := newBrowser(t, in.base)
	if p := anon.get("/console/billing"); !strings.Contains(p.url, "/console/login?next=%2Fconsole%2Fbilling") {
		t.Fatalf("signed out: %d %s", p.status, p.url)
	}

	owner := newBrowser(t, in.base)
	consoleSignUp(t, owner, "owner@a.example", "Acme")
	bill := owner.get("/console/billing")
	for _, want := range []string{`data-testid="plan">starter<`, `data-testid="effective-plan">starter<`, `data-testid="upgrade-pro"`, `data-testid="allotment">100,000<`, `href="/console/billing"`} {
		if bill.status != 200 || !strings.Contains(bill.body, want) {
			t.Fatalf("the owner's billing page lacks %s: %d %s", want, bill.status, bill.body)
		}
	}
	if strings.Contains(bill.body, `data-testid="upgrade-growth"`) || strings.Contains(bill.body, `data-testid="upgrade-enterprise"`) {
		t.Errorf("plans not for sale offered: %s", bill.body)
	}
	resp := owner.postNoFollow("/console/billing/checkout", bill, url.Values{"plan": {"pro"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "http") {
		t.Fatalf("upgrade: %d, Location %q; want 303 to Checkout", resp.StatusCode, loc)
	}
	if p := owner.post("/console/billing/checkout", bill, url.Values{"plan": {"enterprise_dedicated"}}); p.status != 400 {
		t.Errorf("a plan not for sale: %d %s", p.status, p.body)
	}
	if p := owner.post("/console/billing/checkout", page{}, url.Values{"plan": {"pro"}}); p.status != 403 {
		t.Errorf("without the form token: %d", p.status)
	}
	if p := owner.post("/console/billing/portal", bill, url.Values{}); p.status != http.StatusConflict || !strings.Contains(p.body, "Upgrade") {
		t.Errorf("the portal before a customer: %d %s", p.status, p.body)
	}

	// Stripe links the customer, the subscription goes unpaid.
	a := tenantOf(t, dsn, "owner@a.example")
	now := time.Now()
	postStripeEvent(t, in, "evt_cb_ck", "checkout.session.completed", now, stripeCheckoutObject(a, "cus_cb", "sub_cb"))
	postStripeEvent(t, in, "evt_cb_sub", "customer.subscription.created", now, stripeSubscriptionObject("cus_cb", "sub_cb", "unpaid", "price_cb_pro"))
	bill = owner.get("/console/billing")
	for _, want := range []string{`data-testid="plan">pro<`, `data-testid="billing-status">unpaid<`, `data-testid="effective-plan">starter<`, `data-testid="why-held"`, `data-testid="portal"`} {
		if !strings.Contains(bill.body, want) {
			t.Fatalf("the unpaid owner's page lacks %s: %s", want, bill.body)
		}
	}
	resp = owner.postNoFollow("/console/billing/portal", bill, url.Values{})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "http") {
		t.Fatalf("portal: %d, Location %q; want 303 to the portal", resp.StatusCode, loc)
	}

	// The owner, signed out elsewhere (the way from a 402's answer): the
	// sign-in comes back to this page.
	login := anon.get("/console/billing")
	back := anon.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}, "next": {"/console/billing"}})
	if !strings.HasSuffix(back.url, "/console/billing") || !strings.Contains(back.body, `data-testid="why-held"`) {
		t.Fatalf("signed in from the billing page: %d %s", back.status, back.url)
	}

	// Another tenant: its own plan, no customer of A's.
	other := newBrowser(t, in.base)
	consoleSignUp(t, other, "owner@b.example", "Beta")
	ob := other.get("/console/billing")
	if !strings.Contains(ob.body, `data-testid="plan">starter<`) || strings.Contains(ob.body, "unpaid") {
		t.Errorf("tenant B's page: %s", ob.body)
	}
	if p := other.post("/console/billing/portal", ob, url.Values{}); p.status != http.StatusConflict {
		t.Errorf("tenant B's portal: %d, want 409 (no customer of its own)", p.status)
	}

	// A developer: the facts, no buttons, 403 on the forms.
	sql(t, dsn, `UPDATE members SET role = 'developer' WHERE email = $1`, "owner@b.example")
	ob = other.get("/console/billing")
	if ob.status != 200 || strings.Contains(ob.body, `data-testid="upgrade-pro"`) || strings.Contains(ob.body, `data-testid="portal"`) || !strings.Contains(ob.body, `data-testid="owners-only"`) {
		t.Fatalf("a developer's page: %d %s", ob.status, ob.body)
	}
	for _, path := range []string{"/console/billing/checkout", "/console/billing/portal"} {
		if p := other.post(path, ob, url.Values{"plan": {"pro"}}); p.status != 403 {
			t.Errorf("a developer's %s: %d", path, p.status)
		}
	}
}

// TestConsoleBillingWithoutStripe: without STRIPE_API_KEY the page says
// so instead of the buttons, and the forms answer 503, never 500.
func TestConsoleBillingWithoutStripe(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1")
	b := newBrowser(t, in.base)
	consoleSignUp(t, b, "owner@a.example", "Acme")
	bill := b.get("/console/billing")
	if bill.status != 200 || !strings.Contains(bill.body, `data-testid="billing-not-configured"`) || strings.Contains(bill.body, `data-testid="upgrade-`) || strings.Contains(bill.body, `data-testid="portal"`) {
		t.Fatalf("billing page without Stripe: %d %s", bill.status, bill.body)
	}
	for _, path := range []string{"/console/billing/checkout", "/console/billing/portal"} {
		if p := b.post(path, bill, url.Values{"plan": {"pro"}}); p.status != 503 {
			t.Errorf("%s without Stripe: %d", path, p.status)
		}
	}
}
