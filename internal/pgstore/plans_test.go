package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgate/tollgate/internal/tenant"
)

func TestPlans(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	plans, err := s.Plans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range plans {
		names = append(names, p.Name)
	}
	// The seeded table (DESIGN §3), smallest first.
	want := []string{"starter", "growth", "pro", "enterprise", "enterprise_dedicated"}
	if len(names) != len(want) {
		t.Fatalf("plans %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("plans %v, want %v", names, want)
		}
	}
	starter, err := s.Plan(ctx, "starter")
	if err != nil {
		t.Fatal(err)
	}
	if starter.IPPerMinute != 600 || starter.QuotaPerMinute != 1200 || starter.QuotaPerHour != 30000 ||
		starter.MonthlyChecks == nil || *starter.MonthlyChecks != 100000 || !starter.Purchasable || starter.StripePriceID != "" {
		t.Fatalf("starter: %+v", starter)
	}
	if ent, _ := s.Plan(ctx, "enterprise"); ent.MonthlyChecks != nil {
		t.Fatalf("enterprise: monthly checks %d, want unlimited", *ent.MonthlyChecks)
	}
	if _, err := s.Plan(ctx, "platinum"); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("unknown plan: got %v, want ErrNotFound", err)
	}
}

func TestSetPlanPrice(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	p, err := s.SetPlanPrice(ctx, "pro", "price_1ProMonthly")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "pro" || p.StripePriceID != "price_1ProMonthly" {
		t.Fatalf("got %+v", p)
	}
	if _, err := s.SetPlanPrice(ctx, "enterprise", "price_1ProMonthly"); !errors.Is(err, tenant.ErrConflict) {
		t.Fatalf("a price mapped twice: got %v, want ErrConflict", err)
	}
	if _, err := s.SetPlanPrice(ctx, "platinum", "price_x"); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("unknown plan: got %v, want ErrNotFound", err)
	}
	if _, err := s.SetPlanPrice(ctx, "pro", ""); !errors.Is(err, tenant.ErrInvalid) {
		t.Fatalf("empty price: got %v, want ErrInvalid", err)
	}
}

func TestSetPlanLimits(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	p, err := s.SetPlanLimits(ctx, "starter", tenant.PlanLimits{IPPerMinute: ptr(900), MonthlyChecks: ptr(5000)})
	if err != nil {
		t.Fatal(err)
	}
	if p.IPPerMinute != 900 || p.QuotaPerMinute != 1200 || p.QuotaPerHour != 30000 || p.MonthlyChecks == nil || *p.MonthlyChecks != 5000 {
		t.Fatalf("only ip_per_minute and monthly_checks should change: %+v", p)
	}
	p, err = s.SetPlanLimits(ctx, "starter", tenant.PlanLimits{QuotaPerMinute: ptr(10), QuotaPerHour: ptr(100), Unlimited: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.IPPerMinute != 900 || p.QuotaPerMinute != 10 || p.QuotaPerHour != 100 || p.MonthlyChecks != nil {
		t.Fatalf("quotas set and cap removed: %+v", p)
	}
	if _, err := s.SetPlanLimits(ctx, "starter", tenant.PlanLimits{IPPerMinute: ptr(0)}); !errors.Is(err, tenant.ErrInvalid) {
		t.Fatalf("zero limit: got %v, want ErrInvalid", err)
	}
	if _, err := s.SetPlanLimits(ctx, "platinum", tenant.PlanLimits{IPPerMinute: ptr(1)}); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("unknown plan: got %v, want ErrNotFound", err)
	}
}
