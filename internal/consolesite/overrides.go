package consolesite

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/web"
)

// A policy's overrides, on its page: the form's fields are those of
// PUT /v1/policies/{name}/overrides/{pattern}, read by the same
// policy.ParseOverride and saved through policy.Service (audited with the
// member's email), as the dashboard's override forms do.

// registerOverrides mounts the override forms of a policy's page; the
// pattern travels in the form or the query, since it may hold "/" and "*".
func (s *Site) registerOverrides(g *echo.Group) {
	g.POST("/policies/:name/overrides", s.page(s.putOverride))
	g.GET("/policies/:name/overrides/delete", s.page(s.confirmDeleteOverride))
	g.POST("/policies/:name/overrides/delete", s.page(s.deleteOverride))
}

// putOverride adds or replaces an override of the policy.
func (s *Site) putOverride(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	f := web.ConsoleOverrideForm{Pattern: c.FormValue("pattern"), Limit: c.FormValue("limit"), ExpiresAt: c.FormValue("expires_at")}
	o, err := policy.ParseOverrideForm(f.Pattern, c.FormValue)
	if err == nil {
		o, err = s.policyService(m).PutOverride(ctx, m.TenantID, p.Name, o)
	}
	if field, reason, ok := fault.Of(err); ok {
		f.ErrorField, f.Error = field, fault.NotSaved(field, reason)
		v, err := s.policyEditView(c, m, policyForm(p))
		if err != nil {
			return s.fail(c, err)
		}
		v.NewOverride = f
		return render(c, http.StatusBadRequest, web.ConsolePolicyEdit(v))
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.changed("policy", m.TenantID)
	s.log.InfoContext(ctx, "console override put", "tenant_id", m.TenantID, "policy", p.Name, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/policies/"+url.PathEscape(p.Name)+"?done=override")
}

// confirmDeleteOverride asks before deleting an override of the policy.
func (s *Site) confirmDeleteOverride(c echo.Context, m *member) error {
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	pattern := c.QueryParam("pattern")
	if policy.ValidatePattern(pattern) != nil {
		return s.noOverride(c, p.Name)
	}
	o, err := s.cfg.Policies.GetOverride(c.Request().Context(), m.TenantID, p.Name, pattern)
	if errors.Is(err, policy.ErrNotFound) {
		return s.noOverride(c, p.Name)
	}
	if err != nil {
		return s.fail(c, err)
	}
	chrome, err := s.policyChrome(c.Request().Context(), m, "Delete the override “"+o.Pattern+"” of "+p.Name+"?", "")
	if err != nil {
		return s.fail(c, err)
	}
	return render(c, http.StatusOK, web.ConsoleOverrideDelete(web.ConsoleOverrideDeleteView{Chrome: chrome,
		Policy: policyRow(p), Override: overrideRow(p.Name, o)}))
}

// deleteOverride deletes an override of the policy (asked first by
// confirmDeleteOverride).
func (s *Site) deleteOverride(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	pattern := c.FormValue("pattern")
	if policy.ValidatePattern(pattern) != nil {
		return s.noOverride(c, p.Name)
	}
	err = s.policyService(m).DeleteOverride(ctx, m.TenantID, p.Name, pattern)
	if errors.Is(err, policy.ErrNotFound) {
		return s.noOverride(c, p.Name)
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.changed("policy", m.TenantID)
	s.log.InfoContext(ctx, "console override deleted", "tenant_id", m.TenantID, "policy", p.Name, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/policies/"+url.PathEscape(p.Name)+"?done=override-deleted")
}

// noOverride is the 404 page of an override the policy does not have.
func (s *Site) noOverride(c echo.Context, name string) error {
	return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found",
		Message: "This policy has no such override: it may have expired or been deleted.",
		Link:    "/console/policies/" + url.PathEscape(name), LinkLabel: "The policy"})
}

// overrideRow is how a policy's page lists an override.
func overrideRow(name string, o policy.Override) web.ConsoleOverrideRow {
	r := web.ConsoleOverrideRow{Pattern: o.Pattern, Limit: strconv.FormatInt(o.Limit, 10), Expires: "never",
		DeleteHref: "/console/policies/" + url.PathEscape(name) + "/overrides/delete?pattern=" + url.QueryEscape(o.Pattern)}
	if o.ExpiresAt != nil {
		r.Expires = when(*o.ExpiresAt)
	}
	return r
}
