package blackbox

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

var (
	newKeyValue = regexp.MustCompile(`data-testid="new-key">(tg_(?:live|test)_[A-Za-z0-9_]+)<`)
	revokeLink  = regexp.MustCompile(`href="/console/keys/(key_[A-Za-z0-9]+)/revoke"`)
)

// consoleSignUp signs a new workspace up in b (a development Tollgate)
// and confirms its address through the development mailbox.
func consoleSignUp(t *testing.T, b *browser, email, name string) {
	t.Helper()
	form := b.get("/console/signup")
	if home := b.post("/console/signup", form, url.Values{"email": {email}, "password": {"correct horse battery"}, "name": {name}}); home.status != 200 {
		t.Fatalf("sign-up of %s: %d %s", email, home.status, home.body)
	}
}

// consoleConfirm confirms the member signed in to b through the link of
// the newest mail of the development mailbox.
func consoleConfirm(t *testing.T, b *browser) {
	t.Helper()
	box := b.get("/console/dev/mailbox")
	u, err := url.Parse(strings.ReplaceAll(mailLink.FindString(box.body), "&amp;", "&"))
	if err != nil {
		t.Fatal(err)
	}
	confirm := b.get(u.RequestURI())
	token := tokenBox.FindStringSubmatch(confirm.body)
	if token == nil {
		t.Fatalf("the mailbox's link: %d %s", confirm.status, confirm.body)
	}
	if done := b.post("/console/confirm", confirm, url.Values{"token": {token[1]}}); !liveKey.MatchString(done.body) {
		t.Fatalf("confirmed: %d %s", done.status, done.body)
	}
}

// graceEnd is how the keys page writes an hour after t.
func graceEnd(t time.Time) string {
	return `data-label="Expires" class="when">` + t.Add(time.Hour).UTC().Format("2006-01-02 15:04 UTC") + "<"
}

// createKey posts the keys page's form and returns the answer and the key
// shown once, if any.
func createKey(b *browser, name, kind, expires string) (page, string) {
	keys := b.get("/console/keys")
	p := b.post("/console/keys", keys, url.Values{"name": {name}, "kind": {kind}, "expires": {expires}})
	m := newKeyValue.FindStringSubmatch(p.body)
	if m == nil {
		return p, ""
	}
	return p, m[1]
}

// keyIDOf returns the ID of the key listed as name on the keys page.
func keyIDOf(t *testing.T, b *browser, name string) string {
	t.Helper()
	keys := b.get("/console/keys")
	for _, row := range strings.Split(keys.body, `data-testid="key-row"`)[1:] {
		if strings.Contains(row, `data-label="Name">`+name+`<`) {
			if m := revokeLink.FindStringSubmatch(row); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no active key %q on the keys page: %s", name, keys.body)
	return ""
}

// TestConsoleKeys manages keys from the console's keys page against the
// real binary: a live key only once the address is confirmed, a new key's
// value shown once and working with the API, revoking (a confirmation
// page, then the post) that stops it, rolling that gives a new key of the
// same name and kind while the old one keeps working through its grace
// (its end is tested in pgstore's TestShortenKeyExpiry on an injected
// clock), another tenant's key id a 404 in every revoke and roll address,
// and each change in the page's audit list.
func TestConsoleKeys(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1")
	a := newBrowser(t, in.base)
	consoleSignUp(t, a, "a@example.com", "Acme")

	if p, v := createKey(a, "prod", "live", "none"); p.status != 403 || v != "" || !strings.Contains(p.body, "Confirm your email") {
		t.Fatalf("a live key before confirmation: %d %q %s", p.status, v, p.body)
	}
	p, ci := createKey(a, "ci", "test", "30")
	if p.status != 200 || !strings.HasPrefix(ci, "tg_test_") {
		t.Fatalf("a test key: %d %s", p.status, p.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", ci, nil); c.status != 200 {
		t.Fatalf("the new test key with the API: %d %s", c.status, c.body)
	}
	if again := a.get("/console/keys"); strings.Contains(again.body, ci) || !strings.Contains(again.body, `data-label="Name">ci<`) {
		t.Fatalf("the keys page shows the value again, or not the key: %s", again.body)
	}
	if p, _ := createKey(a, "bad", "live", "12"); p.status != 400 {
		t.Fatalf("an expiry not offered: %d", p.status)
	}

	consoleConfirm(t, a)
	p, prod := createKey(a, "prod", "live", "90")
	if p.status != 200 || !strings.HasPrefix(prod, "tg_live_") {
		t.Fatalf("a live key once confirmed: %d %s", p.status, p.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", prod, nil); c.status != 200 {
		t.Fatalf("the new live key with the API: %d %s", c.status, c.body)
	}

	// Revoke: a page that asks, then the post.
	prodID := keyIDOf(t, a, "prod")
	ask := a.get("/console/keys/" + prodID + "/revoke")
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="revoke-form"`) {
		t.Fatalf("the revoke page: %d %s", ask.status, ask.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", prod, nil); c.status != 200 {
		t.Fatalf("the key after the revoke page's GET: %d", c.status)
	}
	if done := a.post("/console/keys/"+prodID+"/revoke", ask, url.Values{}); done.status != 200 || !strings.Contains(done.body, `data-testid="flash"`) {
		t.Fatalf("revoked: %d %s", done.status, done.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", prod, nil); c.status != 401 {
		t.Fatalf("the revoked key: %d, want 401", c.status)
	}

	// Roll: a new key of the same name and kind, the old one kept for the
	// grace chosen.
	p, old := createKey(a, "worker", "live", "none")
	if old == "" {
		t.Fatalf("the key to roll: %d %s", p.status, p.body)
	}
	oldID := keyIDOf(t, a, "worker")
	ask = a.get("/console/keys/" + oldID + "/roll")
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="roll-form"`) {
		t.Fatalf("the roll page: %d %s", ask.status, ask.body)
	}
	if bad := a.post("/console/keys/"+oldID+"/roll", ask, url.Values{"grace": {"5m"}}); bad.status != 400 || newKeyValue.MatchString(bad.body) {
		t.Fatalf("a grace not offered: %d", bad.status)
	}
	before := time.Now()
	rolled := a.post("/console/keys/"+oldID+"/roll", ask, url.Values{"grace": {"1h"}})
	ends := []string{graceEnd(before), graceEnd(time.Now())}
	m := newKeyValue.FindStringSubmatch(rolled.body)
	if rolled.status != 200 || m == nil || !strings.HasPrefix(m[1], "tg_live_") || m[1] == old {
		t.Fatalf("rolled: %d %s", rolled.status, rolled.body)
	}
	for _, k := range []string{old, m[1]} {
		if c := do(t, "GET", in.base+"/v1/usage", k, nil); c.status != 200 {
			t.Fatalf("after the roll, %s…: %d", k[:20], c.status)
		}
	}
	after := a.get("/console/keys").body
	if n := strings.Count(after, `data-label="Name">worker<`); n != 2 {
		t.Fatalf("after the roll %d keys named worker, want 2 (old and new)", n)
	}
	for _, row := range strings.Split(after, `data-testid="key-row"`)[1:] {
		if strings.Contains(row, "/console/keys/"+oldID+"/") && !strings.Contains(row, ends[0]) && !strings.Contains(row, ends[1]) {
			t.Fatalf("the rolled key does not expire in an hour (%s): %s", ends[0], row)
		}
	}

	// Another tenant's key: a 404 in every address, and it still works.
	b := newBrowser(t, in.base)
	consoleSignUp(t, b, "b@example.com", "Beta")
	p, bKey := createKey(b, "theirs", "test", "none")
	if bKey == "" {
		t.Fatalf("B's key: %d %s", p.status, p.body)
	}
	bID := keyIDOf(t, b, "theirs")
	form := a.get("/console/keys")
	for _, action := range []string{"revoke", "roll"} {
		path := "/console/keys/" + bID + "/" + action
		if g := a.get(path); g.status != 404 || strings.Contains(g.body, "theirs") {
			t.Fatalf("GET %s of another tenant's key: %d", action, g.status)
		}
		if p := a.post(path, form, url.Values{"grace": {"1h"}}); p.status != 404 || newKeyValue.MatchString(p.body) {
			t.Fatalf("POST %s of another tenant's key: %d", action, p.status)
		}
	}
	if c := do(t, "GET", in.base+"/v1/usage", bKey, nil); c.status != 200 {
		t.Fatalf("B's key after A's attempts: %d", c.status)
	}

	// The audit list: A's key changes, by A, and none of B's.
	_, audit, ok := strings.Cut(a.get("/console/keys").body, `data-testid="key-audit"`)
	if !ok {
		t.Fatal("no audit list on the keys page")
	}
	for _, want := range []string{"key_created", "key_revoked", "key_rolled", "a@example.com", "worker"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit list lacks %s", want)
		}
	}
	if strings.Contains(audit, "theirs") {
		t.Errorf("A's audit list shows B's key: %s", audit)
	}
}
