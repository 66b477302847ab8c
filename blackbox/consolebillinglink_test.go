package blackbox

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// nextField is the sign-in form's way back.
var nextField = regexp.MustCompile(`name="next" value="([^"]*)"`)

// billingURLOf checks with key until the instance answers 402, and returns
// its billing_url.
func billingURLOf(t *testing.T, in *instance, key string) string {
	t.Helper()
	item := map[string]any{"policy": "open", "subject": "user-1"}
	for range 10 {
		c := check(t, in, key, item)
		if c.status == http.StatusOK {
			continue
		}
		var p struct {
			Code       string `json:"code"`
			BillingURL string `json:"billing_url"`
		}
		c.json(t, &p)
		if c.status != http.StatusPaymentRequired || p.Code != "payment_required" || p.BillingURL == "" {
			t.Fatalf("a check beyond the starter allotment: %d %s, want 402 with a billing_url", c.status, c.body)
		}
		return p.BillingURL
	}
	t.Fatal("no 402 within 10 checks")
	return ""
}

// holdToStarter has Stripe link customer and sub to tenantID, a pro
// subscription gone unpaid.
func holdToStarter(t *testing.T, in *instance, tenantID, customer, sub string) {
	t.Helper()
	now := time.Now()
	postStripeEvent(t, in, "evt_ck_"+sub, "checkout.session.completed", now, stripeCheckoutObject(tenantID, customer, sub))
	postStripeEvent(t, in, "evt_sub_"+sub, "customer.subscription.created", now, stripeSubscriptionObject(customer, sub, "unpaid", "price_bl_pro"))
}

// opened is where the billing link u sends a browser that does not follow
// it: the status and the Location.
func opened(t *testing.T, u string) (int, string) {
	t.Helper()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// TestBillingLinkLandsOnTheConsole: the billing_url of a 402 answer of a
// workspace that has console members leads to the console's billing page
// (through the sign-in, which comes back to it), which says why the
// person is there; it asks Stripe nothing (it works on an instance whose
// Stripe does not answer) and is not counted against the links' limits.
// A tenant an operator made with the CLI, with no members, still goes to
// the Stripe portal. A member of another workspace who follows the link is
// told it is for another workspace, sees nothing of it nor of their own
// billing, and may sign out and in as its member.
func TestBillingLinkLandsOnTheConsole(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in := start(t, dsn, append(stripeEnv(t), "TOLLGATE_DEV=1")...)
	// An instance whose Stripe never answers: only the portal's way asks it.
	deaf := start(t, dsn, "TOLLGATE_DEV=1", "STRIPE_WEBHOOK_SECRET="+stripeSecret, "STRIPE_API_KEY=sk_test_blackbox", "STRIPE_API_BASE=http://127.0.0.1:9")
	cli(t, dsn, nil, "plans", "set-price", "pro", "price_bl_pro")
	cli(t, dsn, nil, "plans", "set", "starter", "--monthly-checks", "3")

	owner := newBrowser(t, in.base)
	consoleSignUp(t, owner, "owner@a.example", "Acme Anvils")
	consoleConfirm(t, owner)
	_, key := createKey(owner, "server", "live", "none")
	if key == "" {
		t.Fatal("no live key made")
	}
	a := tenantOf(t, dsn, "owner@a.example")
	putPolicy(t, in, key, "open", map[string]any{"limit": 1000000, "window": "1h"})
	holdToStarter(t, in, a, "cus_bl_a", "sub_bl_a")
	link := billingURLOf(t, in, key)

	// Twelve opens, past the portal's ten an hour per tenant, on both
	// instances: each sends the browser to the console's billing page.
	for i := range 12 {
		base := in.base
		if i%2 == 1 {
			base = deaf.base
		}
		status, loc := opened(t, strings.Replace(link, in.base, base, 1))
		if status != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/billing?") {
			t.Fatalf("open %d of a console workspace's billing link: %d, Location %q; want 303 to /console/billing", i+1, status, loc)
		}
	}

	// Signed out: the sign-in comes back to the billing page, which says why.
	anon := newBrowser(t, in.base)
	login := anon.get(strings.TrimPrefix(link, in.base))
	next := nextField.FindStringSubmatch(login.body)
	if !strings.Contains(login.url, "/console/login?next=") || next == nil || !strings.HasPrefix(html.UnescapeString(next[1]), "/console/billing?") {
		t.Fatalf("the link signed out: %d %s %s", login.status, login.url, login.body)
	}
	bill := anon.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}, "next": {html.UnescapeString(next[1])}})
	for _, want := range []string{`data-testid="billing-link-reason"`, "402", `data-testid="billing-status">unpaid<`, `data-testid="portal"`, "Update the payment method"} {
		if bill.status != 200 || !strings.Contains(bill.url, "/console/billing?") || !strings.Contains(bill.body, want) {
			t.Fatalf("the owner's billing page from the link lacks %s: %d %s %s", want, bill.status, bill.url, bill.body)
		}
	}
	resp := anon.postNoFollow("/console/billing/portal", bill, url.Values{})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "http") {
		t.Fatalf("the owner's Update the payment method: %d, Location %q; want 303 to the portal", resp.StatusCode, loc)
	}

	// A tenant an operator made, no members: the portal, as before; on
	// the instance whose Stripe is down, Stripe's failure.
	op := createTenant(t, dsn, "starter")
	putPolicy(t, in, op.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})
	holdToStarter(t, in, op.TenantID, "cus_bl_op", "sub_bl_op")
	opLink := billingURLOf(t, in, op.LiveKey)
	if status, loc := opened(t, opLink); status != http.StatusSeeOther || !strings.HasPrefix(loc, "http") || strings.Contains(loc, "/console/") {
		t.Fatalf("the billing link of a tenant without members: %d, Location %q; want 303 to the portal", status, loc)
	}
	if status, _ := opened(t, strings.Replace(opLink, in.base, deaf.base, 1)); status != http.StatusBadGateway {
		t.Fatalf("the portal's way where Stripe does not answer: %d, want 502", status)
	}

	// A member of another workspace follows A's link.
	other := newBrowser(t, in.base)
	consoleSignUp(t, other, "owner@b.example", "Beta Bakery")
	wrong := other.get(strings.TrimPrefix(link, in.base))
	if wrong.status != http.StatusForbidden || !strings.Contains(wrong.body, `data-testid="other-workspace"`) || !strings.Contains(wrong.body, `data-testid="other-workspace-sign-out"`) {
		t.Fatalf("A's link followed by B's member: %d %s", wrong.status, wrong.body)
	}
	for _, leak := range []string{"Acme", "owner@a.example", "unpaid", `data-testid="plan"`, `data-testid="portal"`, `data-testid="upgrade-`, `data-testid="billing-status"`} {
		if strings.Contains(wrong.body, leak) {
			t.Errorf("A's link shows B's member %q: %s", leak, wrong.body)
		}
	}
	for _, q := range []string{"from=billing-link&workspace=nope", "from=billing-link&workspace=" + url.QueryEscape("../x\x00<b>"), "from=billing-link"} {
		if p := other.get("/console/billing?" + q); p.status >= 500 || strings.Contains(p.body, "Acme") {
			t.Errorf("billing page ?%s: %d", q, p.status)
		}
	}
	// Its sign-out leads to the sign-in, and back to A's page for A's owner.
	out := other.post("/console/logout", wrong, url.Values{"next": {html.UnescapeString(nextField.FindStringSubmatch(wrong.body)[1])}})
	next = nextField.FindStringSubmatch(out.body)
	if !strings.Contains(out.body, "You are signed out.") || next == nil || !strings.HasPrefix(html.UnescapeString(next[1]), "/console/billing?") {
		t.Fatalf("signed out from A's link: %d %s %s", out.status, out.url, out.body)
	}
	back := other.post("/console/login", out, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}, "next": {html.UnescapeString(next[1])}})
	if !strings.Contains(back.body, `data-testid="billing-link-reason"`) {
		t.Fatalf("A's owner after B's sign-out: %d %s", back.status, back.url)
	}

	// A developer of A is told to ask an owner.
	sql(t, dsn, `UPDATE members SET role = 'developer' WHERE email = $1`, "owner@a.example")
	dev := owner.get(strings.TrimPrefix(link, in.base))
	if !strings.Contains(dev.body, `data-testid="ask-an-owner"`) || strings.Contains(dev.body, `data-testid="portal"`) {
		t.Fatalf("a developer's billing page from the link: %d %s", dev.status, dev.body)
	}

	// The subscription canceled: no card to fix, the owner is told to buy
	// again.
	sql(t, dsn, `UPDATE members SET role = 'owner' WHERE email = $1`, "owner@a.example")
	postStripeEvent(t, in, "evt_del_sub_bl_a", "customer.subscription.deleted", time.Now().Add(time.Second), stripeSubscriptionObject("cus_bl_a", "sub_bl_a", "canceled", "price_bl_pro"))
	ended := owner.get(strings.TrimPrefix(link, in.base))
	if !strings.Contains(ended.body, `data-testid="buy-again"`) || !strings.Contains(ended.body, `data-testid="upgrade-pro"`) {
		t.Fatalf("an owner's billing page from the link, the subscription canceled: %d %s", ended.status, ended.body)
	}
}
