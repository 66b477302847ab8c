package pgstore

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Plans implements tenant.Store.
func (s *Tenants) Plans(ctx context.Context) ([]tenant.Plan, error) {
	rows, err := s.q.ListPlans(ctx)
	if err != nil {
		return nil, fmt.Errorf("list plans: %w", dbErr(err, tenantErrors))
	}
	out := make([]tenant.Plan, len(rows))
	for i, r := range rows {
		out[i] = planOf(r)
	}
	return out, nil
}

// Plan implements tenant.Store.
func (s *Tenants) Plan(ctx context.Context, name string) (tenant.Plan, error) {
	row, err := s.q.GetPlan(ctx, name)
	if err != nil {
		return tenant.Plan{}, fmt.Errorf("plan %s: %w", name, dbErr(err, tenantErrors))
	}
	return planOf(row), nil
}

// SetPlanPrice implements tenant.Store.
func (s *Tenants) SetPlanPrice(ctx context.Context, name, stripePriceID string) (tenant.Plan, error) {
	if err := tenant.ValidatePriceID(stripePriceID); err != nil {
		return tenant.Plan{}, fmt.Errorf("set price of plan %s: %w", name, err)
	}
	row, err := s.q.SetPlanPrice(ctx, sqlcgen.SetPlanPriceParams{Name: name, StripePriceID: &stripePriceID})
	if err != nil {
		return tenant.Plan{}, fmt.Errorf("set price of plan %s: %w", name, dbErr(err, tenantErrors))
	}
	return planOf(row), nil
}

// SetPlanLimits implements tenant.Store.
func (s *Tenants) SetPlanLimits(ctx context.Context, name string, l tenant.PlanLimits) (tenant.Plan, error) {
	if err := l.Validate(); err != nil {
		return tenant.Plan{}, fmt.Errorf("set limits of plan %s: %w", name, err)
	}
	row, err := s.q.SetPlanLimits(ctx, sqlcgen.SetPlanLimitsParams{
		Name:           name,
		IpPerMinute:    l.IPPerMinute,
		QuotaPerMinute: l.QuotaPerMinute,
		QuotaPerHour:   l.QuotaPerHour,
		MonthlyChecks:  l.MonthlyChecks,
		SetUnlimited:   l.Unlimited,
	})
	if err != nil {
		return tenant.Plan{}, fmt.Errorf("set limits of plan %s: %w", name, dbErr(err, tenantErrors))
	}
	return planOf(row), nil
}

// planOf turns a row into a tenant.Plan.
func planOf(r sqlcgen.Plan) tenant.Plan {
	return tenant.Plan{
		Name:           r.Name,
		IPPerMinute:    r.IpPerMinute,
		QuotaPerMinute: r.QuotaPerMinute,
		QuotaPerHour:   r.QuotaPerHour,
		MonthlyChecks:  r.MonthlyChecks,
		Purchasable:    r.Purchasable,
		StripePriceID:  deref(r.StripePriceID),
	}
}
