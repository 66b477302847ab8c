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
		return fmt.Errorf("tenant list, page %d: %w", page, err)
	}
	plans, err := d.plansByName(ctx)
	if err != nil {
		return fmt.Errorf("tenant list: %w", err)
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
