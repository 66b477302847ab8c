package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
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

// tenantsPerPage is the length of a tenant list page.
const tenantsPerPage = 25

// Audit kinds the dashboard writes; the actor is the admin's email.
const (
	KindLimitsChanged = "tenant_limits_changed"
	KindKeyCreated    = "key_created"
	KindKeyRevoked    = "key_revoked"
	KindPlanChanged   = "plan_changed"
	KindSignedIn      = "admin_signed_in"
)

// monthStart is the first instant of now's calendar month, UTC.
func monthStart(now time.Time) time.Time {
	y, m, _ := now.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// plansByName loads the plan table.
func (d *Dashboard) plansByName(ctx context.Context) (map[string]tenant.Plan, error) {
	ps, err := d.cfg.Tenants.Plans(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]tenant.Plan, len(ps))
	for _, p := range ps {
		m[p.Name] = p
	}
	return m, nil
}

// tenants is the tenant list: search, paging, plans, billing and this
// month's checks against the allotment.
func (d *Dashboard) tenants(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	q := strings.TrimSpace(c.QueryParam("q"))
	if len(q) > 200 {
		q = q[:200]
	}
	page, err := intParam(c, "page", 1, 1, maxPage)
	if err != nil {
		return err
	}
	now := d.now()
	rows, total, err := d.cfg.Traffic.SearchTenants(ctx, traffic.Search{
		Query: q, MonthStart: monthStart(now), Offset: (page - 1) * tenantsPerPage, Limit: tenantsPerPage,
	})
	if err != nil {
		return err
	}
	plans, err := d.plansByName(ctx)
	if err != nil {
		return err
	}
	v := web.TenantsView{Chrome: d.chrome(s, "Tenants", "tenants"), Query: q, Page: page}
	v.Pages = max((total+tenantsPerPage-1)/tenantsPerPage, 1)
	v.PageLabel = fmt.Sprintf("Page %d of %d", page, v.Pages)
	v.Total = fmt.Sprintf("%s tenants", count(int64(total)))
	if total == 1 {
		v.Total = "1 tenant"
	}
	if q != "" {
		v.Total += fmt.Sprintf(" match %q", q)
	}
	link := func(p int) string {
		vals := url.Values{}
		if q != "" {
			vals.Set("q", q)
		}
		if p > 1 {
			vals.Set("page", strconv.Itoa(p))
		}
		if len(vals) == 0 {
			return "/admin/tenants"
		}
		return "/admin/tenants?" + vals.Encode()
	}
	if page > 1 {
		v.PrevHref = link(min(page-1, v.Pages))
	}
	if page < v.Pages {
		v.NextHref = link(page + 1)
	}
	for _, r := range rows {
		eff := tenant.EffectivePlanName(r.Plan, r.BillingStatus)
		v.Rows = append(v.Rows, web.TenantListRow{
			ID: r.ID, Name: r.Name, Href: "/admin/tenants/" + r.ID,
			Plan: r.Plan, EffectivePlan: eff, Held: tenant.HeldToStarter(r.Tenant),
			BillingStatus: r.BillingStatus, StatusClass: statusClass(r.BillingStatus),
			Usage: usageBar(r.MonthChecks, plans[eff].MonthlyChecks),
		})
	}
	switch {
	case total == 0 && q != "":
		v.Empty = fmt.Sprintf("No tenant's name contains %q, and no tenant has that ID. Check the spelling, or clear the search.", q)
	case total == 0:
		v.Empty = "No tenants yet. Create one with `tollgate tenants create --name NAME [--plan PLAN]`; it prints the tenant's first keys."
	case len(rows) == 0:
		v.Empty = fmt.Sprintf("There is no page %d: the list has %d.", page, v.Pages)
	}
	return render(c, http.StatusOK, web.Tenants(v))
}

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

// limitsForm fills the limits form with the tenant's own limits.
func limitsForm(t tenant.Tenant, eff tenant.Plan) web.LimitsForm {
	f := web.LimitsForm{
		Action:             "/admin/tenants/" + t.ID + "/limits",
		PlanIPPerMinute:    count(eff.IPPerMinute),
		PlanQuotaPerMinute: count(eff.QuotaPerMinute),
		PlanQuotaPerHour:   count(eff.QuotaPerHour),
	}
	if t.RateLimitPerMinute > 0 {
		f.RateLimitPerMinute = strconv.FormatInt(t.RateLimitPerMinute, 10)
	}
	if t.QuotaPerMinute != nil {
		f.QuotaPerMinute = strconv.FormatInt(*t.QuotaPerMinute, 10)
	}
	if t.QuotaPerHour != nil {
		f.QuotaPerHour = strconv.FormatInt(*t.QuotaPerHour, 10)
	}
	return f
}

// optionalInt reads a form number: empty is nil.
func optionalInt(c echo.Context, name, label string) (*int64, error) {
	s := strings.TrimSpace(strings.ReplaceAll(c.FormValue(name), ",", ""))
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("%s must be a whole number above zero, or empty for the plan's", label)
	}
	return &n, nil
}

// limitsDetail is what the audit log keeps of a tenant's limits; null
// means the plan's.
func limitsDetail(t tenant.Tenant) map[string]any {
	m := map[string]any{"rate_limit_per_minute": nil, "quota_per_minute": nil, "quota_per_hour": nil}
	if t.RateLimitPerMinute > 0 {
		m["rate_limit_per_minute"] = t.RateLimitPerMinute
	}
	if t.QuotaPerMinute != nil {
		m["quota_per_minute"] = *t.QuotaPerMinute
	}
	if t.QuotaPerHour != nil {
		m["quota_per_hour"] = *t.QuotaPerHour
	}
	return m
}

// setLimits changes a tenant's rate_limit_per_minute and quota overrides,
// and audits who did it.
func (d *Dashboard) setLimits(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	before, err := d.cfg.Tenants.Tenant(ctx, id)
	if err != nil {
		return err
	}
	var l tenant.TenantLimits
	var formErr error
	rate, err := optionalInt(c, "rate_limit_per_minute", "Per-IP requests per minute")
	if err != nil {
		formErr = err
	} else if rate != nil {
		l.RateLimitPerMinute = *rate
	}
	if l.QuotaPerMinute, err = optionalInt(c, "quota_per_minute", "Tenant quota per minute"); err != nil && formErr == nil {
		formErr = err
	}
	if l.QuotaPerHour, err = optionalInt(c, "quota_per_hour", "Tenant quota per hour"); err != nil && formErr == nil {
		formErr = err
	}
	if formErr == nil {
		formErr = l.Validate()
	}
	if formErr != nil {
		v, err := d.tenantView(ctx, s, id)
		if err != nil {
			return err
		}
		v.Limits.RateLimitPerMinute = c.FormValue("rate_limit_per_minute")
		v.Limits.QuotaPerMinute = c.FormValue("quota_per_minute")
		v.Limits.QuotaPerHour = c.FormValue("quota_per_hour")
		v.Limits.Error = "Not saved: " + formErr.Error() + "."
		return render(c, http.StatusBadRequest, web.Tenant(v))
	}
	after, err := d.cfg.Tenants.SetTenantLimits(ctx, id, l)
	if err != nil {
		return err
	}
	d.changed("tenant", id)
	d.record(ctx, s, id, KindLimitsChanged, map[string]any{"before": limitsDetail(before), "after": limitsDetail(after)})
	d.log.InfoContext(ctx, "tenant limits changed", "tenant_id", id, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=limits")
}

// createKey makes a key for the tenant and shows it, this once.
func (d *Dashboard) createKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	var test bool
	switch c.FormValue("mode") {
	case "live", "":
	case "test":
		test = true
	default:
		return badRequest("A key's mode is live or test.")
	}
	raw, k, err := tenant.NewKey(test)
	if err != nil {
		return err
	}
	k.TenantID = id
	if k, err = d.cfg.Tenants.CreateKey(ctx, k); err != nil {
		return err
	}
	d.record(ctx, s, id, KindKeyCreated, map[string]any{"key_id": k.ID, "test": k.Test})
	d.log.InfoContext(ctx, "key created", "tenant_id", id, "key_id", k.ID, "admin_id", s.admin.ID)
	v, err := d.tenantView(ctx, s, id)
	if err != nil {
		return err
	}
	mode := "live"
	if test {
		mode = "test"
	}
	v.NewKey = &web.NewKey{ID: k.ID, Raw: raw, Mode: mode}
	return render(c, http.StatusOK, web.Tenant(v))
}

// revokeKey revokes one of the tenant's keys.
func (d *Dashboard) revokeKey(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, keyID := c.Param("id"), c.Param("key")
	keys, err := d.cfg.Tenants.Keys(ctx, id)
	if err != nil {
		return err
	}
	found := false
	for _, k := range keys {
		found = found || k.ID == keyID
	}
	if !found {
		return notFound("This tenant has no key " + keyID + ".")
	}
	k, err := d.cfg.Tenants.RevokeKey(ctx, keyID)
	if err != nil {
		return err
	}
	d.changed("key", k.Prefix)
	d.record(ctx, s, id, KindKeyRevoked, map[string]any{"key_id": k.ID})
	d.log.InfoContext(ctx, "key revoked", "tenant_id", id, "key_id", k.ID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=revoked")
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
