package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

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

// fieldError is a form value refused: the field's name, and why in words
// for the operator.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.msg }

// faultyField names the form field err is about: a *fieldError's, a
// client fault's (tenant.FieldError, policy.FieldError), or "".
func faultyField(err error) string {
	var fe *fieldError
	if errors.As(err, &fe) {
		return fe.field
	}
	field, _, _ := fault.Of(err)
	return field
}

// optionalInt reads a form number: empty is nil.
func optionalInt(c echo.Context, name, label string) (*int64, error) {
	s := strings.TrimSpace(strings.ReplaceAll(c.FormValue(name), ",", ""))
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return nil, &fieldError{name, label + " must be a whole number above zero, or empty for the plan's"}
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
		return fmt.Errorf("limits of tenant %s: %w", id, err)
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
		v.Limits.Error, v.Limits.ErrorField = "Not saved: "+formErr.Error()+".", faultyField(formErr)
		return render(c, http.StatusBadRequest, web.Tenant(v))
	}
	after, err := d.cfg.Tenants.SetTenantLimits(ctx, id, l)
	if err != nil {
		return fmt.Errorf("set limits of tenant %s: %w", id, err)
	}
	d.changed("tenant", id)
	d.record(ctx, s, id, KindLimitsChanged, map[string]any{"before": limitsDetail(before), "after": limitsDetail(after)})
	d.log.InfoContext(ctx, "tenant limits changed", "tenant_id", id, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=limits#top")
}
