package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// tenantState is the tenant's state on its page, with the ways to change it.
func tenantState(t tenant.Tenant) web.TenantState {
	st := web.TenantState{
		DisableHref:  "/admin/tenants/" + t.ID + "/disable",
		EnableAction: "/admin/tenants/" + t.ID + "/enable",
	}
	if t.DisabledAt != nil {
		st.Disabled, st.Since, st.Reason = true, when(*t.DisabledAt), t.DisabledReason
	}
	return st
}

// confirmDisableTenant asks before disabling a whole tenant, on a page of
// its own with a field for the reason; its button posts to disableTenant.
func (d *Dashboard) confirmDisableTenant(c echo.Context, s *signedIn) error {
	return d.renderDisableTenant(c, s, http.StatusOK, "", "")
}

// renderDisableTenant renders the confirmation page, with the reason typed
// and what was wrong with it when a post was refused.
func (d *Dashboard) renderDisableTenant(c echo.Context, s *signedIn, status int, reason, reasonErr string) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	t, err := d.cfg.Tenants.Tenant(ctx, id)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", id, err)
	}
	if t.Disabled() {
		return &pageError{http.StatusConflict, "Already disabled", "The workspace " + t.Name + " was already disabled at " + when(*t.DisabledAt) + ": there is nothing to do. Its page offers to enable it."}
	}
	st := tenantState(t)
	v := web.ConfirmView{
		Chrome:     d.chrome(s, "Disable the workspace "+t.Name+"?", "tenants"),
		TenantName: t.Name, TenantHref: "/admin/tenants/" + id,
		Facts: []web.KV{
			{Key: "Tenant", Value: t.Name}, {Key: "Tenant ID", Value: t.ID}, {Key: "Plan", Value: t.Plan},
			{Key: "Billing status", Value: t.BillingStatus}, {Key: "Created", Value: when(t.CreatedAt)},
		},
		Consequence: "Every key of this tenant is refused with 403 (tenant-disabled) by the API, the gRPC rate limit service and forward auth, on every instance within seconds; its console members are signed out and cannot sign in. Nothing is deleted: enabling it again restores its keys, policies, members and counters.",
		Action:      st.DisableHref, Button: "Disable workspace " + t.Name,
		CancelHref: "/admin/tenants/" + id + "#state-h",
		Field: &web.ConfirmField{
			Name: "reason", Label: "Reason (optional)", MaxLen: tenant.MaxDisabledReasonLen,
			Hint:  fmt.Sprintf("For operators: written to the audit log and shown on this tenant's page, never to the tenant; at most %d characters.", tenant.MaxDisabledReasonLen),
			Value: reason, Error: reasonErr,
		},
	}
	return render(c, status, web.Confirm(v))
}

// disableTenant disables the tenant (asked first by confirmDisableTenant),
// tells this instance's caches at once (the others hear the database's
// change notification) and audits who did it.
func (d *Dashboard) disableTenant(c echo.Context, s *signedIn) error {
	reason := strings.TrimSpace(c.Request().PostFormValue("reason"))
	if err := tenant.ValidateDisabledReason(reason); err != nil {
		var fe *tenant.FieldError
		errors.As(err, &fe)
		return d.renderDisableTenant(c, s, http.StatusBadRequest, reason, "The reason "+fe.Reason+".")
	}
	return d.setTenantDisabled(c, s, true, reason)
}

// enableTenant gives a disabled tenant back its keys and console.
func (d *Dashboard) enableTenant(c echo.Context, s *signedIn) error {
	return d.setTenantDisabled(c, s, false, "")
}

// setTenantDisabled disables or enables the tenant and audits who did.
func (d *Dashboard) setTenantDisabled(c echo.Context, s *signedIn, disabled bool, reason string) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	verb, kind, detail := "enabled", audit.KindTenantEnabled, map[string]any{}
	if disabled {
		verb, kind, detail = "disabled", audit.KindTenantDisabled, map[string]any{"reason": reason}
	}
	t, err := d.cfg.Tenants.SetTenantDisabled(ctx, id, disabled, reason)
	if err != nil {
		return fmt.Errorf("tenant %s not %s: %w", id, verb, err)
	}
	d.changed("tenant", t.ID)
	d.record(ctx, s, t.ID, kind, detail)
	d.log.InfoContext(ctx, "tenant "+verb, "tenant_id", t.ID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+t.ID+"?done=tenant-"+verb+"#state-h")
}
