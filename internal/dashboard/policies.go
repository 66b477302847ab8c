package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/web"
)

// An operator changes a tenant's policies and overrides from its page. The
// forms' fields are those of the tenant API's PUT /v1/policies/{name} and
// PUT /v1/policies/{name}/overrides/{pattern}: they are turned into the
// same JSON body and read by the same policy.Parse and policy.ParseOverride,
// so the dashboard accepts exactly what the API accepts (policy.ParseForm
// and policy.ParseOverrideForm, shared with the tenants' console). The changes go
// through policy.Service, which audits them (with the admin as actor, here).

// policyService is the policy Service acting for admin s: its audit entries
// name the admin.
func (d *Dashboard) policyService(s *signedIn) policy.Service {
	return policy.Service{Store: d.cfg.Policies, Audit: func(ctx context.Context, tenantID, kind string, detail map[string]any) {
		d.record(ctx, s, tenantID, kind, detail)
	}}
}

// putPolicy creates or replaces a policy of the tenant.
func (d *Dashboard) putPolicy(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	if _, err := d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fmt.Errorf("policies of tenant %s: %w", id, err)
	}
	name := strings.TrimSpace(c.FormValue("name"))
	p, err := policy.ParseForm(name, c.FormValue)
	if err == nil {
		p, err = d.policyService(s).PutPolicy(ctx, id, p)
	}
	if field, reason, ok := fault.Of(err); ok {
		return d.policyFormFailed(c, s, id, name, field, reason)
	}
	if err != nil {
		return fmt.Errorf("put policy %s of tenant %s: %w", name, id, err)
	}
	d.changed("policy", id)
	d.log.InfoContext(ctx, "policy put", "tenant_id", id, "policy", p.Name, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=policy#policies-h")
}

// policyFormFailed shows the tenant's page again with the policy form as
// typed and what was wrong with it: the new-policy form when the name is no
// policy of the tenant's, else that policy's form.
func (d *Dashboard) policyFormFailed(c echo.Context, s *signedIn, id, name, field, reason string) error {
	v, err := d.tenantView(c.Request().Context(), s, id)
	if err != nil {
		return err
	}
	f := &v.NewPolicy
	for i := range v.Policies {
		if v.Policies[i].Name == name {
			f = &v.Policies[i].Edit
		}
	}
	f.Name, f.Limit, f.Window = name, c.FormValue("limit"), c.FormValue("window")
	f.Algorithm, f.Scope, f.FailMode = c.FormValue("algorithm"), c.FormValue("scope"), c.FormValue("fail_mode")
	f.AlertAfter, f.Shadow = c.FormValue("alert_after"), c.FormValue("shadow") != ""
	f.Unit, f.OnExpiry = c.FormValue("unit"), c.FormValue("on_expiry")
	f.Error, f.ErrorField, f.Open = fault.NotSaved(field, reason), field, true
	return render(c, http.StatusBadRequest, web.Tenant(v))
}

// confirmDeletePolicy asks before deleting a policy of the tenant with its
// overrides: deleting cannot be undone. The page's button posts to
// deletePolicy.
func (d *Dashboard) confirmDeletePolicy(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, name := c.Param("id"), c.Param("name")
	t, err := d.cfg.Tenants.Tenant(ctx, id)
	if err != nil {
		return fmt.Errorf("policies of tenant %s: %w", id, err)
	}
	p, err := d.cfg.Policies.GetPolicy(ctx, id, name)
	if errors.Is(err, policy.ErrNotFound) {
		return notFound("This tenant has no policy " + name + ": it may have been deleted already.")
	}
	if err != nil {
		return fmt.Errorf("policy %s of tenant %s: %w", name, id, err)
	}
	overrides := "none"
	if p.Scope == policy.ScopeSubject {
		os, err := d.cfg.Policies.ListOverrides(ctx, id, name)
		if err != nil {
			return fmt.Errorf("overrides of policy %s of tenant %s: %w", name, id, err)
		}
		switch len(os) {
		case 0:
		case 1:
			overrides = "1 override, deleted with it"
		default:
			overrides = count(int64(len(os))) + " overrides, deleted with it"
		}
	}
	window := "none (concurrency)"
	if !p.Concurrent() {
		window = policy.FormatWindow(p.Window)
	}
	base := "/admin/tenants/" + id
	v := web.ConfirmView{
		Chrome:     d.chrome(s, "Delete policy "+p.Name+" of "+t.Name+"?", "tenants"),
		TenantName: t.Name, TenantHref: base,
		Facts: []web.KV{
			{Key: "Policy", Value: p.Name}, {Key: "Limit", Value: count(p.Limit)}, {Key: "Window", Value: window},
			{Key: "Algorithm", Value: p.Algorithm.String()}, {Key: "Scope", Value: string(p.Scope)}, {Key: "Overrides", Value: overrides},
		},
		Consequence: "The tenant's checks that name this policy are answered 400, naming the policy as unknown, on every instance within a second, until someone creates it again. This cannot be undone: its overrides go with it.",
		Action:      base + "/policies/" + url.PathEscape(p.Name) + "/delete", Button: "Delete policy " + p.Name,
		CancelHref: base + "#policies-h",
	}
	return render(c, http.StatusOK, web.Confirm(v))
}

// deletePolicy deletes a policy of the tenant with its overrides (asked
// first by confirmDeletePolicy).
func (d *Dashboard) deletePolicy(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, name := c.Param("id"), c.Param("name")
	if _, err := d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fmt.Errorf("policies of tenant %s: %w", id, err)
	}
	err := d.policyService(s).DeletePolicy(ctx, id, name)
	if errors.Is(err, policy.ErrNotFound) {
		return notFound("This tenant has no policy " + name + ": it may have been deleted already.")
	}
	if err != nil {
		return fmt.Errorf("delete policy %s of tenant %s: %w", name, id, err)
	}
	d.changed("policy", id)
	d.log.InfoContext(ctx, "policy deleted", "tenant_id", id, "policy", name, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=policy-deleted#policies-h")
}

// putOverride adds or replaces an override of one of the tenant's policies.
func (d *Dashboard) putOverride(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, name := c.Param("id"), c.Param("name")
	if _, err := d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fmt.Errorf("policies of tenant %s: %w", id, err)
	}
	pattern := c.FormValue("pattern")
	o, err := policy.ParseOverrideForm(pattern, c.FormValue)
	if err == nil {
		o, err = d.policyService(s).PutOverride(ctx, id, name, o)
	}
	if field, reason, ok := fault.Of(err); ok {
		return d.overrideFormFailed(c, s, id, name, field, reason)
	}
	if err != nil {
		return fmt.Errorf("put override of policy %s of tenant %s: %w", name, id, err)
	}
	d.changed("policy", id)
	d.log.InfoContext(ctx, "override put", "tenant_id", id, "policy", name, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=override#policies-h")
}

// overrideFormFailed shows the tenant's page again with the policy's
// override form as typed and what was wrong with it.
func (d *Dashboard) overrideFormFailed(c echo.Context, s *signedIn, id, name, field, reason string) error {
	v, err := d.tenantView(c.Request().Context(), s, id)
	if err != nil {
		return err
	}
	for i := range v.Policies {
		if f := v.Policies[i].NewOverride; v.Policies[i].Name == name && f != nil {
			f.Pattern, f.Limit, f.ExpiresAt = c.FormValue("pattern"), c.FormValue("limit"), c.FormValue("expires_at")
			f.Error, f.ErrorField, f.Open = fault.NotSaved(field, reason), field, true
			return render(c, http.StatusBadRequest, web.Tenant(v))
		}
	}
	// The policy is gone, or has scope global: no form to show it in.
	return badRequest(fault.NotSaved(field, reason))
}

// deleteOverride deletes an override of one of the tenant's policies; the
// pattern comes in the form, since it may hold "/" and "*".
func (d *Dashboard) deleteOverride(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	id, name, pattern := c.Param("id"), c.Param("name"), c.FormValue("pattern")
	if _, err := d.cfg.Tenants.Tenant(ctx, id); err != nil {
		return fmt.Errorf("policies of tenant %s: %w", id, err)
	}
	if err := policy.ValidatePattern(pattern); err != nil {
		return badRequest("That is no override's pattern (pattern).")
	}
	err := d.policyService(s).DeleteOverride(ctx, id, name, pattern)
	if errors.Is(err, policy.ErrNotFound) {
		return notFound("Policy " + name + " has no override " + pattern + ": it may have expired or been deleted already.")
	}
	if err != nil {
		return fmt.Errorf("delete override of policy %s of tenant %s: %w", name, id, err)
	}
	d.changed("policy", id)
	d.log.InfoContext(ctx, "override deleted", "tenant_id", id, "policy", name, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=override-deleted#policies-h")
}

// policyForms fills a policy row's forms with the policy as stored.
func policyForms(tenantID string, p policy.Policy, row *web.PolicyRow) {
	base := "/admin/tenants/" + tenantID + "/policies/" + url.PathEscape(p.Name)
	row.Edit = web.PolicyForm{
		Action: "/admin/tenants/" + tenantID + "/policies", ID: "policy-" + p.Name,
		Name: p.Name, Limit: strconv.FormatInt(p.Limit, 10), Algorithm: p.Algorithm.String(), Scope: string(p.Scope),
		FailMode: string(p.FailMode), AlertAfter: strconv.FormatInt(p.AlertAfter, 10), Shadow: p.Shadow,
		Unit: p.Unit, OnExpiry: onExpiry(p),
	}
	if !p.Concurrent() {
		row.Edit.Window = policy.FormatWindow(p.Window)
	}
	row.DeleteAction = base + "/delete"
	if p.Scope == policy.ScopeSubject {
		row.NewOverride = &web.OverrideForm{Action: base + "/overrides", ID: "override-" + p.Name}
	}
	for i := range row.Overrides {
		row.Overrides[i].DeleteAction = base + "/overrides/delete"
	}
}

// onExpiry is p's on_expiry as the forms send it: "release", or "" for
// the default (settle), which a concurrency policy leaves out.
func onExpiry(p policy.Policy) string {
	if p.ReleaseOnExpiry {
		return "release"
	}
	return ""
}

// newPolicyForm is the empty form that creates a policy, with the API's
// defaults chosen.
func newPolicyForm(tenantID string) web.PolicyForm {
	d := policy.Default("")
	return web.PolicyForm{
		Action: "/admin/tenants/" + tenantID + "/policies", ID: "new-policy", New: true,
		Algorithm: d.Algorithm.String(), Scope: string(d.Scope), FailMode: string(d.FailMode), AlertAfter: "0",
	}
}
