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
	// Budgets are the tenant's budget policies (policy.Policy.Budget) as
	// they stand now: those of scope global, and those of scope subject
	// for the subject named by ?subject= (none without it).
	Budgets []budgetAnswer `json:"budgets"`
}

// budgetAnswer is one budget of /v1/usage for its current window.
type budgetAnswer struct {
	Policy   string `json:"policy"`
	Subject  string `json:"subject,omitempty"`
	Unit     string `json:"unit"`
	Limit    int64  `json:"limit"`
	Spent    int64  `json:"spent"`
	Reserved int64  `json:"reserved"`
	Left     int64  `json:"left"`
	ResetAt  string `json:"reset_at"`
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
	budgets, err := a.budgets(c, t.ID)
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
		RefusalsByLayer: r.Refusals, Alerts: alerts, WebhooksDisabled: disabled, Budgets: budgets,
	})
}

// budgets answers the budgets of /v1/usage: the tenant's budget policies,
// of scope subject for ?subject= alone.
func (a *api) budgets(c echo.Context, tenantID string) ([]budgetAnswer, error) {
	ctx := c.Request().Context()
	ps, err := a.cfg.Policies.ListPolicies(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range ps {
		if p.Budget() {
			names = append(names, p.Name)
		}
	}
	out := []budgetAnswer{}
	if len(names) == 0 {
		return out, nil
	}
	bs, err := a.gate.Budgets(ctx, tenantID, names, c.QueryParam("subject"))
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		out = append(out, budgetAnswer{
			Policy: b.Policy, Subject: b.Subject, Unit: b.Unit, Limit: b.Limit,
			Spent: b.Spent, Reserved: b.Reserved, Left: b.Left, ResetAt: ceilSecond(b.ResetAt).Format(time.RFC3339),
		})
	}
	return out, nil
}
