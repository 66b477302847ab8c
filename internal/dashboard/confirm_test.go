package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestRevokeAndDeleteAskFirst: revoking a key and deleting a policy cannot
// be undone, so the tenant's page does not do them in one click: it links
// to a page of their own (a GET, which changes nothing) that says what will
// happen and posts the change from a button, with a way back. Another
// tenant's key, a revoked key and a policy that is not there have no such
// page.
func TestRevokeAndDeleteAskFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, keys := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	_, otherKeys := e.tenantWith("Other", tenant.PlanStarter)
	policies := pgstore.NewPolicies(e.pool)
	p, _ := policy.Parse("export", []byte(`{"limit":2,"window":"1h"}`))
	if _, err := policies.PutPolicy(ctx, acme.ID, p); err != nil {
		t.Fatal(err)
	}
	o, _ := policy.ParseOverride("vip-*", []byte(`{"limit":9}`))
	if _, err := policies.PutOverride(ctx, acme.ID, "export", o); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	page0 := b.get(tp).mustStatus(http.StatusOK)

	// The tenant's page links to the questions; it posts neither change.
	// Its two keys were made together: which is listed first is not fixed.
	key := keys[0]
	if key.Test {
		key = keys[1]
	}
	revokePath := tp + "/keys/" + key.ID + "/revoke"
	deletePath := tp + "/policies/export/delete"
	for _, c := range []struct{ testid, href string }{{"revoke-key", revokePath}, {"delete-policy", deletePath}} {
		var hrefs []string
		for _, n := range page0.all(c.testid) {
			if n.Data != "a" || formOf(n) != nil {
				t.Errorf("%s is a <%s> in a form, want a link to a page that asks first", c.testid, n.Data)
			}
			hrefs = append(hrefs, attr(n, "href"))
		}
		if !strings.Contains(strings.Join(hrefs, " "), c.href) {
			t.Errorf("%s links to %v, want %s among them", c.testid, hrefs, c.href)
		}
	}

	// The question changes nothing, says what will happen and posts from a
	// button, with the form's token; the way back is the tenant's page.
	ask := b.get(revokePath).mustStatus(http.StatusOK)
	if k, _ := e.tenants.KeyByPrefix(ctx, key.Prefix); k.RevokedAt != nil {
		t.Fatal("asking revoked the key")
	}
	for _, want := range []string{key.ID, "tg_live_" + key.Prefix, "Acme Rockets", "cannot be undone"} {
		if !strings.Contains(textOf(ask.root), want) {
			t.Errorf("the revoke page does not say %q:\n%s", want, textOf(ask.root))
		}
	}
	form := formOf(ask.one("confirm"))
	if form == nil || attr(form, "method") != "post" || attr(form, "action") != revokePath {
		t.Fatalf("the revoke button is not in a form posting to %s", revokePath)
	}
	if href := attr(ask.one("cancel"), "href"); !strings.HasPrefix(href, tp) {
		t.Errorf("cancel goes to %q, want the tenant's page", href)
	}
	b.post(revokePath, url.Values{"csrf": {ask.inputValue("csrf")}}).mustStatus(http.StatusSeeOther)
	if k, _ := e.tenants.KeyByPrefix(ctx, key.Prefix); k.RevokedAt == nil {
		t.Fatal("the confirmed revoke did not revoke")
	}
	// Revoked, it has nothing to ask; another tenant's key is not here.
	if p := b.get(revokePath); p.status != http.StatusConflict || !strings.Contains(p.text("error-message"), "already revoked") {
		t.Errorf("asking again for a revoked key: %d %q, want 409 saying it is already revoked", p.status, p.text("error-message"))
	}
	b.get(tp + "/keys/" + otherKeys[0].ID + "/revoke").mustStatus(http.StatusNotFound)

	ask = b.get(deletePath).mustStatus(http.StatusOK)
	if _, err := policies.GetPolicy(ctx, acme.ID, "export"); err != nil {
		t.Fatalf("asking deleted the policy: %v", err)
	}
	for _, want := range []string{"export", "Acme Rockets", "1 override", "cannot be undone"} {
		if !strings.Contains(textOf(ask.root), want) {
			t.Errorf("the delete page does not say %q:\n%s", want, textOf(ask.root))
		}
	}
	if form := formOf(ask.one("confirm")); form == nil || attr(form, "method") != "post" || attr(form, "action") != deletePath {
		t.Fatalf("the delete button is not in a form posting to %s", deletePath)
	}
	b.post(deletePath, url.Values{"csrf": {ask.inputValue("csrf")}}).mustStatus(http.StatusSeeOther)
	if _, err := policies.GetPolicy(ctx, acme.ID, "export"); !errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("after the confirmed delete: %v", err)
	}
	b.get(deletePath).mustStatus(http.StatusNotFound)
}
