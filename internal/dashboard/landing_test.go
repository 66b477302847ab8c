package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/tenant"
)

// formOf returns the form that holds n, or nil.
func formOf(n *html.Node) *html.Node {
	for ; n != nil; n = n.Parent {
		if n.Type == html.ElementNode && n.Data == "form" {
			return n
		}
	}
	return nil
}

// byID returns the element of id below root, or nil.
func byID(root *html.Node, id string) *html.Node {
	ns := find(root, func(n *html.Node) bool { return attr(n, "id") == id })
	if len(ns) == 0 {
		return nil
	}
	return ns[0]
}

// contains reports whether n is outer or below it.
func contains(outer, n *html.Node) bool {
	for ; n != nil; n = n.Parent {
		if n == outer {
			return true
		}
	}
	return false
}

// assertLandsOnForm fails unless the page p, answered to a form that was
// not saved, brings the browser to that form: the form posted to an
// address whose fragment names an element around the form's error (so the
// browser scrolls there, no script needed), and the field at fault, when
// the error names one, is marked invalid and described by the error.
func assertLandsOnForm(t *testing.T, what string, p page, errorID, field string) {
	t.Helper()
	p.mustStatus(http.StatusBadRequest)
	errEl := p.one(errorID)
	form := formOf(errEl)
	if form == nil {
		t.Fatalf("%s: the error %s is in no form", what, errorID)
	}
	action, err := url.Parse(attr(form, "action"))
	if err != nil || action.Fragment == "" {
		t.Fatalf("%s: the form posts to %q, with no fragment to land on", what, attr(form, "action"))
	}
	target := byID(p.root, action.Fragment)
	if target == nil || !contains(target, errEl) {
		t.Errorf("%s: the fragment #%s names no element around the error", what, action.Fragment)
	}
	if field == "" {
		return
	}
	invalid := find(p.root, func(n *html.Node) bool { return attr(n, "aria-invalid") == "true" })
	if len(invalid) != 1 || attr(invalid[0], "name") != field || attr(invalid[0], "aria-describedby") != attr(errEl, "id") ||
		formOf(invalid[0]) != form && attr(invalid[0], "form") != attr(form, "id") {
		var names []string
		for _, f := range invalid {
			names = append(names, attr(f, "name"))
		}
		t.Errorf("%s: fields marked invalid %v, want the field at fault %q alone, described by the error", what, names, field)
	}
}

// TestFailedSaveLandsOnItsForm: a form that was not saved is answered with
// its page again, and the browser lands on the form with its error in
// view, not at the top of a long page: each form posts to an address whose
// fragment is the form's own id, and the field at fault is marked.
// A saved form's redirect names its own fragment, so that the browser does
// not carry the form's over to where the confirmation is.
func TestFailedSaveLandsOnItsForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dashboard.Config) { c.Webhooks = c.Billing.(dashboard.WebhookLog) })
	e.admin("ops@example.com")
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	e.stripeEvent("evt_held", "customer.subscription.created", "unknown_customer", "", 1, `{}`)
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	csrf := b.csrf(tp)
	post := func(path string, form url.Values) page {
		t.Helper()
		form.Set("csrf", csrf)
		return b.post(path, form)
	}

	assertLandsOnForm(t, "limits", post(tp+"/limits", url.Values{"quota_per_hour": {"-1"}}), "limits-error", "quota_per_hour")
	ok := post(tp+"/limits", url.Values{"rate_limit_per_minute": {"7"}}).mustStatus(http.StatusSeeOther)
	if loc, _ := url.Parse(ok.header.Get("Location")); loc == nil || loc.Fragment == "" {
		t.Errorf("saved limits redirect to %q: without a fragment of its own the browser keeps the form's", ok.header.Get("Location"))
	}

	assertLandsOnForm(t, "new policy", post(tp+"/policies", url.Values{"name": {"export"}, "limit": {"2"}, "window": {"1 minute"}}), "policy-error", "window")
	post(tp+"/policies", url.Values{"name": {"export"}, "limit": {"2"}, "window": {"1h"}}).mustStatus(http.StatusSeeOther)
	assertLandsOnForm(t, "a policy's change", post(tp+"/policies", url.Values{"name": {"export"}, "limit": {"0"}, "window": {"1h"}}), "policy-error", "limit")
	assertLandsOnForm(t, "an override", post(tp+"/policies/export/overrides", url.Values{"pattern": {"vip-**"}, "limit": {"3"}}), "override-error", "pattern")

	pcsrf := b.csrf("/admin/plans")
	p := b.post("/admin/plans/pro", url.Values{"csrf": {pcsrf}, "ip_per_minute": {"1"}, "quota_per_minute": {"x"}, "quota_per_hour": {"1"}, "monthly_checks": {"1"}})
	assertLandsOnForm(t, "a plan", p, "plan-error", "quota_per_minute")

	wcsrf := b.csrf("/admin/webhooks/evt_held")
	p = b.post("/admin/webhooks/evt_held/link", url.Values{"csrf": {wcsrf}, "tenant_id": {"00000000-0000-0000-0000-000000000000"}})
	assertLandsOnForm(t, "linking a customer", p, "link-customer-error", "tenant_id")
	if !strings.Contains(p.text("link-customer-error"), "No tenant has the ID") {
		t.Errorf("link error %q", p.text("link-customer-error"))
	}
}
