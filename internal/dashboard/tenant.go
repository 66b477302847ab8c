package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/web"
)

// tenantPage shows one tenant.
func (d *Dashboard) tenantPage(c echo.Context, s *signedIn) error {
	v, err := d.tenantView(c.Request().Context(), s, c.Param("id"))
	if err != nil {
		return err
	}
	v.Flash = flashes[c.QueryParam("done")]
	return render(c, http.StatusOK, web.Tenant(v))
}

// flashes are the confirmations a redirect may ask for: fixed sentences,
// so that a link cannot make the dashboard say anything else.
var flashes = map[string]string{
	"limits":  "Limits saved. Every instance applies them within a second.",
	"revoked": "Key revoked. The API refuses it from now on.",
	"plan":    "Plan saved. Every instance applies it within a second.",
	"linked":  "Customer linked. Its held events were applied in order; the event below shows its outcome now.",
}

// tenantView builds a tenant's page.
func (d *Dashboard) tenantView(ctx context.Context, s *signedIn, id string) (web.TenantView, error) {
	t, err := d.cfg.Tenants.Tenant(ctx, id)
	if err != nil {
		return web.TenantView{}, err
	}
	now := d.now().UTC()
	plans, err := d.plansByName(ctx)
	if err != nil {
		return web.TenantView{}, err
	}
	eff := plans[tenant.EffectivePlanName(t.Plan, t.BillingStatus)]
	report, err := d.cfg.Usage.Usage(ctx, t.ID, now)
	if err != nil {
		return web.TenantView{}, err
	}
	until := now.Truncate(time.Minute).Add(time.Minute)
	dayFrom := until.Add(-24 * time.Hour)
	minutes, err := d.cfg.Traffic.Traffic(ctx, t.ID, dayFrom, until)
	if err != nil {
		return web.TenantView{}, err
	}
	ms := monthStart(now)
	days, err := d.cfg.Traffic.DailyChecks(ctx, t.ID, ms, until)
	if err != nil {
		return web.TenantView{}, err
	}
	keys, err := d.cfg.Tenants.Keys(ctx, t.ID)
	if err != nil {
		return web.TenantView{}, err
	}
	pols, err := d.cfg.Policies.ListPolicies(ctx, t.ID)
	if err != nil {
		return web.TenantView{}, err
	}
	lastChange, err := d.cfg.Audit.List(ctx, audit.Filter{TenantID: t.ID, Kind: KindLimitsChanged, Limit: 1})
	if err != nil {
		return web.TenantView{}, err
	}

	v := web.TenantView{
		Chrome: d.chrome(s, t.Name, "tenants"),
		ID:     t.ID, Name: t.Name, Created: when(t.CreatedAt),
		Billing: web.BillingView{
			Plan: t.Plan, EffectivePlan: eff.Name, Status: t.BillingStatus, StatusClass: statusClass(t.BillingStatus),
			Held: tenant.HeldToStarter(t), CustomerID: t.StripeCustomerID, SubscriptionID: cmp.Or(t.StripeSubscriptionID, "none"),
			UpdatedAt: whenPtr(t.BillingUpdatedAt),
		},
		MonthUsage:      usageBar(report.ChecksUsed, eff.MonthlyChecks),
		CreateKeyAction: "/admin/tenants/" + t.ID + "/keys",
		AuditHref:       "/admin/audit?tenant=" + url.QueryEscape(t.ID),
	}
	if t.StripeCustomerID != "" {
		v.Billing.CustomerURL = d.cfg.StripeDashboardURL + "/customers/" + url.PathEscape(t.StripeCustomerID)
	}

	series, totals := minuteSeries(minutes, dayFrom, 24*60)
	v.Minutes = web.Chart{
		ID: "chart-tenant-minutes", Title: "Checks per minute, last 24 hours", YUnit: "checks per minute", XLabel: "time (UTC)",
		Kind: web.StackedArea, Slots: 24 * 60, Series: series, XTicks: clockTicks(dayFrom, 24*60, 3*time.Hour),
		Summary: chartSummary(totals, "in the last 24 hours"),
	}
	if len(minutes) == 0 {
		v.Minutes.Empty = "No checks in the last 24 hours. The chart fills in as the tenant calls POST /v1/check with one of its keys."
	}
	v.Month = monthChart(days, ms, now, eff.MonthlyChecks)
	v.Refusals = refusalBars("refusals-tenant", "Refused requests by layer", "refused requests", report.Refusals,
		"No refusals this month.")
	v.Refusals.Width = 1000

	for _, k := range keys {
		mode := "live"
		if k.Test {
			mode = "test"
		}
		row := web.KeyRow{
			ID: k.ID, Display: "tg_" + mode + "_" + k.Prefix + "_…", Mode: mode,
			Created: when(k.CreatedAt), LastUsed: whenPtr(k.LastUsedAt), Active: k.RevokedAt == nil,
			RevokeAction: "/admin/tenants/" + t.ID + "/keys/" + url.PathEscape(k.ID) + "/revoke",
		}
		if k.RevokedAt != nil {
			row.Revoked = when(*k.RevokedAt)
		}
		v.Keys = append(v.Keys, row)
	}

	v.Limits = limitsForm(t, eff)
	if len(lastChange) > 0 {
		v.Limits.LastChange = fmt.Sprintf("Last changed by %s at %s.", lastChange[0].Actor, when(lastChange[0].At))
	}

	inFlight := d.leasesInFlight(ctx, t.ID, pols)
	for _, p := range pols {
		row := web.PolicyRow{
			Name: p.Name, Limit: count(p.Limit), Window: policy.FormatWindow(p.Window), Algorithm: p.Algorithm.String(),
			Scope: string(p.Scope), FailMode: string(p.FailMode), Shadow: p.Shadow, AlertAfter: "never",
		}
		if p.Algorithm == limit.Concurrency {
			row.Concurrency, row.Window, row.InFlight = true, "none", "in flight: unavailable"
			if n, ok := inFlight[p.Name]; ok {
				row.InFlight = count(n) + " in flight across subjects"
				if p.Scope == policy.ScopeGlobal {
					row.InFlight = count(n) + " of " + count(p.Limit) + " in flight"
					m := min(1, float64(n)/float64(p.Limit))
					row.Meter = &m
				}
			}
		}
		if p.AlertAfter > 0 {
			row.AlertAfter = count(p.AlertAfter)
		}
		if p.Scope == policy.ScopeSubject {
			os, err := d.cfg.Policies.ListOverrides(ctx, t.ID, p.Name)
			if err != nil {
				return web.TenantView{}, err
			}
			for _, o := range os {
				exp := "no expiry"
				if o.ExpiresAt != nil {
					exp = "until " + when(*o.ExpiresAt)
				}
				row.Overrides = append(row.Overrides, web.OverrideRow{Pattern: o.Pattern, Limit: count(o.Limit), Expires: exp})
			}
		}
		v.Policies = append(v.Policies, row)
	}

	for _, a := range report.Alerts {
		row := web.AlertRow{
			Policy: a.Policy, Subject: shortDigest(a.SubjectKey), Count: count(a.Count), AlertAfter: count(a.AlertAfter),
			First: when(a.FirstAt), Last: when(a.LastAt), Shadow: a.Shadow,
		}
		if a.SubjectKey == audit.AggregateSubject {
			row.Aggregate = true
			row.Subject = count(a.Subjects) + " more subjects, past the day's alert budget"
		}
		v.Alerts = append(v.Alerts, row)
	}

	if d.cfg.Webhooks == nil {
		v.EventsNote = webhooksUnavailable
	} else {
		evs, err := d.cfg.Webhooks.Events(ctx, billing.EventFilter{TenantID: t.ID, Limit: 10})
		if err != nil {
			return web.TenantView{}, err
		}
		for _, e := range evs {
			v.Events = append(v.Events, webhookRow(e))
		}
		v.EventsNote = "No Stripe events for this tenant yet. They arrive once the tenant checks out (POST /v1/billing/checkout) and Stripe calls POST /webhooks/stripe."
	}
	return v, nil
}

// shortDigest shortens a counter-key digest for display; the whole key is
// in its title.
func shortDigest(k string) string {
	if i := strings.LastIndexByte(k, ':'); i >= 0 {
		k = k[i+1:]
	}
	if len(k) > 16 {
		return k[:16] + "…"
	}
	return k
}

// monthChart draws this month's live checks, cumulative by day, against the
// allotment: where the tenant stands, and how fast it gets there.
func monthChart(days []traffic.DayCount, ms, now time.Time, allotment *int64) web.Chart {
	n := ms.AddDate(0, 1, 0).Sub(ms) / (24 * time.Hour)
	slots := int(n)
	today := int(now.Sub(ms) / (24 * time.Hour))
	perDay := make([]float64, slots)
	var total int64
	for _, d := range days {
		if i := int(d.Day.Sub(ms) / (24 * time.Hour)); i >= 0 && i < slots {
			perDay[i] += float64(d.Count)
			total += d.Count
		}
	}
	cum := make([]float64, slots)
	run := 0.0
	for i := 0; i <= today && i < slots; i++ {
		run += perDay[i]
		cum[i] = run
	}
	c := web.Chart{
		ID: "chart-tenant-month", Title: "Live checks this month, cumulative, against the allotment",
		YUnit: "live checks", XLabel: "day of " + ms.Format("January 2006") + " (UTC)",
		Kind: web.StackedBars, Slots: slots,
		Series: []web.Series{{Name: "live checks so far", Class: "s-checks", Values: cum}},
	}
	for i := 0; i < slots; i++ {
		if day := i + 1; day == 1 || day%5 == 0 {
			c.XTicks = append(c.XTicks, web.Tick{Slot: i, Label: ms.AddDate(0, 0, i).Format(dayFormat)})
		}
	}
	if allotment != nil {
		c.Lines = []web.RefLine{{Value: float64(*allotment), Label: "allotment " + count(*allotment), Class: "allotment-line"}}
		c.Summary = fmt.Sprintf("%s live checks so far this month, %s of the allotment of %s.", count(total), share(total, *allotment), count(*allotment))
	} else {
		c.Summary = fmt.Sprintf("%s live checks so far this month; the plan has no monthly cap.", count(total))
	}
	return c
}

// leasesInFlight returns the live leases of each of pols' concurrency
// policies, by name. A store that does not answer leaves them out (the
// page says unavailable) rather than failing the page: it is logged.
func (d *Dashboard) leasesInFlight(ctx context.Context, tenantID string, pols []policy.Policy) map[string]int64 {
	var names []string
	for _, p := range pols {
		if p.Algorithm == limit.Concurrency {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 || d.cfg.Leases == nil {
		return nil
	}
	n, err := d.cfg.Leases.InFlight(ctx, tenantID, names)
	if err != nil {
		d.log.WarnContext(ctx, "leases in flight unavailable", "tenant_id", tenantID, "err", err)
		return nil
	}
	out := make(map[string]int64, len(names))
	for i, name := range names {
		out[name] = n[i]
	}
	return out
}
