package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestCreateNamedKeyWithExpiry: the tenant page creates a key with a name
// and an expiry, as `tollgate keys create --name --expires` does and with
// its rules (a duration from now, a date or RFC 3339; in the future; a name
// of at most 100 characters). The key is shown once with both, stored with
// both, and audited with both; a mistake is answered on the form, as typed,
// and creates nothing.
func TestCreateNamedKeyWithExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, before := e.tenantWith("Acme Rockets", tenant.PlanPro)
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	csrf := b.csrf(tp)
	create := func(form url.Values) page {
		t.Helper()
		form.Set("csrf", csrf)
		return b.post(tp+"/keys", form)
	}

	for _, c := range []struct {
		form       url.Values
		field, err string
	}{
		{url.Values{"mode": {"live"}, "name": {strings.Repeat("n", 101)}}, "name", "Not created: name must be 1 to 100 characters."},
		{url.Values{"mode": {"live"}, "name": {"  "}}, "name", "Not created: name must not be blank."},
		{url.Values{"mode": {"live"}, "name": {"ok"}, "expires_at": {"soon"}}, "expires_at", `Not created: expires_at "soon" is neither a duration`},
		{url.Values{"mode": {"test"}, "name": {"ok"}, "expires_at": {"2001-01-01"}}, "expires_at", "Not created: expires_at must be in the future."},
	} {
		p := create(c.form)
		assertLandsOnForm(t, "key "+c.form.Encode(), p, "key-error", c.field)
		if got := p.text("key-error"); !strings.HasPrefix(got, c.err) {
			t.Errorf("%s: error %q, want %q", c.form.Encode(), got, c.err)
		}
		f := p.one("create-key-form")
		kept := find(f, func(n *html.Node) bool { return attr(n, "name") == "expires_at" || attr(n, "name") == "name" })
		for _, n := range kept {
			if want := c.form.Get(attr(n, "name")); attr(n, "value") != want {
				t.Errorf("%s: %s shows %q, want %q as typed", c.form.Encode(), attr(n, "name"), attr(n, "value"), want)
			}
		}
		if len(p.all("new-key")) != 0 {
			t.Errorf("%s: a refused form shows a new key", c.form.Encode())
		}
	}
	if ks, _ := e.tenants.Keys(ctx, acme.ID); len(ks) != len(before) {
		t.Fatalf("refused forms created %d keys", len(ks)-len(before))
	}

	p := create(url.Values{"mode": {"test"}, "name": {"checkout service"}, "expires_at": {"90d"}}).mustStatus(http.StatusOK)
	raw := p.text("new-key-value")
	if !strings.HasPrefix(raw, "tg_test_") {
		t.Fatalf("new key %q", raw)
	}
	k, err := e.tenants.KeyByPrefix(ctx, strings.Split(raw, "_")[2])
	if err != nil {
		t.Fatal(err)
	}
	want := time.Now().AddDate(0, 0, 90)
	if k.Name != "checkout service" || k.ExpiresAt == nil || k.ExpiresAt.Sub(want).Abs() > time.Minute || !k.Test {
		t.Fatalf("stored %+v, want test key \"checkout service\" expiring about %s", k, want)
	}
	if got := p.text("new-key"); !strings.Contains(got, "checkout service") || !strings.Contains(got, "expires "+k.ExpiresAt.UTC().Format("2006-01-02 15:04")) {
		t.Errorf("the new key says %q, want its name and expiry", got)
	}
	// Landing: the new key shows where the form is.
	if form := formOf(p.one("create-key")); form == nil || !strings.Contains(attr(form, "action"), "#") ||
		!contains(byID(p.root, strings.SplitN(attr(form, "action"), "#", 2)[1]), p.one("new-key")) {
		t.Errorf("the new key is not where the browser lands after creating it")
	}
	es, _ := e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kind: "key_created"})
	if len(es) != 1 || es[0].Actor != "ops@example.com" || es[0].Detail["name"] != "checkout service" ||
		es[0].Detail["expires_at"] != k.ExpiresAt.UTC().Format(time.RFC3339) || es[0].Detail["test"] != true {
		t.Errorf("audit %+v", es)
	}

	// A date is midnight UTC; an unnamed key without expiry is as before.
	create(url.Values{"mode": {"live"}, "expires_at": {"2099-01-31"}}).mustStatus(http.StatusOK)
	create(url.Values{"mode": {"live"}}).mustStatus(http.StatusOK)
	ks, _ := e.tenants.Keys(ctx, acme.ID)
	dated, plain := ks[len(ks)-2], ks[len(ks)-1]
	if dated.ExpiresAt == nil || !dated.ExpiresAt.Equal(time.Date(2099, 1, 31, 0, 0, 0, 0, time.UTC)) || dated.Name != "" {
		t.Errorf("dated key %+v", dated)
	}
	if plain.ExpiresAt != nil || plain.Name != "" || plain.Test {
		t.Errorf("plain key %+v", plain)
	}
}
