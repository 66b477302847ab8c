package consolesite

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/usageview"
	"github.com/tollgate/tollgate/web"
)

// UsageSources is what the usage page reads besides Config's Plans and
// Policies, as the dashboard's tenant page reads it: the usage report
// (*usage.Recorder), the traffic (traffic.Store), and where budgets stand
// (*gate.Gate). Every read is of the member's own tenant.
type UsageSources struct {
	Usage interface {
		Usage(ctx context.Context, tenantID string, now time.Time) (usage.Report, error)
	}
	Traffic interface {
		Traffic(ctx context.Context, tenantID string, from, until time.Time) ([]traffic.MinuteCount, error)
		DailyChecks(ctx context.Context, tenantID string, from, until time.Time) ([]traffic.DayCount, error)
		DailyTraffic(ctx context.Context, tenantID string, from, until time.Time) ([]traffic.DayOutcome, error)
		DegradedMinutes(ctx context.Context, from, until time.Time) ([]traffic.Degraded, error)
	}
	// Policies counts checks and refusals per policy
	// (*usage.PolicyRecorder); nil: the page says they are not counted.
	Policies usageview.PolicySource
	// Budgets may be nil: the page then shows budgets as unavailable.
	Budgets interface {
		Budgets(ctx context.Context, tenantID string, policies []string, subject string) ([]gate.Budget, error)
	}
}

// usageReady reports whether the sources the usage page needs are wired.
func (s *Site) usageReady() bool {
	u := s.cfg.Usage
	return u != nil && u.Usage != nil && u.Traffic != nil && s.cfg.Plans != nil && s.cfg.Policies != nil
}

// registerUsage mounts the usage page: both roles may read it.
func (s *Site) registerUsage(g *echo.Group) {
	g.GET("/usage", s.page(s.usage))
}

// usage shows the member's tenant's usage: the month against the plan's
// allotment, checks per minute over 24 hours, the month's checks by day,
// refusals by layer, alerts, budgets and degraded periods.
func (s *Site) usage(c echo.Context, m *member) error {
	if !s.usageReady() {
		return s.message(c, http.StatusServiceUnavailable, web.ConsoleMessageView{Title: "Usage unavailable",
			Message: "This Tollgate does not show usage in its console yet.", Link: "/console", LinkLabel: "The console"})
	}
	v, err := s.usageView(c.Request().Context(), m)
	if err != nil {
		return s.fail(c, err)
	}
	return render(c, http.StatusOK, web.ConsoleUsage(v))
}

// usageView reads and builds the usage page of m's tenant with the
// dashboard's builders (package usageview).
func (s *Site) usageView(ctx context.Context, m *member) (web.ConsoleUsageView, error) {
	src := s.cfg.Usage
	fail := func(what string, err error) (web.ConsoleUsageView, error) {
		return web.ConsoleUsageView{}, fmt.Errorf("usage page of tenant %s: %s: %w", m.TenantID, what, err)
	}
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return fail("tenant", err)
	}
	now := s.cfg.Now().UTC()
	until := now.Truncate(time.Minute).Add(time.Minute)
	dayFrom := until.Add(-24 * time.Hour)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	plan, err := s.effectivePlan(ctx, t)
	if err != nil {
		return fail("plans", err)
	}
	report, err := src.Usage.Usage(ctx, t.ID, now)
	if err != nil {
		return fail("usage report", err)
	}
	minutes, err := src.Traffic.Traffic(ctx, t.ID, dayFrom, until)
	if err != nil {
		return fail("checks per minute", err)
	}
	days, err := src.Traffic.DailyChecks(ctx, t.ID, month, until)
	if err != nil {
		return fail("checks per day", err)
	}
	daysFrom := now.Truncate(24*time.Hour).AddDate(0, 0, 1-usageDays)
	daily, err := src.Traffic.DailyTraffic(ctx, t.ID, daysFrom, until)
	if err != nil {
		return fail("checks per day and outcome", err)
	}
	degraded, err := src.Traffic.DegradedMinutes(ctx, dayFrom, until)
	if err != nil {
		return fail("degraded minutes", err)
	}
	pols, err := s.cfg.Policies.ListPolicies(ctx, t.ID)
	if err != nil {
		return fail("policies", err)
	}
	v := web.ConsoleUsageView{
		Chrome: web.ConsoleChrome{Title: "Usage", Section: "usage", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf},
		Plan:   plan.Name, Month: usageview.UsageBar(report.ChecksUsed, plan.MonthlyChecks),
		Minutes:   minuteChart(minutes, degraded, dayFrom),
		Days:      dayChart(daily, daysFrom),
		MonthDays: usageview.MonthChart(days, month, now, plan.MonthlyChecks),
		Refusals: usageview.RefusalBars("console-refusals", "Refused requests by layer, this month", "refused requests", report.Refusals,
			"No refusals this month."),
		Alerts:   usageview.AlertRows(report.Alerts),
		Budgets:  s.budgetRows(ctx, t.ID, pols),
		Degraded: usageview.DegradedPeriods(degraded),
	}
	v.PolicyUsage = web.PolicyUsage{ID: "console-policy-usage", Empty: "This Tollgate does not count checks per policy."}
	if src.Policies != nil {
		if v.PolicyUsage, err = usageview.PolicyCharts(ctx, src.Policies, t.ID, now, "console-policy-usage"); err != nil {
			return fail("checks per policy", err)
		}
	}
	v.MonthDays.ID = "console-month"
	v.Refusals.Width = 1000 // as on the dashboard's tenant page: a card's width
	return v, nil
}

// effectivePlan is the plan t's checks count against (its plan, or
// starter while billing holds it there).
func (s *Site) effectivePlan(ctx context.Context, t tenant.Tenant) (tenant.Plan, error) {
	ps, err := s.cfg.Plans.Plans(ctx)
	if err != nil {
		return tenant.Plan{}, err
	}
	name := tenant.EffectivePlanName(t.Plan, t.BillingStatus)
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return tenant.Plan{Name: name}, nil
}

// minuteChart draws the tenant's checks per minute and outcome over the 24
// hours from dayFrom, the service's degraded minutes shaded.
func minuteChart(minutes []traffic.MinuteCount, degraded []traffic.Degraded, dayFrom time.Time) web.Chart {
	series, totals := usageview.MinuteSeries(minutes, dayFrom, 24*60)
	c := web.Chart{
		ID: "console-minutes", Title: "Checks per minute, last 24 hours", YUnit: "checks per minute", XLabel: "time (UTC)",
		Kind: web.StackedArea, Columns: 24 * 60, Series: series, XTicks: usageview.ClockTicks(dayFrom, 24*60, 6*time.Hour),
		Bands:   usageview.DegradedBands(degraded, dayFrom, 24*60),
		Summary: usageview.ChartSummary(totals, "in the last 24 hours"),
	}
	if len(minutes) == 0 {
		c.Empty = "No checks in the last 24 hours. The chart fills in as you call POST /v1/check with one of your keys."
	}
	return c
}

// usageDays is how many UTC days, today's included, the per-day chart
// draws.
const usageDays = 30

// dayChart draws the tenant's checks per UTC day and outcome over the
// usageDays days from daysFrom.
func dayChart(days []traffic.DayOutcome, daysFrom time.Time) web.Chart {
	series, totals := usageview.DaySeries(days, daysFrom, usageDays)
	c := web.Chart{
		ID: "console-days", Title: "Checks per day, last 30 days", YUnit: "checks per day", XLabel: "day (UTC)",
		Kind: web.StackedBars, Columns: usageDays, Series: series,
		Summary: usageview.ChartSummary(totals, "in the last 30 days"),
	}
	for i := 0; i < usageDays; i += 5 {
		c.XTicks = append(c.XTicks, web.Tick{Column: i, Label: daysFrom.AddDate(0, 0, i).Format("2 Jan")})
	}
	if len(days) == 0 {
		c.Empty = "No checks in the last 30 days."
	}
	return c
}

// budgetRows shows where each of the tenant's budget policies stands;
// a store that does not answer shows them as unavailable (logged).
func (s *Site) budgetRows(ctx context.Context, tenantID string, pols []policy.Policy) []web.ConsoleBudgetRow {
	var names []string
	for _, p := range pols {
		if p.Budget() && p.Scope == policy.ScopeGlobal {
			names = append(names, p.Name)
		}
	}
	bs := map[string]gate.Budget{}
	if len(names) > 0 && s.cfg.Usage.Budgets != nil {
		got, err := s.cfg.Usage.Budgets.Budgets(ctx, tenantID, names, "")
		if err != nil {
			s.log.WarnContext(ctx, "console budgets unavailable", "tenant_id", tenantID, "err", err)
		}
		for _, b := range got {
			bs[b.Policy] = b
		}
	}
	var rows []web.ConsoleBudgetRow
	for _, p := range pols {
		if p.Budget() {
			rows = append(rows, web.ConsoleBudgetRow{Policy: p.Name, Budget: *usageview.BudgetView(p, bs)})
		}
	}
	return rows
}
