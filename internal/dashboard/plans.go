package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

func planRow(p tenant.Plan) web.PlanRow {
	r := web.PlanRow{
		Name: p.Name, FormID: "plan-" + p.Name, Action: "/admin/plans/" + url.PathEscape(p.Name),
		IPPerMinute:    strconv.FormatInt(p.IPPerMinute, 10),
		QuotaPerMinute: strconv.FormatInt(p.QuotaPerMinute, 10),
		QuotaPerHour:   strconv.FormatInt(p.QuotaPerHour, 10),
		Unlimited:      p.MonthlyChecks == nil, Purchasable: p.Purchasable, StripePriceID: p.StripePriceID,
	}
	if p.MonthlyChecks != nil {
		r.MonthlyChecks = strconv.FormatInt(*p.MonthlyChecks, 10)
	}
	return r
}

// plansView builds the plan table.
func (d *Dashboard) plansView(ctx context.Context, s *signedIn) (web.PlansView, error) {
	ps, err := d.cfg.Tenants.Plans(ctx)
	if err != nil {
		return web.PlansView{}, err
	}
	v := web.PlansView{Chrome: d.chrome(s, "Plans", "plans")}
	for _, p := range ps {
		v.Rows = append(v.Rows, planRow(p))
	}
	return v, nil
}

func (d *Dashboard) plans(c echo.Context, s *signedIn) error {
	v, err := d.plansView(c.Request().Context(), s)
	if err != nil {
		return err
	}
	v.Flash = flashes[c.QueryParam("done")]
	return render(c, http.StatusOK, web.Plans(v))
}

func planDetail(p tenant.Plan) map[string]any {
	m := map[string]any{
		"ip_per_minute": p.IPPerMinute, "quota_per_minute": p.QuotaPerMinute, "quota_per_hour": p.QuotaPerHour,
		"monthly_checks": nil, "stripe_price_id": p.StripePriceID,
	}
	if p.MonthlyChecks != nil {
		m["monthly_checks"] = *p.MonthlyChecks
	}
	return m
}

// requiredInt reads a positive form number.
func requiredInt(c echo.Context, name, label string) (*int64, error) {
	n, err := optionalInt(c, name, label)
	if err != nil || n == nil {
		return nil, &fieldError{name, label + " must be a whole number above zero"}
	}
	return n, nil
}

// setPlan changes one plan's limits and Stripe price, and audits it.
func (d *Dashboard) setPlan(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	name := c.Param("name")
	before, err := d.cfg.Tenants.Plan(ctx, name)
	if err != nil {
		return err
	}
	var l tenant.PlanLimits
	var formErr error
	for _, f := range []struct {
		dst         **int64
		name, label string
	}{
		{&l.IPPerMinute, "ip_per_minute", "Per-IP requests per minute"},
		{&l.QuotaPerMinute, "quota_per_minute", "Tenant quota per minute"},
		{&l.QuotaPerHour, "quota_per_hour", "Tenant quota per hour"},
	} {
		if *f.dst, err = requiredInt(c, f.name, f.label); err != nil && formErr == nil {
			formErr = err
		}
	}
	if c.FormValue("unlimited") != "" {
		l.Unlimited = true
	} else if l.MonthlyChecks, err = requiredInt(c, "monthly_checks", "Live checks per month"); err != nil && formErr == nil {
		formErr = &fieldError{"monthly_checks", err.Error() + " (or tick unlimited)"}
	}
	price := strings.TrimSpace(c.FormValue("stripe_price_id"))
	if formErr == nil {
		formErr = l.Validate()
	}
	if formErr == nil && price != before.StripePriceID {
		if price == "" {
			formErr = &fieldError{"stripe_price_id", "a plan's Stripe price can be replaced but not removed"}
		} else {
			formErr = tenant.ValidatePriceID(price)
		}
	}
	if formErr != nil {
		return d.planFormError(c, s, name, formErr)
	}
	// The price first: a price that sells another plan is refused there,
	// before anything has changed.
	if price != before.StripePriceID {
		if _, err := d.cfg.Tenants.SetPlanPrice(ctx, name, price); errors.Is(err, tenant.ErrConflict) {
			return d.planFormError(c, s, name, &fieldError{"stripe_price_id", "this Stripe price already sells another plan"})
		} else if err != nil {
			return err
		}
	}
	after, err := d.cfg.Tenants.SetPlanLimits(ctx, name, l)
	if err != nil {
		return err
	}
	d.changed("plan", name)
	d.record(ctx, s, "", KindPlanChanged, map[string]any{"plan": name, "before": planDetail(before), "after": planDetail(after)})
	d.log.InfoContext(ctx, "plan changed", "plan", name, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/plans?done=plan#top")
}

// planFormError shows the plan table again with the submitted row and why
// it was not saved.
func (d *Dashboard) planFormError(c echo.Context, s *signedIn, name string, formErr error) error {
	v, err := d.plansView(c.Request().Context(), s)
	if err != nil {
		return err
	}
	for i := range v.Rows {
		if v.Rows[i].Name != name {
			continue
		}
		r := &v.Rows[i]
		r.IPPerMinute, r.QuotaPerMinute, r.QuotaPerHour = c.FormValue("ip_per_minute"), c.FormValue("quota_per_minute"), c.FormValue("quota_per_hour")
		r.MonthlyChecks, r.Unlimited = c.FormValue("monthly_checks"), c.FormValue("unlimited") != ""
		r.StripePriceID = c.FormValue("stripe_price_id")
		r.Error, r.ErrorField = "Not saved: "+formErr.Error()+".", faultyField(formErr)
	}
	return render(c, http.StatusBadRequest, web.Plans(v))
}
