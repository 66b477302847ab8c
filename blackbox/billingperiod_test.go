package blackbox

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// TestBudgetFollowsTheBillingPeriod: a budget of window "billing" counts
// the calendar month until the tenant subscribes, then the periods of its
// Stripe subscription's billing cycle anchor (here a 31st, which short
// months lack), on every instance within a second of the webhook, on
// PostgreSQL and Redis; the subscription's end brings the calendar month
// back. What was charged in the old window stays charged when the new one
// began before it (limit's fixed window keeps a state at or after the
// window's start).
func TestBudgetFollowsTheBillingPeriod(t *testing.T) {
	t.Parallel()
	for name, store := range map[string][]string{
		"postgres": {patientStore},
		"redis":    {patientStore, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL=" + redistest.StartServer(t)},
	} {
		t.Run(name, func(t *testing.T) {
			dsn := pgtest.New(t)
			env := append(stripeEnv(t), store...)
			a, b := start(t, dsn, env...), start(t, dsn, env...)
			cli(t, dsn, nil, "plans", "set-price", "pro", "price_bp_pro")
			nt := createTenant(t, dsn, "starter")
			u := apiUser{t: t, in: a, key: nt.LiveKey}
			u.putPolicyAll("llm", map[string]any{"limit": 1000, "window": "billing", "unit": "tokens"}, b)
			if c := u.call("GET", "/v1/policies/llm", nil); c.status != 200 || !strings.Contains(string(c.body), `"window":"billing"`) {
				t.Fatalf("GET the policy: %d %s", c.status, c.body)
			}

			// No subscription: the calendar month.
			_, calEnd := limit.Month.Bounds(time.Now().UnixMicro())
			if got := u.on(b).budgetReset("llm", 100); !got.Equal(time.UnixMicro(calEnd)) {
				t.Fatalf("before subscribing: reset at %s, want the month's end %s", got, time.UnixMicro(calEnd).UTC())
			}

			// The subscription, anchored on a 31st at 10:00.
			anchor := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
			now := time.Now()
			if got := postStripeEvent(t, a, "evt_bp_ck", "checkout.session.completed", now, stripeCheckoutObject(nt.TenantID, "cus_bp", "sub_bp")); got != "applied" {
				t.Fatalf("checkout.session.completed: %s", got)
			}
			sub := strings.Replace(stripeSubscriptionObject("cus_bp", "sub_bp", "active", "price_bp_pro"),
				`"status"`, fmt.Sprintf(`"billing_cycle_anchor":%d,"status"`, anchor.Unix()), 1)
			if got := postStripeEvent(t, a, "evt_bp_sub", "customer.subscription.created", now, sub); got != "applied" {
				t.Fatalf("customer.subscription.created: %s", got)
			}
			w := limit.BillingPeriod.Anchored(anchor)
			calStart, _ := limit.Month.Bounds(time.Now().UnixMicro())
			start, end := w.Bounds(time.Now().UnixMicro())
			eventually.True(t, 2*time.Second, "the billing period on the other instance", func() bool {
				return u.on(b).budgetReset("llm", 1).Equal(time.UnixMicro(end))
			})
			// The 100 (and the probes of 1) charged in the calendar month
			// count on when the billing period began before it.
			left := u.on(b).remaining("llm", "s")
			if carried := calStart >= start; carried && left > 1000-101 || !carried && left < 990 {
				t.Errorf("period from %s: %d left (calendar month from %s)", time.UnixMicro(start).UTC(), left, time.UnixMicro(calStart).UTC())
			}

			// The subscription ends: the calendar month again.
			if got := postStripeEvent(t, a, "evt_bp_del", "customer.subscription.deleted", now.Add(time.Second),
				strings.Replace(sub, `"active"`, `"canceled"`, 1)); got != "applied" {
				t.Fatalf("customer.subscription.deleted: %s", got)
			}
			eventually.True(t, 2*time.Second, "the calendar month on the other instance", func() bool {
				return u.on(b).budgetReset("llm", 1).Equal(time.UnixMicro(calEnd))
			})
		})
	}
}

// budgetReset reserves amount of policy's budget (allowed, and left held)
// and returns the reset_at it answers: the end of the budget's window.
func (u apiUser) budgetReset(policy string, amount int64) time.Time {
	u.t.Helper()
	c := u.call("POST", "/v1/reservations", map[string]any{"policy": policy, "subject": "s", "amount": amount, "ttl": "1h"})
	var a struct {
		Allowed bool      `json:"allowed"`
		ResetAt time.Time `json:"reset_at"`
	}
	c.json(u.t, &a)
	if c.status != 200 || !a.Allowed {
		u.t.Fatalf("POST /v1/reservations: %d %s", c.status, c.body)
	}
	return a.ResetAt
}
