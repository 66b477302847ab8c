package blackbox

import (
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleOfADisabledWorkspace: once the operator disables tenant A
// (the CLI), A's member's open session ends at its next request, on a page
// that says the workspace is disabled, and stays ended; signing in with
// the right password is refused with that message, while a wrong password
// is told only that it is wrong; tenant B's member is not touched; once A
// is enabled, its member signs in again.
func TestConsoleOfADisabledWorkspace(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_DEV=1")
	a, a2, b := newBrowser(t, in.base), newBrowser(t, in.base), newBrowser(t, in.base)
	// B first: the mailbox's newest mail is then A's confirmation.
	consoleSignUp(t, b, "owner@b.example", "Bravo")
	consoleSignUp(t, a, "owner@a.example", "Acme")
	login := a2.get("/console/login")
	if p := a2.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}}); p.status != 200 || !strings.Contains(p.body, `data-testid="keys"`) {
		t.Fatalf("A's second session before: %d %s", p.status, p.body)
	}
	tenantA := tenantOf(t, dsn, "owner@a.example")

	cli(t, dsn, nil, "tenants", "disable", tenantA, "--reason", "unpaid invoices 2026-11")
	// The confirmation of A's address, with A's first session's cookie:
	// the live key is shown once all the same, and refused by the API.
	u, err := url.Parse(strings.ReplaceAll(mailLink.FindString(a.get("/console/dev/mailbox").body), "&amp;", "&"))
	if err != nil {
		t.Fatal(err)
	}
	confirm := a.get(u.RequestURI())
	token := tokenBox.FindStringSubmatch(confirm.body)
	if token == nil {
		t.Fatalf("the mailbox's link: %d %s", confirm.status, confirm.body)
	}
	done := a.post("/console/confirm", confirm, url.Values{"token": {token[1]}})
	live := liveKey.FindString(done.body)
	if done.status != 200 || live == "" {
		t.Fatalf("A's confirmation while disabled: %d %s", done.status, done.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", live, nil); c.status != 403 || problemType(c) != tenantDisabledType {
		t.Fatalf("A's new live key while disabled: %d %s", c.status, c.body)
	}
	p := a2.get("/console/keys")
	if p.status != 403 || !strings.Contains(p.body, "This workspace is disabled") || !strings.Contains(p.body, "you are signed out") {
		t.Fatalf("A's open session after the disable: %d %s", p.status, p.body)
	}
	if strings.Contains(p.body, "unpaid invoices") {
		t.Errorf("the member is shown the operator's reason: %s", p.body)
	}
	for name, br := range map[string]*browser{"first": a, "second": a2} {
		if p := br.get("/console"); !strings.Contains(p.url, "/console/login") {
			t.Fatalf("A's %s session after the disable: %d %s", name, p.status, p.url)
		}
	}
	if p := b.get("/console"); p.status != 200 || !strings.Contains(p.body, `data-testid="keys"`) {
		t.Fatalf("B's console while A is disabled: %d %s", p.status, p.body)
	}

	c := newBrowser(t, in.base)
	login = c.get("/console/login")
	if wrong := c.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"wrong password!!"}}); wrong.status != 401 || strings.Contains(wrong.body, "disabled") {
		t.Fatalf("a wrong password for A's member: %d %s", wrong.status, wrong.body)
	}
	login = c.get("/console/login")
	refused := c.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}})
	if refused.status != 403 || !strings.Contains(refused.body, "This workspace is disabled by the operator") {
		t.Fatalf("A's member signing in while disabled: %d %s", refused.status, refused.body)
	}
	if p := c.get("/console"); !strings.Contains(p.url, "/console/login") {
		t.Fatalf("a refused sign-in left a session: %s", p.url)
	}

	cli(t, dsn, nil, "tenants", "enable", tenantA)
	login = c.get("/console/login")
	back := c.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}})
	if back.status != 200 || !strings.Contains(back.body, `data-testid="keys"`) {
		t.Fatalf("A's member signing in after enabling: %d %s", back.status, back.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", live, nil); c.status != 200 {
		t.Fatalf("A's live key after enabling: %d %s", c.status, c.body)
	}
}
