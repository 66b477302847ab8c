package tenant

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

var (
	allPlans    = []string{PlanStarter, PlanPro, PlanGrowth, PlanEnterprise, PlanEnterpriseDedicated}
	allStatuses = []string{"", StatusActive, StatusTrialing, StatusPastDue, StatusUnpaid, StatusCanceled, StatusIncomplete, StatusIncompleteExpired, StatusPaused}
)

func TestEffectivePlanName(t *testing.T) {
	t.Parallel()
	// The purchased tier, growth read as pro: what a tenant in good standing
	// (or past due, while Stripe retries) gets.
	tier := map[string]string{
		PlanStarter:             PlanStarter,
		PlanPro:                 PlanPro,
		PlanGrowth:              PlanPro,
		PlanEnterprise:          PlanEnterprise,
		PlanEnterpriseDedicated: PlanEnterpriseDedicated,
	}
	starter := map[string]string{}
	for _, p := range allPlans {
		starter[p] = PlanStarter
	}
	want := map[string]map[string]string{
		"":                      tier, // no subscription yet: an operator's choice
		StatusActive:            tier,
		StatusTrialing:          tier,
		StatusPastDue:           tier,
		StatusUnpaid:            starter,
		StatusCanceled:          starter,
		StatusIncomplete:        starter,
		StatusIncompleteExpired: starter,
		StatusPaused:            starter,
	}
	for _, status := range allStatuses {
		for _, plan := range allPlans {
			t.Run(status+"/"+plan, func(t *testing.T) {
				t.Parallel()
				if got := EffectivePlanName(plan, status); got != want[status][plan] {
					t.Errorf("EffectivePlanName(%q, %q) = %q, want %q", plan, status, got, want[status][plan])
				}
			})
		}
	}
}

func TestHeldToStarter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		plan, status string
		want         bool
	}{
		{PlanStarter, StatusUnpaid, false},
		{PlanStarter, StatusActive, false},
		{PlanPro, StatusActive, false},
		{PlanPro, StatusPastDue, false},
		{PlanPro, StatusUnpaid, true},
		{PlanGrowth, StatusCanceled, true},
		{PlanEnterprise, StatusPaused, true},
		{PlanEnterprise, StatusTrialing, false},
	}
	for _, c := range cases {
		t.Run(c.plan+"/"+c.status, func(t *testing.T) {
			t.Parallel()
			if got := HeldToStarter(Tenant{Plan: c.plan, BillingStatus: c.status}); got != c.want {
				t.Errorf("HeldToStarter(%s, %s) = %v, want %v", c.plan, c.status, got, c.want)
			}
		})
	}
}

func ptr(v int64) *int64 { return &v }

func TestValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		err       error
		wantField string // "" means valid
	}{
		{"name ok", ValidateName("Acme, Inc."), ""},
		{"name unicode 200", ValidateName(strings.Repeat("é", 200)), ""},
		{"name empty", ValidateName(""), "name"},
		{"name 201", ValidateName(strings.Repeat("a", 201)), "name"},
		{"name blank", ValidateName("   "), "name"},
		{"name control", ValidateName("a\x00b"), "name"},
		{"name bad utf-8", ValidateName("a\xffb"), "name"},
		{"tenant limits none", TenantLimits{}.Validate(), ""},
		{"tenant limits all", TenantLimits{RateLimitPerMinute: 5, QuotaPerMinute: ptr(1), QuotaPerHour: ptr(2)}.Validate(), ""},
		{"tenant rate negative", TenantLimits{RateLimitPerMinute: -1}.Validate(), "rate_limit_per_minute"},
		{"tenant quota zero", TenantLimits{QuotaPerMinute: ptr(0)}.Validate(), "quota_per_minute"},
		{"tenant hour negative", TenantLimits{QuotaPerHour: ptr(-5)}.Validate(), "quota_per_hour"},
		{"plan limits none", PlanLimits{}.Validate(), ""},
		{"plan limits unlimited", PlanLimits{Unlimited: true, IPPerMinute: ptr(1)}.Validate(), ""},
		{"plan ip zero", PlanLimits{IPPerMinute: ptr(0)}.Validate(), "ip_per_minute"},
		{"plan quota negative", PlanLimits{QuotaPerMinute: ptr(-1)}.Validate(), "quota_per_minute"},
		{"plan hour zero", PlanLimits{QuotaPerHour: ptr(0)}.Validate(), "quota_per_hour"},
		{"plan monthly zero", PlanLimits{MonthlyChecks: ptr(0)}.Validate(), "monthly_checks"},
		{"plan monthly and unlimited", PlanLimits{MonthlyChecks: ptr(5), Unlimited: true}.Validate(), "monthly_checks"},
		{"price ok", ValidatePriceID("price_1OaBcD"), ""},
		{"price empty", ValidatePriceID(""), "stripe_price_id"},
		{"price space", ValidatePriceID("price 1"), "stripe_price_id"},
		{"price long", ValidatePriceID(strings.Repeat("p", 256)), "stripe_price_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.wantField == "" {
				if c.err != nil {
					t.Fatalf("got %v, want nil", c.err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(c.err, &fe) || !errors.Is(c.err, ErrInvalid) {
				t.Fatalf("got %v, want a *FieldError wrapping ErrInvalid", c.err)
			}
			if fe.Field != c.wantField || fe.Reason == "" {
				t.Errorf("got field %q reason %q, want field %q and a reason", fe.Field, fe.Reason, c.wantField)
			}
		})
	}
}

func TestValidatePlan(t *testing.T) {
	t.Parallel()
	plans := []Plan{{Name: PlanStarter}, {Name: PlanPro}}
	for _, tc := range []struct{ name, plan, err string }{
		{"a plan", PlanPro, ""},
		{"no plan", "gold", `plan: "gold": no such plan; want one of starter, pro`},
		{"empty", "", `plan: "": no such plan; want one of starter, pro`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidatePlan(plans, tc.plan)
			if got := fmt.Sprint(err); tc.err == "" && err != nil || tc.err != "" && (got != tc.err || !errors.Is(err, ErrInvalid)) {
				t.Errorf("ValidatePlan(%q) = %v, want %q", tc.plan, err, tc.err)
			}
		})
	}
}
