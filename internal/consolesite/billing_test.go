package consolesite

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/tenant"
)

// TestBillingView: what the billing page says of a tenant's plan and
// status, as tenant.EffectivePlanName decides, and which plans it offers.
func TestBillingView(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	plans := []tenant.Plan{
		{Name: "starter", MonthlyChecks: n(100_000), Purchasable: true},
		{Name: "pro", MonthlyChecks: n(50_000_000), Purchasable: true, StripePriceID: "price_pro"},
		{Name: "growth", MonthlyChecks: n(50_000_000), StripePriceID: "price_growth"},
		{Name: "enterprise", Purchasable: true},
	}
	cases := []struct {
		name                 string
		t                    tenant.Tenant
		effective, allotment string
		held                 bool
		whyHas               string
		upgrades             int
	}{
		{"new starter", tenant.Tenant{Plan: "starter", BillingStatus: "active"}, "starter", "100,000", false, "free plan", 1},
		{"paid pro", tenant.Tenant{Plan: "pro", BillingStatus: "active", StripeSubscriptionID: "sub"}, "pro", "50,000,000", false, "Paid", 0},
		{"past due keeps the tier", tenant.Tenant{Plan: "pro", BillingStatus: "past_due", StripeSubscriptionID: "sub"}, "pro", "50,000,000", false, "retrying", 0},
		{"unpaid is held", tenant.Tenant{Plan: "pro", BillingStatus: "unpaid", StripeSubscriptionID: "sub"}, "starter", "100,000", true, "402", 0},
		{"canceled may buy anew", tenant.Tenant{Plan: "pro", BillingStatus: "canceled", StripeSubscriptionID: "sub"}, "starter", "100,000", true, "canceled", 1},
		{"legacy growth", tenant.Tenant{Plan: "growth", BillingStatus: "active", StripeSubscriptionID: "sub"}, "pro", "50,000,000", false, "former name", 0},
		{"enterprise unlimited", tenant.Tenant{Plan: "enterprise", BillingStatus: "active"}, "enterprise", "unlimited", false, "Paid", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := billingView(tc.t, plans)
			if v.EffectivePlan != tc.effective || v.Allotment != tc.allotment || v.Held != tc.held {
				t.Errorf("effective %q, allotment %q, held %v; want %q, %q, %v", v.EffectivePlan, v.Allotment, v.Held, tc.effective, tc.allotment, tc.held)
			}
			if !strings.Contains(v.Why, tc.whyHas) {
				t.Errorf("why %q, want it to say %q", v.Why, tc.whyHas)
			}
			if len(v.Upgrades) != tc.upgrades {
				t.Errorf("upgrades %+v, want %d", v.Upgrades, tc.upgrades)
			}
		})
	}
}
