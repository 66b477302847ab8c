package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/web"
)

// tenantsPerPage is the length of a tenant list page.
const tenantsPerPage = 25

// Audit kinds the dashboard writes; the actor is the admin's email.
const (
	KindTenantCreated = "tenant_created"
	KindLimitsChanged = "tenant_limits_changed"
	KindKeyCreated    = audit.KindKeyCreated
	KindKeyRevoked    = audit.KindKeyRevoked
	KindPlanChanged   = "plan_changed"
	KindSignedIn      = "admin_signed_in"
	KindSignInFailed  = "admin_sign_in_failed"
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
		return nil, fmt.Errorf("plans: %w", err)
	}
	m := make(map[string]tenant.Plan, len(ps))
	for _, p := range ps {
		m[p.Name] = p
	}
	return m, nil
}

// tenants is the tenant list: search, paging, plans, billing and this
// month's checks against the allotment, and the form that creates a tenant.
func (d *Dashboard) tenants(c echo.Context, s *signedIn) error {
	v, err := d.tenantsView(c, s)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, web.Tenants(v))
}

// tenantsView builds the tenant list of the query's search and page.
func (d *Dashboard) tenantsView(c echo.Context, s *signedIn) (web.TenantsView, error) {
	ctx := c.Request().Context()
	q := strings.TrimSpace(c.QueryParam("q"))
	if len(q) > 200 {
		q = q[:200]
	}
	page, err := intParam(c, "page", 1, 1, maxPage)
	if err != nil {
		return web.TenantsView{}, err
	}
	now := d.now()
	rows, total, err := d.cfg.Traffic.SearchTenants(ctx, traffic.Search{
		Query: q, MonthStart: monthStart(now), Offset: (page - 1) * tenantsPerPage, Limit: tenantsPerPage,
	})
	if err != nil {
		return web.TenantsView{}, fmt.Errorf("tenant list, page %d: %w", page, err)
	}
	planList, err := d.cfg.Tenants.Plans(ctx)
	if err != nil {
		return web.TenantsView{}, fmt.Errorf("tenant list: plans: %w", err)
	}
	plans := make(map[string]tenant.Plan, len(planList))
	v := web.TenantsView{Chrome: d.chrome(s, "Tenants", "tenants"), Query: q, Page: page}
	v.NewTenant = web.TenantForm{Action: "/admin/tenants"}
	for _, p := range planList {
		plans[p.Name] = p
		v.NewTenant.Plans = append(v.NewTenant.Plans, web.Option{Value: p.Name, Label: p.Name, Selected: p.Name == tenant.PlanStarter})
	}
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
			Plan: r.Plan, EffectivePlan: eff, Held: tenant.HeldToStarter(r.Tenant), Disabled: r.Disabled(),
			BillingStatus: r.BillingStatus, StatusClass: statusClass(r.BillingStatus),
			Usage: usageBar(r.MonthChecks, plans[eff].MonthlyChecks),
		})
	}
	switch {
	case total == 0 && q != "":
		v.Empty = fmt.Sprintf("No tenant's name contains %q, and no tenant has that ID. Check the spelling, or clear the search.", q)
	case total == 0:
		v.Empty = "No tenants yet. Create one above (New tenant), or with `tollgate tenants create --name NAME [--plan PLAN]`; either shows the tenant's first keys once."
	case len(rows) == 0:
		v.Empty = fmt.Sprintf("There is no page %d: the list has %d.", page, v.Pages)
	}
	return v, nil
}

// createTenant creates a tenant with its first keys (tenant.Create, as
// `tollgate tenants create` does, with the same rules for the name and the
// plan) and answers the new tenant's page with both keys, this once. A
// mistake is shown on the form, as typed.
func (d *Dashboard) createTenant(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	name, plan := c.FormValue("name"), c.FormValue("plan")
	plans, err := d.cfg.Tenants.Plans(ctx)
	if err != nil {
		return fmt.Errorf("create tenant: plans: %w", err)
	}
	err = tenant.ValidateName(name)
	if err == nil {
		err = tenant.ValidatePlan(plans, plan)
	}
	var created tenant.Created
	if err == nil {
		created, err = tenant.Create(ctx, d.cfg.Tenants, name, plan)
	}
	if field, reason, ok := fault.Of(err); ok {
		v, err := d.tenantsView(c, s)
		if err != nil {
			return err
		}
		f := &v.NewTenant
		f.Name, f.Error, f.ErrorField, f.Open = name, "Not created: "+field+" "+reason+".", field, true
		for i := range f.Plans {
			f.Plans[i].Selected = f.Plans[i].Value == plan
		}
		return render(c, http.StatusBadRequest, web.Tenants(v))
	}
	if err != nil {
		return fmt.Errorf("create tenant: %w", err)
	}
	t := created.Tenant
	d.record(ctx, s, t.ID, KindTenantCreated, map[string]any{
		"name": t.Name, "plan": t.Plan, "live_key_id": created.LiveKey.ID, "test_key_id": created.TestKey.ID,
	})
	d.log.InfoContext(ctx, "tenant created", "tenant_id", t.ID, "plan", t.Plan, "admin_id", s.admin.ID)
	v, err := d.tenantView(ctx, s, t.ID)
	if err != nil {
		return err
	}
	v.Created = &web.CreatedKeys{Live: created.Live, Test: created.Test}
	return render(c, http.StatusOK, web.Tenant(v))
}
