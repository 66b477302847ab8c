package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/usageview"
	"github.com/tollgate/tollgate/internal/webhooks"
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
	"limits":            "Limits saved. Every instance applies them within a second.",
	"revoked":           "Key revoked. The API refuses it from now on.",
	"endpoint-disabled": "Webhook endpoint disabled. Its deliveries wait until the tenant enables it again.",
	"member-disabled":   "Member disabled: signed out everywhere, and cannot sign in to the console until enabled again.",
	"member-enabled":    "Member enabled: they may sign in to the console again.",
	"tenant-disabled":   "Workspace disabled. Every instance refuses its keys with 403 within seconds, and its console members are signed out.",
	"tenant-enabled":    "Workspace enabled. Its keys, policies and members work again as they were.",
	"endpoint-enabled":  "Webhook endpoint enabled. Its waiting deliveries go out now; those given up stay given up (the tenant may re-send them).",
	"plan":              "Plan saved. Every instance applies it within a second.",
	"linked":            "Customer linked. Its held events were applied in order; the event below shows its outcome now.",
	"policy":            "Policy saved. Every instance applies it within a second.",
	"policy-deleted":    "Policy deleted, with its overrides.",
	"override":          "Override saved. Every instance applies it within a second.",
	"override-deleted":  "Override deleted.",
	"unlocked":          "Subject unlocked: its counter of the policy is cleared (a concurrency policy's leases dropped) on every instance, and its next check counts from nothing.",
	"admin-created":     "Admin added. They sign in with that email and the password you chose: tell them it yourself.",
}

// tenantData is what a tenant's page shows, fetched in one place
// (fetchTenant) so that a fetch that fails says which it was.
type tenantData struct {
	t      tenant.Tenant
	eff    tenant.Plan // the effective plan
	report usage.Report
	// now is the page's instant (UTC); until the end of its minute, dayFrom
	// 24 hours before, monthStart the first instant of its month.
	now, until, dayFrom, monthStart time.Time
	minutes                         []traffic.MinuteCount
	days                            []traffic.DayCount
	keys                            []tenant.Key
	policies                        []policy.Policy
	// overrides holds the overrides of each policy of scope subject.
	overrides map[string][]policy.Override
	// inFlight holds the leases in flight of concurrency policies, when the
	// lease store answered.
	inFlight   map[string]int64
	budgets    map[string]gate.Budget
	lastChange []audit.Entry
	// events are the tenant's latest Stripe events; nil without the
	// webhook log.
	events []billing.EventRecord
	// endpoints are the tenant's outbound webhook endpoints; nil without
	// Config.Endpoints.
	endpoints []webhooks.Endpoint
	// members are the tenant's console members; nil without Config.Members.
	members []console.Member
}

// fetchTenant reads everything a tenant's page shows. An error names the
// tenant and what could not be read, and wraps the store's error
// (tenant.ErrNotFound for an unknown tenant).
func (d *Dashboard) fetchTenant(ctx context.Context, id string) (tenantData, error) {
	var td tenantData
	fail := func(what string, err error) (tenantData, error) {
		return tenantData{}, fmt.Errorf("tenant %s: %s: %w", id, what, err)
	}
	var err error
	if td.t, err = d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fail("tenant", err)
	}
	td.now = d.now().UTC()
	td.until = td.now.Truncate(time.Minute).Add(time.Minute)
	td.dayFrom = td.until.Add(-24 * time.Hour)
	td.monthStart = monthStart(td.now)
	plans, err := d.plansByName(ctx)
	if err != nil {
		return fail("plans", err)
	}
	td.eff = plans[tenant.EffectivePlanName(td.t.Plan, td.t.BillingStatus)]
	if td.report, err = d.cfg.Usage.Usage(ctx, td.t.ID, td.now); err != nil {
		return fail("usage report", err)
	}
	if td.minutes, err = d.cfg.Traffic.Traffic(ctx, td.t.ID, td.dayFrom, td.until); err != nil {
		return fail("checks per minute", err)
	}
	if td.days, err = d.cfg.Traffic.DailyChecks(ctx, td.t.ID, td.monthStart, td.until); err != nil {
		return fail("checks per day", err)
	}
	if td.keys, err = d.cfg.Tenants.Keys(ctx, td.t.ID); err != nil {
		return fail("keys", err)
	}
	if td.policies, err = d.cfg.Policies.ListPolicies(ctx, td.t.ID); err != nil {
		return fail("policies", err)
	}
	td.overrides = map[string][]policy.Override{}
	for _, p := range td.policies {
		if p.Scope != policy.ScopeSubject {
			continue
		}
		if td.overrides[p.Name], err = d.cfg.Policies.ListOverrides(ctx, td.t.ID, p.Name); err != nil {
			return fail("overrides of policy "+p.Name, err)
		}
	}
	td.inFlight = d.leasesInFlight(ctx, td.t.ID, td.policies)
	td.budgets = d.budgets(ctx, td.t.ID, td.policies)
	if td.lastChange, err = d.cfg.Audit.List(ctx, audit.Filter{TenantID: td.t.ID, Kind: KindLimitsChanged, Limit: 1}); err != nil {
		return fail("last change of its limits", err)
	}
	if d.cfg.Endpoints != nil {
		if td.endpoints, err = d.cfg.Endpoints.Endpoints(ctx, td.t.ID); err != nil {
			return fail("webhook endpoints", err)
		}
	}
	if d.cfg.Members != nil {
		if td.members, err = d.cfg.Members.Members(ctx, td.t.ID); err != nil {
			return fail("console members", err)
		}
	}
	if d.cfg.Webhooks != nil {
		if td.events, err = d.cfg.Webhooks.Events(ctx, billing.EventFilter{TenantID: td.t.ID, Limit: 10}); err != nil {
			return fail("stripe events", err)
		}
	}
	return td, nil
}

// tenantView builds a tenant's page.
func (d *Dashboard) tenantView(ctx context.Context, s *signedIn, id string) (web.TenantView, error) {
	td, err := d.fetchTenant(ctx, id)
	if err != nil {
		return web.TenantView{}, err
	}
	t, eff := td.t, td.eff
	v := web.TenantView{
		Chrome: d.chrome(s, t.Name, "tenants"),
		ID:     t.ID, Name: t.Name, CreatedAt: when(t.CreatedAt),
		Billing: web.BillingView{
			Plan: t.Plan, EffectivePlan: eff.Name, Status: t.BillingStatus, StatusClass: statusClass(t.BillingStatus),
			Held: tenant.HeldToStarter(t), CustomerID: t.StripeCustomerID, SubscriptionID: cmp.Or(t.StripeSubscriptionID, "none"),
			UpdatedAt: whenPtr(t.BillingUpdatedAt),
		},
		MonthUsage: usageBar(td.report.ChecksUsed, eff.MonthlyChecks),
		KeyForm:    web.KeyForm{Action: "/admin/tenants/" + t.ID + "/keys", Mode: "live"},
		AuditHref:  "/admin/audit?tenant=" + url.QueryEscape(t.ID),
		State:      tenantState(t),
	}
	if t.StripeCustomerID != "" {
		v.Billing.CustomerURL = d.cfg.StripeDashboardURL + "/customers/" + url.PathEscape(t.StripeCustomerID)
	}

	series, totals := minuteSeries(td.minutes, td.dayFrom, 24*60)
	v.Minutes = web.Chart{
		ID: "chart-tenant-minutes", Title: "Checks per minute, last 24 hours", YUnit: "checks per minute", XLabel: "time (UTC)",
		Kind: web.StackedArea, Columns: 24 * 60, Series: series, XTicks: clockTicks(td.dayFrom, 24*60, 3*time.Hour),
		Summary: chartSummary(totals, "in the last 24 hours"),
	}
	if len(td.minutes) == 0 {
		v.Minutes.Empty = "No checks in the last 24 hours. The chart fills in as the tenant calls POST /v1/check with one of its keys."
	}
	v.PolicyUsage = web.PolicyUsage{ID: "tenant-policy-usage", Empty: "This Tollgate does not count checks per policy."}
	if d.cfg.PolicyUsage != nil {
		if v.PolicyUsage, err = usageview.PolicyCharts(ctx, d.cfg.PolicyUsage, t.ID, td.now, "tenant-policy-usage"); err != nil {
			return web.TenantView{}, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
	}
	v.Month = monthChart(td.days, td.monthStart, td.now, eff.MonthlyChecks)
	v.Refusals = refusalBars("refusals-tenant", "Refused requests by layer", "refused requests", td.report.Refusals,
		"No refusals this month.")
	v.Refusals.Width = 1000

	v.Keys = keyRows(t.ID, td.keys, d.now())
	v.Limits = limitsForm(t, eff)
	if len(td.lastChange) > 0 {
		v.Limits.LastChange = fmt.Sprintf("Last changed by %s at %s.", td.lastChange[0].Actor, when(td.lastChange[0].At))
	}
	v.Policies = policyRows(td)
	v.NewPolicy = newPolicyForm(t.ID)
	v.Unlock = d.unlockForm(t.ID, td.policies)
	v.Alerts = alertRows(td.report.Alerts)
	v.Endpoints = endpointRows(t.ID, td.endpoints)
	v.Members = memberRows(t.ID, td.members)
	v.MembersWired = d.cfg.Members != nil

	if d.cfg.Webhooks == nil {
		v.EventsNote = webhooksUnavailable
	} else {
		for _, e := range td.events {
			v.Events = append(v.Events, webhookRow(e))
		}
		v.EventsNote = "No Stripe events for this tenant yet. They arrive once the tenant checks out (POST /v1/billing/checkout) and Stripe calls POST /webhooks/stripe."
	}
	return v, nil
}

// keyRows shows a tenant's keys, each as far as it may be shown.
func keyRows(tenantID string, keys []tenant.Key, now time.Time) []web.KeyRow {
	var rows []web.KeyRow
	for _, k := range keys {
		mode := "live"
		if k.Test {
			mode = "test"
		}
		row := web.KeyRow{
			ID: k.ID, Display: "tg_" + mode + "_" + k.Prefix + "_…", Mode: mode,
			Name:    k.Name,
			Created: when(k.CreatedAt), LastUsed: whenPtr(k.LastUsedAt),
			Active:       k.RevokedAt == nil && !k.Expired(now),
			RevokeAction: "/admin/tenants/" + tenantID + "/keys/" + url.PathEscape(k.ID) + "/revoke",
		}
		if k.RevokedAt != nil {
			row.Revoked = when(*k.RevokedAt)
		}
		if k.ExpiresAt != nil {
			row.Expires, row.Expired = when(*k.ExpiresAt), k.Expired(now)
		}
		rows = append(rows, row)
	}
	return rows
}

// policyRows shows a tenant's policies with their overrides and, for
// concurrency policies, the leases in flight.
func policyRows(td tenantData) []web.PolicyRow {
	var rows []web.PolicyRow
	for _, p := range td.policies {
		row := web.PolicyRow{
			Name: p.Name, Limit: count(p.Limit), Window: policy.FormatWindow(p.Window), Algorithm: p.Algorithm.String(),
			Scope: string(p.Scope), FailMode: string(p.FailMode), Shadow: p.Shadow, AlertAfter: "never",
		}
		if p.Concurrent() {
			row.Concurrency, row.Window, row.InFlight = true, "none", "in flight: unavailable"
			if n, ok := td.inFlight[p.Name]; ok {
				row.InFlight = count(n) + " in flight across subjects"
				if p.Scope == policy.ScopeGlobal {
					row.InFlight = count(n) + " of " + count(p.Limit) + " in flight"
					m := min(1, float64(n)/float64(p.Limit))
					row.Meter = &m
				}
			}
		}
		if p.Budget() {
			row.Budget = budgetView(p, td.budgets)
		}
		if p.AlertAfter > 0 {
			row.AlertAfter = count(p.AlertAfter)
		}
		for _, o := range td.overrides[p.Name] {
			exp := "no expiry"
			if o.ExpiresAt != nil {
				exp = "until " + when(*o.ExpiresAt)
			}
			row.Overrides = append(row.Overrides, web.OverrideRow{Pattern: o.Pattern, Limit: count(o.Limit), Expires: exp})
		}
		policyForms(td.t.ID, p, &row)
		rows = append(rows, row)
	}
	return rows
}

// leasesInFlight returns the live leases of each of pols' concurrency
// policies, by name. A store that does not answer leaves them out (the
// page says unavailable) rather than failing the page: it is logged.
func (d *Dashboard) leasesInFlight(ctx context.Context, tenantID string, pols []policy.Policy) map[string]int64 {
	var names []string
	for _, p := range pols {
		if p.Concurrent() {
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

// budgets returns where each of pols' budgets of scope global stands, by
// name. A store that does not answer leaves them out (the page says
// unavailable) rather than failing the page: it is logged.
func (d *Dashboard) budgets(ctx context.Context, tenantID string, pols []policy.Policy) map[string]gate.Budget {
	var names []string
	for _, p := range pols {
		if p.Budget() && p.Scope == policy.ScopeGlobal {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 || d.cfg.Budgets == nil {
		return nil
	}
	bs, err := d.cfg.Budgets.Budgets(ctx, tenantID, names, "")
	if err != nil {
		d.log.WarnContext(ctx, "budgets unavailable", "tenant_id", tenantID, "err", err)
		return nil
	}
	out := make(map[string]gate.Budget, len(bs))
	for _, b := range bs {
		out[b.Policy] = b
	}
	return out
}
