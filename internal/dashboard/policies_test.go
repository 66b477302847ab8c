package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestOperatorChangesPolicies: on a tenant's page an operator creates a
// policy, replaces it, adds and deletes an override and deletes the policy.
// The form's mistakes are answered 400 on the page, next to the form, in
// the API's own words (policy.Parse's), with what was typed kept; every
// change is in the store, dropped from the caches, and audited with the
// admin as actor; a post without the form's token changes nothing.
func TestOperatorChangesPolicies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	store := pgstore.NewPolicies(e.pool)
	ctx := context.Background()
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	csrf := b.csrf(tp)
	post := func(path string, form url.Values) page {
		t.Helper()
		form.Set("csrf", csrf)
		return b.post(tp+path, form)
	}

	// A mistake: the API's reason, inline, with the typed values kept.
	bad := post("/policies", url.Values{"name": {"sign-in"}, "limit": {"10"}, "window": {"1 minute"}, "algorithm": {"fixed_window"}, "scope": {"subject"}, "fail_mode": {"open"}})
	bad.mustStatus(http.StatusBadRequest)
	_, apiErr := policy.Parse("sign-in", []byte(`{"limit":10,"window":"1 minute"}`))
	var fe *policy.FieldError
	if !errors.As(apiErr, &fe) {
		t.Fatalf("the API's parser took the window: %v", apiErr)
	}
	if got := bad.text("policy-error"); got != "Not saved: window "+fe.Reason+"." {
		t.Errorf("inline error %q, want the API's reason %q", got, fe.Reason)
	}
	win := find(bad.one("new-policy"), func(n *html.Node) bool { return attr(n, "name") == "window" })
	if len(win) != 1 || attr(win[0], "value") != "1 minute" || attr(win[0], "aria-invalid") != "true" {
		t.Errorf("the window field is not kept and marked: %v", win)
	}
	if ps, _ := store.ListPolicies(ctx, acme.ID); len(ps) != 0 {
		t.Fatalf("a refused form stored %v", ps)
	}

	// Create, then replace.
	post("/policies", url.Values{"name": {"sign-in"}, "limit": {"10"}, "window": {"1m"}, "algorithm": {"sliding_window"}, "scope": {"subject"}, "fail_mode": {"open"}, "alert_after": {"0"}}).mustStatus(http.StatusSeeOther)
	post("/policies", url.Values{"name": {"sign-in"}, "limit": {"25"}, "window": {"15m"}, "algorithm": {"fixed_window"}, "scope": {"subject"}, "fail_mode": {"closed"}, "alert_after": {"5"}, "shadow": {"1"}}).mustStatus(http.StatusSeeOther)
	p, err := store.GetPolicy(ctx, acme.ID, "sign-in")
	if err != nil {
		t.Fatal(err)
	}
	if p.Limit != 25 || p.Window != limit.Every(15*time.Minute) || p.Algorithm != limit.FixedWindow || p.FailMode != policy.FailClosed || !p.Shadow || p.AlertAfter != 5 {
		t.Errorf("stored %+v", p)
	}

	// Overrides: a bad expiry, then one that lasts, then its deletion.
	past := post("/policies/sign-in/overrides", url.Values{"pattern": {"vip-*"}, "limit": {"100"}, "expires_at": {"2001-01-01T00:00"}})
	past.mustStatus(http.StatusBadRequest)
	if got := past.text("override-error"); got != "Not saved: expires_at must be in the future." {
		t.Errorf("override error %q", got)
	}
	exp := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Minute)
	post("/policies/sign-in/overrides", url.Values{"pattern": {"vip-*"}, "limit": {"100"}, "expires_at": {exp.Format("2006-01-02T15:04")}}).mustStatus(http.StatusSeeOther)
	os, err := store.ListOverrides(ctx, acme.ID, "sign-in")
	if err != nil || len(os) != 1 || os[0].Limit != 100 || os[0].ExpiresAt == nil || !os[0].ExpiresAt.Equal(exp) {
		t.Fatalf("overrides %+v, %v; want vip-* at 100 until %s", os, err, exp)
	}
	if got := b.get(tp).text("override-item"); !strings.Contains(got, "vip-*: 100") {
		t.Errorf("the page lists the override as %q", got)
	}
	post("/policies/sign-in/overrides/delete", url.Values{"pattern": {"vip-*"}}).mustStatus(http.StatusSeeOther)
	if os, _ := store.ListOverrides(ctx, acme.ID, "sign-in"); len(os) != 0 {
		t.Errorf("override not deleted: %v", os)
	}

	// Without the form's token, nothing changes.
	if r := b.post(tp+"/policies/sign-in/delete", url.Values{"csrf": {"forged"}}); r.status != http.StatusForbidden {
		t.Errorf("delete without the token: %d, want 403", r.status)
	}
	if _, err := store.GetPolicy(ctx, acme.ID, "sign-in"); err != nil {
		t.Fatalf("the policy is gone after a forged post: %v", err)
	}
	post("/policies/sign-in/delete", url.Values{}).mustStatus(http.StatusSeeOther)
	if _, err := store.GetPolicy(ctx, acme.ID, "sign-in"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
	if r := post("/policies/sign-in/delete", url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("deleting it again: %d, want 404", r.status)
	}

	// Audited, with the admin; dropped from the caches.
	es, err := e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kinds: []string{policy.KindPolicyPut, policy.KindPolicyDeleted, policy.KindOverridePut, policy.KindOverrideDeleted}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, en := range es {
		if en.Actor != "ops@example.com" {
			t.Errorf("%s audited by %q", en.Kind, en.Actor)
		}
		kinds = append(kinds, en.Kind)
	}
	if want := []string{"policy_deleted", "override_deleted", "override_put", "policy_put", "policy_put"}; !slices.Equal(kinds, want) {
		t.Errorf("audited %v, want %v (newest first)", kinds, want)
	}
	n := 0
	for _, c := range e.changes() {
		if c == "policy:"+acme.ID {
			n++
		}
	}
	if n != 5 {
		t.Errorf("caches told of %d policy changes, want 5: %v", n, e.changes())
	}
}

// formFields is what a browser sends for form n as rendered: its inputs'
// values (a checkbox's when checked) and each select's selected option.
func formFields(n *html.Node) url.Values {
	v := url.Values{}
	for _, in := range find(n, func(x *html.Node) bool { return x.Data == "input" || x.Data == "select" }) {
		name := attr(in, "name")
		switch {
		case name == "":
		case in.Data == "select":
			for _, o := range find(in, func(x *html.Node) bool { return x.Data == "option" && hasAttr(x, "selected") }) {
				v.Add(name, attr(o, "value"))
			}
		case attr(in, "type") == "checkbox":
			if hasAttr(in, "checked") {
				v.Add(name, attr(in, "value"))
			}
		default:
			v.Add(name, attr(in, "value"))
		}
	}
	return v
}

// TestOperatorEditKeepsBudget: a budget's edit form, sent back as shown
// with only its limit changed, keeps the policy's unit and on_expiry (the
// form used to carry neither, and a save reset them).
func TestOperatorEditKeepsBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	store := pgstore.NewPolicies(e.pool)
	ctx := context.Background()
	p, err := policy.Parse("tokens", []byte(`{"limit":1000,"window":"1h","unit":"tokens","on_expiry":"release"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutPolicy(ctx, acme.ID, p); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	form := formFields(b.get(tp).mustStatus(http.StatusOK).one("policy-tokens-form"))
	form.Set("limit", "2000")
	b.post(tp+"/policies", form).mustStatus(http.StatusSeeOther)
	got, err := store.GetPolicy(ctx, acme.ID, "tokens")
	if err != nil || got.Limit != 2000 || got.Unit != "tokens" || !got.ReleaseOnExpiry {
		t.Fatalf("after saving the form as shown: %+v, %v; want limit 2000, unit tokens, on_expiry release", got, err)
	}
}
