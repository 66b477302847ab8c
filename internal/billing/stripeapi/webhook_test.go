package stripeapi

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/tollgate/tollgate/internal/billing"
)

const (
	oldSecret = "whsec_old_0123456789"
	newSecret = "whsec_new_0123456789"
)

func sign(payload, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: secret, Timestamp: at}).Header
}

const subscriptionEvent = `{
  "id": "evt_1", "object": "event", "type": "customer.subscription.updated", "created": 1764000000,
  "livemode": false, "api_version": "2025-03-31.basil",
  "data": {"object": {
    "id": "sub_1", "object": "subscription", "customer": {"id": "cus_1", "object": "customer"},
    "status": "past_due", "metadata": {"tollgate_tenant_id": "t-1"}, "billing_cycle_anchor": 1769853600,
    "items": {"object": "list", "data": [
      {"id": "si_flat", "price": {"id": "price_pro", "recurring": {"usage_type": "licensed"}}},
      {"id": "si_use", "price": {"id": "price_use", "recurring": {"usage_type": "metered"}}}
    ]},
    "some_new_field": {"nested": [1, 2, 3]}
  }}
}`

func TestParseVerifiesSignatures(t *testing.T) {
	t.Parallel()
	v := NewVerifier([]string{oldSecret, newSecret}, "sk_test_123")
	now := time.Now()
	for _, tc := range []struct {
		name, header string
		ok           bool
		why          string
	}{
		{"signed with the first secret", sign(subscriptionEvent, oldSecret, now), true, ""},
		{"signed with the second secret (rotation)", sign(subscriptionEvent, newSecret, now), true, ""},
		{"signed a little in the past", sign(subscriptionEvent, newSecret, now.Add(-4*time.Minute)), true, ""},
		{"forged: another secret", sign(subscriptionEvent, "whsec_attacker_000", now), false, "matches no signing secret"},
		{"forged: another body", sign(strings.Replace(subscriptionEvent, "past_due", "active", 1), newSecret, now), false, "matches no signing secret"},
		{"stale: older than five minutes", sign(subscriptionEvent, newSecret, now.Add(-6*time.Minute)), false, "older than"},
		{"a little in the future (clock skew)", sign(subscriptionEvent, newSecret, now.Add(4*time.Minute)), true, ""},
		{"from the future: 400 s ahead", sign(subscriptionEvent, newSecret, now.Add(400*time.Second)), false, "in the future"},
		{"from the far future", sign(subscriptionEvent, newSecret, now.Add(24*time.Hour)), false, "in the future"},
		{"forged and from the future", sign(subscriptionEvent, "whsec_attacker_000", now.Add(time.Hour)), false, "matches no signing secret"},
		{"missing", "", false, "no Stripe-Signature"},
		{"malformed", "t=abc,v1", false, "malformed"},
		{"no v1 signature", "t=" + "1764000000", false, "matches no signing secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := v.Parse([]byte(subscriptionEvent), tc.header)
			if tc.ok {
				if err != nil || ev.ID != "evt_1" {
					t.Fatalf("Parse: %+v, %v", ev, err)
				}
				return
			}
			if !errors.Is(err, billing.ErrBadWebhook) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("Parse: %v, want ErrBadWebhook saying %q", err, tc.why)
			}
		})
	}
}

func TestParseWithoutSecret(t *testing.T) {
	t.Parallel()
	if _, err := NewVerifier(nil, "").Parse([]byte(subscriptionEvent), sign(subscriptionEvent, oldSecret, time.Now())); !errors.Is(err, billing.ErrNotConfigured) {
		t.Errorf("no secret: %v", err)
	}
}

// TestParseReadsEventsOfAnyVersion reads only what Tollgate needs, from any
// API version: expandable fields as ids or objects, the invoice's
// subscription where 2025's versions moved it, unknown fields ignored.
func TestParseReadsEventsOfAnyVersion(t *testing.T) {
	t.Parallel()
	v := NewVerifier([]string{newSecret}, "")
	parse := func(t *testing.T, payload string) billing.Event {
		t.Helper()
		ev, err := v.Parse([]byte(payload), sign(payload, newSecret, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	t.Run("subscription", func(t *testing.T) {
		t.Parallel()
		ev := parse(t, subscriptionEvent)
		s := ev.Subscription
		if ev.Type != billing.EventSubscriptionUpdated || !ev.Created.Equal(time.Unix(1764000000, 0)) || ev.CustomerID != "cus_1" || s == nil ||
			s.ID != "sub_1" || s.Status != "past_due" || s.TenantID != "t-1" || len(s.Items) != 2 ||
			!s.Anchor.Equal(time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)) ||
			s.Items[0] != (billing.Item{ID: "si_flat", PriceID: "price_pro"}) || s.Items[1] != (billing.Item{ID: "si_use", PriceID: "price_use", Metered: true}) {
			t.Errorf("event %+v, subscription %+v", ev, s)
		}
		if string(ev.Payload) != subscriptionEvent {
			t.Error("payload not kept as received")
		}
	})
	t.Run("checkout", func(t *testing.T) {
		t.Parallel()
		ev := parse(t, `{"id":"evt_2","type":"checkout.session.completed","created":1764000001,"api_version":"2023-10-16",
			"data":{"object":{"id":"cs_1","object":"checkout.session","mode":"subscription","client_reference_id":"t-2",
			"customer":"cus_2","subscription":{"id":"sub_2","object":"subscription"}}}}`)
		if c := ev.Checkout; ev.CustomerID != "cus_2" || c == nil || *c != (billing.Checkout{SessionID: "cs_1", Mode: "subscription", ClientReferenceID: "t-2", SubscriptionID: "sub_2"}) {
			t.Errorf("event %+v, checkout %+v", ev, c)
		}
	})
	t.Run("invoice of a 2025 version", func(t *testing.T) {
		t.Parallel()
		ev := parse(t, `{"id":"evt_3","type":"invoice.payment_failed","created":1764000002,"api_version":"2025-09-30.clover",
			"data":{"object":{"id":"in_1","object":"invoice","customer":"cus_3",
			"parent":{"type":"subscription_details","subscription_details":{"subscription":"sub_3"}}}}}`)
		if ev.Invoice == nil || *ev.Invoice != (billing.Invoice{ID: "in_1", SubscriptionID: "sub_3"}) || ev.CustomerID != "cus_3" {
			t.Errorf("event %+v, invoice %+v", ev, ev.Invoice)
		}
	})
	t.Run("invoice of 2023-10-16", func(t *testing.T) {
		t.Parallel()
		ev := parse(t, `{"id":"evt_4","type":"invoice.paid","created":1764000003,"api_version":"2023-10-16",
			"data":{"object":{"id":"in_2","object":"invoice","customer":"cus_4","subscription":"sub_4"}}}`)
		if ev.Invoice == nil || ev.Invoice.SubscriptionID != "sub_4" {
			t.Errorf("invoice %+v", ev.Invoice)
		}
	})
	t.Run("fields of unexpected types read as absent", func(t *testing.T) {
		t.Parallel()
		ev := parse(t, `{"id":"evt_5","type":"customer.subscription.created","created":1764000004,
			"data":{"object":{"id":"sub_5","customer":"cus_5","status":{"new":"shape"},"items":"none","metadata":null}}}`)
		if s := ev.Subscription; s == nil || s.ID != "sub_5" || s.Status != "" || len(s.Items) != 0 || ev.CustomerID != "cus_5" {
			t.Errorf("subscription %+v", s)
		}
	})
	t.Run("other types keep the customer", func(t *testing.T) {
		t.Parallel()
		ev := parse(t, `{"id":"evt_6","type":"customer.updated","created":1764000005,"data":{"object":{"id":"cus_6","object":"customer"}}}`)
		if ev.CustomerID != "cus_6" || ev.Subscription != nil || ev.Checkout != nil || ev.Invoice != nil {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("not an event", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{`{"id":"x"}`, `[1,2]`, `{"id":"evt_7","type":"invoice.paid","created":5,"data":{"object":[1]}}`} {
			if _, err := v.Parse([]byte(body), sign(body, newSecret, time.Now())); !errors.Is(err, billing.ErrBadWebhook) {
				t.Errorf("%s: %v, want ErrBadWebhook", body, err)
			}
		}
	})
}

// TestParseRefusesTheOtherMode refuses an event whose livemode disagrees
// with the mode of STRIPE_API_KEY: a live server never applies test
// events, nor a test server live ones. Without a key there is no mode to
// hold events to.
func TestParseRefusesTheOtherMode(t *testing.T) {
	t.Parallel()
	live := strings.Replace(subscriptionEvent, `"livemode": false`, `"livemode": true`, 1)
	for _, tc := range []struct {
		key     string
		payload string
		ok      bool
	}{
		{"sk_test_123", subscriptionEvent, true},
		{"rk_test_123", subscriptionEvent, true},
		{"sk_live_123", live, true},
		{"rk_live_123", live, true},
		{"", subscriptionEvent, true},
		{"", live, true},
		{"sk_live_123", subscriptionEvent, false},
		{"rk_live_123", subscriptionEvent, false},
		{"sk_test_123", live, false},
		{"rk_test_123", live, false},
	} {
		name := tc.key + " livemode=" + map[bool]string{true: "true", false: "false"}[tc.payload == live]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := NewVerifier([]string{newSecret}, tc.key).Parse([]byte(tc.payload), sign(tc.payload, newSecret, time.Now()))
			if tc.ok {
				if err != nil || ev.ID != "evt_1" {
					t.Fatalf("Parse: %+v, %v", ev, err)
				}
				return
			}
			if !errors.Is(err, billing.ErrBadWebhook) || !strings.Contains(err.Error(), "STRIPE_API_KEY") {
				t.Fatalf("Parse: %v, want ErrBadWebhook naming STRIPE_API_KEY", err)
			}
		})
	}
}
