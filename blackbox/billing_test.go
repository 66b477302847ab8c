package blackbox

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/tollgate/tollgate/internal/billing/stripeapi/stripemocktest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

const stripeSecret = "whsec_blackbox_0123456789abcdef"

// stripeEnv configures an instance for Stripe: webhooks signed with
// stripeSecret, API calls to stripe-mock.
func stripeEnv(t *testing.T) []string {
	return []string{
		"STRIPE_WEBHOOK_SECRET=" + stripeSecret,
		"STRIPE_API_KEY=sk_test_blackbox",
		"STRIPE_API_BASE=" + stripemocktest.URL(t),
	}
}

// postStripeEvent posts a Stripe event, signed as Stripe would, to an instance's
// webhook endpoint and returns the outcome it answers.
func postStripeEvent(t *testing.T, in *instance, id, typ string, created time.Time, object string) string {
	t.Helper()
	payload := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"livemode":false,"api_version":"2025-03-31.basil","data":{"object":%s}}`,
		id, typ, created.Unix(), object)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: stripeSecret})
	req, err := http.NewRequest("POST", in.base+"/webhooks/stripe", bytes.NewReader([]byte(payload)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	c := call{status: resp.StatusCode, body: b.Bytes()}
	var ans struct {
		Outcome string `json:"outcome"`
	}
	if c.status != 200 {
		t.Fatalf("webhook %s: %d %s", id, c.status, c.body)
	}
	c.json(t, &ans)
	return ans.Outcome
}

func stripeCheckoutObject(tenantID, customer, sub string) string {
	return fmt.Sprintf(`{"id":"cs_%s","object":"checkout.session","mode":"subscription","client_reference_id":%q,"customer":%q,"subscription":%q}`,
		sub, tenantID, customer, sub)
}

func stripeSubscriptionObject(customer, sub, status, price string) string {
	return fmt.Sprintf(`{"id":%q,"object":"subscription","customer":%q,"status":%q,"items":{"object":"list","data":[{"id":"si_%s","price":{"id":%q,"recurring":{"usage_type":"licensed"}}}]}}`,
		sub, customer, status, sub, price)
}

type billingUsageAnswer struct {
	Plan          string `json:"plan"`
	EffectivePlan string `json:"effective_plan"`
	BillingStatus string `json:"billing_status"`
}

func billingUsage(t *testing.T, in *instance, key string) billingUsageAnswer {
	t.Helper()
	c := do(t, "GET", in.base+"/v1/usage", key, nil)
	if c.status != 200 {
		t.Fatalf("usage: %d %s", c.status, c.body)
	}
	var u billingUsageAnswer
	c.json(t, &u)
	return u
}

// TestStripeWebhooksMoveThePlanOnEveryInstance: a tenant buys pro through
// Checkout; the webhooks, sent to one instance, change the plan the other
// instance applies within a second; a failed payment keeps the tier.
func TestStripeWebhooksMoveThePlanOnEveryInstance(t *testing.T) {
	dsn := pgtest.New(t)
	env := stripeEnv(t)
	a, b := start(t, dsn, env...), start(t, dsn, env...)
	cli(t, dsn, nil, "plans", "set-price", "pro", "price_bb_pro")
	nt := createTenant(t, dsn, "starter")

	// Checkout, made with stripe-go against stripe-mock.
	c := do(t, "POST", a.base+"/v1/billing/checkout", nt.LiveKey, map[string]any{"plan": "pro"})
	if c.status != 200 || !strings.Contains(string(c.body), `"url":"http`) {
		t.Fatalf("checkout: %d %s", c.status, c.body)
	}
	if c := do(t, "POST", a.base+"/v1/billing/checkout", nt.LiveKey, map[string]any{"plan": "growth"}); c.status != 400 || !strings.Contains(string(c.body), `"field":"plan"`) {
		t.Errorf("checkout of the legacy plan: %d %s", c.status, c.body)
	}

	// The other instance has the tenant cached as starter.
	if u := billingUsage(t, b, nt.LiveKey); u.EffectivePlan != "starter" {
		t.Fatalf("before: %+v", u)
	}
	now := time.Now()
	if got := postStripeEvent(t, a, "evt_bb_ck", "checkout.session.completed", now, stripeCheckoutObject(nt.TenantID, "cus_bb", "sub_bb")); got != "applied" {
		t.Fatalf("checkout.session.completed: %s", got)
	}
	if got := postStripeEvent(t, a, "evt_bb_sub", "customer.subscription.created", now, stripeSubscriptionObject("cus_bb", "sub_bb", "active", "price_bb_pro")); got != "applied" {
		t.Fatalf("customer.subscription.created: %s", got)
	}
	took := eventually.True(t, time.Second, "pro on the other instance", func() bool {
		u := billingUsage(t, b, nt.LiveKey)
		return u.Plan == "pro" && u.EffectivePlan == "pro" && u.BillingStatus == "active"
	})
	t.Logf("plan change reached the other instance in %s", took)

	// A replay to the other instance changes nothing.
	if got := postStripeEvent(t, b, "evt_bb_sub", "customer.subscription.created", now, stripeSubscriptionObject("cus_bb", "sub_bb", "active", "price_bb_pro")); got != "replay" {
		t.Errorf("replay: %s", got)
	}

	// Payment fails: past_due keeps the tier while Stripe retries.
	invoice := `{"id":"in_bb","object":"invoice","customer":"cus_bb","parent":{"subscription_details":{"subscription":"sub_bb"}}}`
	if got := postStripeEvent(t, a, "evt_bb_fail", "invoice.payment_failed", now.Add(time.Second), invoice); got != "applied" {
		t.Fatalf("invoice.payment_failed: %s", got)
	}
	eventually.True(t, time.Second, "past_due on the other instance", func() bool {
		u := billingUsage(t, b, nt.LiveKey)
		return u.BillingStatus == "past_due" && u.EffectivePlan == "pro"
	})

	// The portal, for a tenant with a customer.
	if c := do(t, "POST", b.base+"/v1/billing/portal", nt.LiveKey, nil); c.status != 200 || !strings.Contains(string(c.body), `"url":"http`) {
		t.Errorf("portal: %d %s", c.status, c.body)
	}
}

// TestUnpaidTenantGets402WithPortalLink: a pro tenant whose subscription is
// unpaid is held to starter; once the starter allotment is used up it is
// told to pay (402), and its billing_url leads to a fresh portal session.
func TestUnpaidTenantGets402WithPortalLink(t *testing.T) {
	dsn := pgtest.New(t)
	env := stripeEnv(t)
	a, b := start(t, dsn, env...), start(t, dsn, env...)
	cli(t, dsn, nil, "plans", "set-price", "pro", "price_bb_pro")
	cli(t, dsn, nil, "plans", "set", "starter", "--monthly-checks", "5")
	nt := createTenant(t, dsn, "starter")
	putPolicy(t, a, nt.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})

	now := time.Now()
	postStripeEvent(t, a, "evt_u_ck", "checkout.session.completed", now, stripeCheckoutObject(nt.TenantID, "cus_u", "sub_u"))
	postStripeEvent(t, a, "evt_u_sub", "customer.subscription.created", now, stripeSubscriptionObject("cus_u", "sub_u", "active", "price_bb_pro"))
	// Delivered before the subscription's update, though created after:
	// Stripe's dunning ends in unpaid.
	postStripeEvent(t, a, "evt_u_unpaid", "customer.subscription.updated", now.Add(2*time.Second), stripeSubscriptionObject("cus_u", "sub_u", "unpaid", "price_bb_pro"))
	if got := postStripeEvent(t, a, "evt_u_pastdue", "customer.subscription.updated", now.Add(time.Second), stripeSubscriptionObject("cus_u", "sub_u", "past_due", "price_bb_pro")); got != "stale" {
		t.Errorf("older update delivered late: %s, want stale", got)
	}
	eventually.True(t, time.Second, "unpaid on the other instance", func() bool {
		u := billingUsage(t, b, nt.LiveKey)
		return u.Plan == "pro" && u.BillingStatus == "unpaid" && u.EffectivePlan == "starter"
	})

	item := map[string]any{"policy": "open", "subject": "user-1"}
	for i := range 5 {
		if c := check(t, b, nt.LiveKey, item); c.status != 200 {
			t.Fatalf("check %d within the starter allotment: %d %s", i+1, c.status, c.body)
		}
	}
	c := check(t, b, nt.LiveKey, item)
	if c.status != http.StatusPaymentRequired {
		t.Fatalf("check beyond the starter allotment: %d %s, want 402", c.status, c.body)
	}
	var p struct {
		Code       string `json:"code"`
		BillingURL string `json:"billing_url"`
		Layer      string `json:"layer"`
	}
	c.json(t, &p)
	if p.Code != "payment_required" || p.Layer != "allotment" || !strings.HasPrefix(p.BillingURL, b.base+"/billing/portal/"+nt.TenantID+".") {
		t.Fatalf("402 body %s", c.body)
	}

	// The link works on any instance, and sends to a fresh portal session.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	link := strings.Replace(p.BillingURL, b.base, a.base, 1)
	for _, u := range []string{p.BillingURL, link} {
		resp, err := noFollow.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "http") {
			t.Errorf("GET billing_url: %d, Location %q; want 303 to the portal", resp.StatusCode, loc)
		}
	}
	forged := p.BillingURL[:len(p.BillingURL)-1] + "0"
	if strings.HasSuffix(p.BillingURL, "0") {
		forged = p.BillingURL[:len(p.BillingURL)-1] + "1"
	}
	resp, err := noFollow.Get(forged)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a forged billing link: %d, want 404", resp.StatusCode)
	}

	// Paid: back to pro, and checks flow again.
	postStripeEvent(t, a, "evt_u_paid", "invoice.paid", now.Add(3*time.Second), `{"id":"in_u","object":"invoice","customer":"cus_u","subscription":"sub_u"}`)
	eventually.True(t, time.Second, "checks admitted once paid", func() bool {
		return check(t, b, nt.LiveKey, item).status == 200
	})
}

func TestStripeWebhookWithoutSecret(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	req, _ := http.NewRequest("POST", in.base+"/webhooks/stripe", strings.NewReader(`{"id":"evt_1"}`))
	req.Header.Set("Stripe-Signature", "t=1,v1=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("webhook without a secret configured: %d, want 503", resp.StatusCode)
	}
	eventually.True(t, time.Second, "the log says why", func() bool {
		return strings.Contains(in.logs.String(), "STRIPE_WEBHOOK_SECRET is not set")
	})
}
