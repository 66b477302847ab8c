package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/usage"
)

// UsageService answers /v1/usage: the metering (usage.Recorder) and the
// tenants and plans (tenant.Directory).
type UsageService interface {
	Usage(ctx context.Context, tenantID string, now time.Time) (usage.Report, error)
	Tenant(ctx context.Context, id string) (tenant.Tenant, error)
	Plan(ctx context.Context, name string) (tenant.Plan, error)
}

type usageAnswer struct {
	TenantID         string           `json:"tenant_id"`
	Plan             string           `json:"plan"`
	EffectivePlan    string           `json:"effective_plan"`
	BillingStatus    string           `json:"billing_status"`
	PeriodStart      time.Time        `json:"period_start"`
	PeriodEnd        time.Time        `json:"period_end"`
	ChecksUsed       int64            `json:"checks_used"`
	ChecksAllotment  *int64           `json:"checks_allotment"`
	SandboxUsed      int64            `json:"sandbox_used"`
	SandboxAllotment int64            `json:"sandbox_allotment"`
	RefusalsByLayer  map[string]int64 `json:"refusals_by_layer"`
	Alerts           []alert.Alert    `json:"alerts"`
	// WebhooksDisabled lists the tenant's disabled webhook endpoints and
	// why: a tenant that polls its usage learns that its receiver was
	// given up on.
	WebhooksDisabled []disabledHook `json:"webhooks_disabled"`
}

type disabledHook struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Reason string `json:"reason"`
}

func (a *api) usage(c echo.Context) error {
	ctx := c.Request().Context()
	svc := a.cfg.Usage
	t, err := svc.Tenant(ctx, tenantID(c))
	if err != nil {
		return err
	}
	eff := tenant.EffectivePlanName(t.Plan, t.BillingStatus)
	plan, err := svc.Plan(ctx, eff)
	if err != nil {
		return err
	}
	r, err := svc.Usage(ctx, t.ID, time.Now())
	if err != nil {
		return err
	}
	alerts := r.Alerts
	if alerts == nil {
		alerts = []alert.Alert{}
	}
	disabled := []disabledHook{}
	if a.cfg.Webhooks != nil {
		es, err := a.cfg.Webhooks.Endpoints(ctx, t.ID)
		if err != nil {
			return err
		}
		for _, e := range es {
			if !e.Enabled {
				disabled = append(disabled, disabledHook{ID: e.ID, URL: e.URL, Reason: e.DisabledReason})
			}
		}
	}
	return c.JSON(http.StatusOK, usageAnswer{
		TenantID: t.ID, Plan: t.Plan, EffectivePlan: eff, BillingStatus: t.BillingStatus,
		PeriodStart: r.PeriodStart, PeriodEnd: r.PeriodEnd,
		ChecksUsed: r.ChecksUsed, ChecksAllotment: plan.MonthlyChecks,
		SandboxUsed: r.SandboxUsed, SandboxAllotment: tenant.SandboxAllotment,
		RefusalsByLayer: r.Refusals, Alerts: alerts, WebhooksDisabled: disabled,
	})
}
