package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/pgstore"
)

// TestOperatorDisablesAConsoleMember: a tenant made by sign-up shows its
// owner on its page; an operator disables the member (CSRF required),
// which ends the member's sessions at once, and enables it again; another
// tenant's path reaches no member.
func TestOperatorDisablesAConsoleMember(t *testing.T) {
	t.Parallel()
	var members *pgstore.Members
	e := newEnv(t, func(c *dashboard.Config) {
		members = &pgstore.Members{}
		c.Members = members
	})
	*members = *pgstore.NewMembers(e.pool, nil)
	e.admin("ops@example.com")
	ctx := context.Background()
	hash, err := admin.HashPassword("correct horse battery", admin.DefaultArgon2)
	if err != nil {
		t.Fatal(err)
	}
	m, created, _, err := members.SignUp(ctx, "dev@example.com", hash, "Acme Robotics")
	if err != nil {
		t.Fatal(err)
	}
	other, _, _, err := members.SignUp(ctx, "other@example.com", hash, "Other")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := members.CreateSession(ctx, m.TenantID, m.ID, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn("ops@example.com")
	path := "/admin/tenants/" + created.Tenant.ID
	p := b.get(path).mustStatus(http.StatusOK)
	if rows := p.all("member-row"); len(rows) != 1 || !strings.Contains(p.text("members"), "dev@example.com") || p.text("member-state") != "email not confirmed" {
		t.Fatalf("members table %q", p.text("members"))
	}
	action := path + "/members/" + m.ID + "/disable"
	b.post(action, url.Values{}).mustStatus(http.StatusForbidden)
	csrf := b.csrf(path)
	b.post("/admin/tenants/"+other.TenantID+"/members/"+m.ID+"/disable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	if _, _, err := members.SessionMember(ctx, raw); err != nil {
		t.Fatalf("the session after a disable through another tenant: %v", err)
	}
	p = b.post(action, url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	after := b.get(p.header.Get("Location")).mustStatus(http.StatusOK)
	if st := after.text("member-state"); !strings.HasPrefix(st, "disabled") || len(after.all("enable-member")) != 1 {
		t.Errorf("after disabling: state %q", st)
	}
	if _, _, err := members.SessionMember(ctx, raw); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("the disabled member's session: %v, want ErrNotFound", err)
	}
	b.post(path+"/members/"+m.ID+"/enable", url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	if st := b.get(path).mustStatus(http.StatusOK).text("member-state"); st != "email not confirmed" {
		t.Errorf("after enabling: state %q", st)
	}
}
