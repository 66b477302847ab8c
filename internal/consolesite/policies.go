package consolesite

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/fault"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/web"
)

// The policies page (/console/policies, issue 41 "Policies and overrides"):
// a member lists, creates, edits and deletes their tenant's policies. The
// form's fields are those of PUT /v1/policies/{name}: they are turned into
// the same JSON body and read by the same policy.Parse (policy.ParseForm,
// shared with the operators' dashboard), so the console
// accepts exactly what the API accepts, and a policy.FieldError is shown
// next to its field with a 400 page. Changes go through policy.Service,
// audited with the member's email. Both roles may manage policies.

// registerPolicies mounts the policies pages on the console's group.
func (s *Site) registerPolicies(g *echo.Group) {
	g.GET("/policies", s.page(s.policies))
	g.POST("/policies", s.page(s.putPolicy))
	g.GET("/policies/:name", s.page(s.editPolicy))
	g.GET("/policies/:name/delete", s.page(s.confirmDeletePolicy))
	g.POST("/policies/:name/delete", s.page(s.deletePolicy))
	s.registerOverrides(g)
}

// policyService is the policy Service acting for member m: its audit
// entries name the member.
func (s *Site) policyService(m *member) policy.Service {
	return policy.Service{Store: s.cfg.Policies, Audit: func(ctx context.Context, tenantID, kind string, detail map[string]any) {
		s.record(ctx, m, kind, detail)
	}}
}

// policies lists the tenant's policies and the form that creates one.
func (s *Site) policies(c echo.Context, m *member) error {
	flash := ""
	switch c.QueryParam("done") {
	case "saved":
		flash = "The policy is saved: the API counts by it within a second."
	case "deleted":
		flash = "The policy is deleted: checks that name it are answered 400."
	}
	return s.renderPolicies(c, m, http.StatusOK, newPolicyForm(), flash)
}

// editPolicy shows the form of one of the tenant's policies, as stored.
func (s *Site) editPolicy(c echo.Context, m *member) error {
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	return s.renderPolicyEdit(c, m, http.StatusOK, policyForm(p), nil, nil)
}

// putPolicy creates or replaces a policy of the tenant from the form.
func (s *Site) putPolicy(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	f := typedForm(c)
	p, err := policy.ParseForm(f.Name, c.FormValue)
	if err == nil {
		p, err = s.policyService(m).PutPolicy(ctx, m.TenantID, p)
	}
	if field, reason, ok := fault.Of(err); ok {
		f.ErrorField, f.Error = field, fault.NotSaved(field, reason)
		if f.New {
			return s.renderPolicies(c, m, http.StatusBadRequest, f, "")
		}
		return s.renderPolicyEdit(c, m, http.StatusBadRequest, f, nil, nil)
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.changed("policy", m.TenantID)
	s.log.InfoContext(ctx, "console policy put", "tenant_id", m.TenantID, "policy", p.Name, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/policies?done=saved")
}

// confirmDeletePolicy asks before deleting a policy with its overrides.
func (s *Site) confirmDeletePolicy(c echo.Context, m *member) error {
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	return s.renderPolicyDelete(c, m, p)
}

// deletePolicy deletes a policy of the tenant (asked first by
// confirmDeletePolicy).
func (s *Site) deletePolicy(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	p, ok, err := s.memberPolicy(c, m)
	if !ok {
		return err
	}
	err = s.policyService(m).DeletePolicy(ctx, m.TenantID, p.Name)
	if errors.Is(err, policy.ErrNotFound) {
		return s.noPolicy(c)
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.changed("policy", m.TenantID)
	s.log.InfoContext(ctx, "console policy deleted", "tenant_id", m.TenantID, "policy", p.Name, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/policies?done=deleted")
}

// memberPolicy returns the policy named in the path, looked up within the
// member's tenant, or answers a 404 page (ok false, err what answering
// returned): another tenant's policy of that name is none of theirs.
func (s *Site) memberPolicy(c echo.Context, m *member) (policy.Policy, bool, error) {
	name, err := url.PathUnescape(c.Param("name"))
	if err != nil || policy.ValidateName(name) != nil {
		return policy.Policy{}, false, s.noPolicy(c)
	}
	p, err := s.cfg.Policies.GetPolicy(c.Request().Context(), m.TenantID, name)
	if errors.Is(err, policy.ErrNotFound) {
		return p, false, s.noPolicy(c)
	}
	if err != nil {
		return p, false, s.fail(c, err)
	}
	return p, true, nil
}

// noPolicy is the 404 page of a policy the workspace does not have.
func (s *Site) noPolicy(c echo.Context) error {
	return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found",
		Message: "Your workspace has no such policy: it may have been deleted.", Link: "/console/policies", LinkLabel: "Your policies"})
}

// renderPolicies renders the list with the new-policy form f.
func (s *Site) renderPolicies(c echo.Context, m *member, status int, f web.ConsolePolicyForm, flash string) error {
	ctx := c.Request().Context()
	chrome, err := s.policyChrome(ctx, m, "Policies", flash)
	if err != nil {
		return s.fail(c, err)
	}
	ps, err := s.cfg.Policies.ListPolicies(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	v := web.ConsolePoliciesView{Chrome: chrome, Form: f}
	for _, p := range ps {
		v.Policies = append(v.Policies, policyRow(p))
	}
	return render(c, status, web.ConsolePolicies(v))
}

// renderPolicyEdit renders a policy's edit page with form f, and its
// "Try it" and "Unlock a subject" forms as posted (nil: empty).
func (s *Site) renderPolicyEdit(c echo.Context, m *member, status int, f web.ConsolePolicyForm, try *web.ConsoleTryForm, unlock *web.ConsoleUnlockForm) error {
	v, err := s.policyEditView(c, m, f)
	if err != nil {
		return s.fail(c, err)
	}
	if try != nil {
		v.Try = *try
	}
	if unlock != nil {
		v.Unlock = *unlock
	}
	return render(c, status, web.ConsolePolicyEdit(v))
}

// policyEditDone are the flashes of a policy's page after a change.
var policyEditDone = map[string]string{
	"unlocked":         "The subject is unlocked: its counter of this policy is cleared, and its next check counts from nothing.",
	"override":         "The override is saved: the API counts by it within a second.",
	"override-deleted": "The override is deleted: its subjects are counted by the policy's limit again.",
}

// policyEditView is a policy's page with form f, its overrides (a policy
// of scope subject's) and its empty forms.
func (s *Site) policyEditView(c echo.Context, m *member, f web.ConsolePolicyForm) (web.ConsolePolicyEditView, error) {
	ctx := c.Request().Context()
	flash := ""
	if c.Request().Method == http.MethodGet {
		flash = policyEditDone[c.QueryParam("done")]
	}
	chrome, err := s.policyChrome(ctx, m, "Policy "+f.Name, flash)
	if err != nil {
		return web.ConsolePolicyEditView{}, err
	}
	v := web.ConsolePolicyEditView{Chrome: chrome, Form: f, Path: "/console/policies/" + url.PathEscape(f.Name),
		Counters: s.cfg.Counters != nil, Try: web.ConsoleTryForm{Mode: "live", Cost: "1"}, Unlock: web.ConsoleUnlockForm{Mode: "live"},
		Overrides: f.Scope == string(policy.ScopeSubject)}
	if !v.Overrides {
		return v, nil
	}
	ovs, err := s.cfg.Policies.ListOverrides(ctx, m.TenantID, f.Name)
	if err != nil && !errors.Is(err, policy.ErrNotFound) {
		return v, err
	}
	for _, o := range ovs {
		v.OverrideRows = append(v.OverrideRows, overrideRow(f.Name, o))
	}
	return v, nil
}

// renderPolicyDelete renders the page that asks before deleting p.
func (s *Site) renderPolicyDelete(c echo.Context, m *member, p policy.Policy) error {
	chrome, err := s.policyChrome(c.Request().Context(), m, "Delete the policy “"+p.Name+"”?", "")
	if err != nil {
		return s.fail(c, err)
	}
	return render(c, http.StatusOK, web.ConsolePolicyDelete(web.ConsolePolicyDeleteView{Chrome: chrome, Policy: policyRow(p)}))
}

// policyChrome is the policies pages' frame.
func (s *Site) policyChrome(ctx context.Context, m *member, title, flash string) (web.ConsoleChrome, error) {
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return web.ConsoleChrome{}, err
	}
	return web.ConsoleChrome{Title: title, Section: "policies", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf, Flash: flash}, nil
}

// policyRow is how the page lists a policy.
func policyRow(p policy.Policy) web.ConsolePolicyRow {
	r := web.ConsolePolicyRow{Name: p.Name, Path: "/console/policies/" + url.PathEscape(p.Name),
		Limit: strconv.FormatInt(p.Limit, 10), Window: "none (concurrency)", Algorithm: p.Algorithm.String(),
		Scope: string(p.Scope), FailMode: string(p.FailMode), Shadow: "no", Unit: p.Unit}
	if !p.Concurrent() {
		r.Window = policy.FormatWindow(p.Window)
	}
	if p.Shadow {
		r.Shadow = "yes"
	}
	if r.Unit == "" {
		r.Unit = "requests"
	}
	return r
}

// policyForm is the edit form of p as stored.
func policyForm(p policy.Policy) web.ConsolePolicyForm {
	f := web.ConsolePolicyForm{Name: p.Name, Limit: strconv.FormatInt(p.Limit, 10), Algorithm: p.Algorithm.String(),
		Scope: string(p.Scope), FailMode: string(p.FailMode), AlertAfter: strconv.FormatInt(p.AlertAfter, 10), Shadow: p.Shadow, Unit: p.Unit}
	if p.ReleaseOnExpiry {
		f.OnExpiry = "release"
	}
	if !p.Concurrent() {
		f.Window = policy.FormatWindow(p.Window)
	}
	return f
}

// newPolicyForm is the empty form that creates a policy, with the API's
// defaults chosen.
func newPolicyForm() web.ConsolePolicyForm {
	d := policy.Default("")
	return web.ConsolePolicyForm{New: true, Algorithm: d.Algorithm.String(), Scope: string(d.Scope), FailMode: string(d.FailMode), AlertAfter: "0"}
}

// typedForm is the policy form as typed: New when it came from the list's
// create form.
func typedForm(c echo.Context) web.ConsolePolicyForm {
	return web.ConsolePolicyForm{New: c.FormValue("new") != "",
		Name: strings.TrimSpace(c.FormValue("name")), Limit: c.FormValue("limit"), Window: c.FormValue("window"),
		Algorithm: c.FormValue("algorithm"), Scope: c.FormValue("scope"), FailMode: c.FormValue("fail_mode"),
		AlertAfter: c.FormValue("alert_after"), Shadow: c.FormValue("shadow") != "", Unit: c.FormValue("unit"), OnExpiry: c.FormValue("on_expiry")}
}
