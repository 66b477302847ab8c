package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/audit"
)

// TestOperatorAddsAnAdmin: the Admins page lists who may sign in and adds
// an admin as `tollgate admins create` does (admin.Create: the email
// normalised, the password's length, a taken email refused), the password
// typed twice. The new admin signs in with it; the change is audited
// with the admin who made it, and never holds the password. A mistake is
// answered on the form, the email kept and the passwords not.
func TestOperatorAddsAnAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	b := e.browser()
	b.signIn("ops@example.com")
	p := b.get("/admin/admins").mustStatus(http.StatusOK)
	assertLabelled(t, p)
	if got := p.text("nav-admins"); got != "Admins" {
		t.Errorf("menu entry %q", got)
	}
	if got := rowsText(p.one("admins")); !strings.Contains(got, "ops@example.com") {
		t.Errorf("admins listed: %q", got)
	}
	csrf := p.inputValue("csrf")
	const newPassword = "a long enough password"
	if r := b.post("/admin/admins", url.Values{"email": {"cfo@example.com"}, "password": {newPassword}, "password_again": {newPassword}}); r.status != http.StatusForbidden {
		t.Errorf("without the form's token: %d, want 403", r.status)
	}
	for _, c := range []struct {
		form       url.Values
		field, err string
	}{
		{url.Values{"email": {"not an address"}, "password": {newPassword}, "password_again": {newPassword}}, "email", "Not added: email must be an address such as ops@example.com."},
		{url.Values{"email": {"cfo@example.com"}, "password": {"short"}, "password_again": {"short"}}, "password", "Not added: password must be 12 to 1024 characters."},
		{url.Values{"email": {"cfo@example.com"}, "password": {newPassword}, "password_again": {newPassword + "!"}}, "password_again", "Not added: the two passwords differ."},
		{url.Values{"email": {" OPS@example.com "}, "password": {newPassword}, "password_again": {newPassword}}, "email", "Not added: ops@example.com already has an account; change its password with `tollgate admins set-password --email ops@example.com`."},
	} {
		c.form.Set("csrf", csrf)
		p := b.post("/admin/admins", c.form)
		assertLandsOnForm(t, c.form.Get("email"), p, "new-admin-error", c.field)
		if got := p.text("new-admin-error"); got != c.err {
			t.Errorf("%s: error %q, want %q", c.form.Get("email"), got, c.err)
		}
		for _, n := range find(p.one("new-admin-form"), func(n *html.Node) bool { return n.Data == "input" }) {
			switch attr(n, "name") {
			case "email":
				if attr(n, "value") != c.form.Get("email") {
					t.Errorf("the email shows %q, want it as typed", attr(n, "value"))
				}
			case "password", "password_again":
				if attr(n, "value") != "" {
					t.Errorf("the form shows a password back")
				}
			}
		}
	}

	p = b.post("/admin/admins", url.Values{"csrf": {csrf}, "email": {" CFO@Example.com"}, "password": {newPassword}, "password_again": {newPassword}}).mustStatus(http.StatusSeeOther)
	after := b.get(p.header.Get("Location")).mustStatus(http.StatusOK)
	if got := rowsText(after.one("admins")); !strings.Contains(got, "cfo@example.com") || after.text("flash") == "" {
		t.Errorf("after adding: admins %q, flash %q", got, after.text("flash"))
	}
	cfo := e.browser()
	p = cfo.post("/admin/login", url.Values{"csrf": {cfo.csrf("/admin/login")}, "email": {"cfo@example.com"}, "password": {newPassword}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("the new admin signs in: %d", p.status)
	}
	es, _ := e.audit.List(ctx, audit.Filter{Kind: "admin_created"})
	if len(es) != 1 || es[0].Actor != "ops@example.com" || es[0].Detail["email"] != "cfo@example.com" {
		t.Fatalf("audit %+v", es)
	}
	for k, v := range es[0].Detail {
		if strings.Contains(k+" "+strings.ToLower(textOfValue(v)), "password") || strings.Contains(textOfValue(v), newPassword) {
			t.Errorf("the audit entry holds %s: %v", k, v)
		}
	}
}

func textOfValue(v any) string {
	s, _ := v.(string)
	return s
}
