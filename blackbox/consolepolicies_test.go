package blackbox

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// consoleTestKey signs a new workspace up in b and returns its test key,
// shown on the page the sign-up lands on.
func consoleTestKey(t *testing.T, b *browser, email, name string) string {
	t.Helper()
	form := b.get("/console/signup")
	home := b.post("/console/signup", form, url.Values{"email": {email}, "password": {"correct horse battery"}, "name": {name}})
	key := testKey.FindString(home.body)
	if home.status != 200 || key == "" {
		t.Fatalf("sign-up of %s: %d %s", email, home.status, home.body)
	}
	return key
}

// putPolicyForm posts the policies page's create form (edit false) or the
// policy's edit page's form (edit true) with fields.
func putPolicyForm(b *browser, fields url.Values, edit bool) page {
	path := "/console/policies"
	if edit {
		path += "/" + url.PathEscape(fields.Get("name"))
	} else {
		fields.Set("new", "1")
	}
	return b.post("/console/policies", b.get(path), fields)
}

// checkOnce is one /v1/check of policy for subject with key: its status
// and, for a 200, whether it was allowed.
func checkOnce(t *testing.T, in *instance, key, policy, subject string) (int, bool) {
	t.Helper()
	c := do(t, "POST", in.base+"/v1/check", key, map[string]any{"items": []map[string]any{{"policy": policy, "subject": subject}}})
	var v struct {
		Allowed bool `json:"allowed"`
	}
	if c.status == 200 {
		c.json(t, &v)
	}
	return c.status, v.Allowed
}

// TestConsolePolicies manages policies from the console against the real
// binary: a policy made through the form counts the tenant's checks, an
// edit changes its limit at the API, a bad field is a 400 page with its
// message next to the field and nothing saved, delete asks on a page of
// its own and then the API answers the policy as unknown, and tenant B's
// policy names in A's addresses neither show nor change B's policy.
func TestConsolePolicies(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1")
	a, b := newBrowser(t, in.base), newBrowser(t, in.base)
	aKey := consoleTestKey(t, a, "a@example.com", "Acme")
	bKey := consoleTestKey(t, b, "b@example.com", "Beta")

	if p := putPolicyForm(a, url.Values{"name": {"search"}, "limit": {"2"}, "window": {"1h"}, "algorithm": {"fixed_window"}, "scope": {"subject"}, "fail_mode": {"open"}}, false); p.status != 200 || !strings.Contains(p.body, `data-label="Name"><code>search</code>`) {
		t.Fatalf("the policy made: %d %s", p.status, p.body)
	}
	for i, want := range []bool{true, true, false} {
		if status, allowed := checkOnce(t, in, aKey, "search", "u1"); status != 200 || allowed != want {
			t.Fatalf("check %d of limit 2: %d allowed %v, want %v", i+1, status, allowed, want)
		}
	}

	// An edit to limit 3 lets the third in at the API.
	edit := a.get("/console/policies/search")
	if edit.status != 200 || !strings.Contains(edit.body, `name="limit" type="text" inputmode="numeric" autocomplete="off" value="2"`) {
		t.Fatalf("the edit page: %d %s", edit.status, edit.body)
	}
	if p := putPolicyForm(a, url.Values{"name": {"search"}, "limit": {"3"}, "window": {"1h"}, "algorithm": {"fixed_window"}, "scope": {"subject"}, "fail_mode": {"open"}}, true); p.status != 200 {
		t.Fatalf("the edit: %d %s", p.status, p.body)
	}
	if status, allowed := checkOnce(t, in, aKey, "search", "u1"); status != 200 || !allowed {
		t.Fatalf("a third check after the limit went to 3: %d %v", status, allowed)
	}

	// A bad field: a 400 page, its message next to it, nothing saved.
	bad := putPolicyForm(a, url.Values{"name": {"search"}, "limit": {"3"}, "window": {"fortnight"}, "algorithm": {"fixed_window"}}, true)
	if bad.status != 400 || !strings.Contains(bad.body, `data-testid="policy-error-window"`) || !strings.Contains(bad.body, `value="fortnight"`) {
		t.Fatalf("a bad window: %d %s", bad.status, bad.body)
	}
	if bad := putPolicyForm(a, url.Values{"name": {"new one"}, "limit": {"5"}}, false); bad.status != 400 || !strings.Contains(bad.body, `data-testid="policy-error-name"`) {
		t.Fatalf("a bad name: %d %s", bad.status, bad.body)
	}
	if bad := putPolicyForm(a, url.Values{"name": {"other"}, "limit": {"-1"}}, false); bad.status != 400 || !strings.Contains(bad.body, `data-testid="policy-error-limit"`) {
		t.Fatalf("a bad limit: %d %s", bad.status, bad.body)
	}
	var got struct {
		Policies []struct {
			Name   string `json:"name"`
			Limit  int64  `json:"limit"`
			Window string `json:"window"`
		} `json:"policies"`
	}
	do(t, "GET", in.base+"/v1/policies", aKey, nil).json(t, &got)
	if len(got.Policies) != 1 || got.Policies[0].Limit != 3 || got.Policies[0].Window != "1h" {
		t.Fatalf("the API's policies after the refused forms: %+v", got.Policies)
	}

	// Tenant B's policy of another name: A's addresses of it are 404s,
	// A's form of that name makes A's own, and B's stays as it was.
	putPolicyForm(b, url.Values{"name": {"upload"}, "limit": {"1"}, "window": {"1m"}}, false)
	for _, path := range []string{"/console/policies/upload", "/console/policies/upload/delete"} {
		if p := a.get(path); p.status != 404 || strings.Contains(p.body, `value="1m"`) {
			t.Fatalf("A's GET %s of B's policy: %d %s", path, p.status, p.body)
		}
	}
	if p := a.post("/console/policies/upload/delete", a.get("/console/policies"), url.Values{}); p.status != 404 {
		t.Fatalf("A's delete of B's policy: %d %s", p.status, p.body)
	}
	putPolicyForm(a, url.Values{"name": {"upload"}, "limit": {"50"}, "window": {"1h"}}, false)
	if status, allowed := checkOnce(t, in, bKey, "upload", "x"); status != 200 || !allowed {
		t.Fatalf("B's first check: %d %v", status, allowed)
	}
	if status, allowed := checkOnce(t, in, bKey, "upload", "x"); status != 200 || allowed {
		t.Fatalf("B's second check, limit 1 still: %d %v", status, allowed)
	}

	// Delete: a page that asks, then the post; the API forgets the policy.
	ask := a.get("/console/policies/search/delete")
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="delete-form"`) {
		t.Fatalf("the delete page: %d %s", ask.status, ask.body)
	}
	if status, allowed := checkOnce(t, in, aKey, "search", "u2"); status != 200 || !allowed {
		t.Fatalf("asking deleted nothing: %d %v", status, allowed)
	}
	if p := a.post("/console/policies/search/delete", ask, url.Values{}); p.status != 200 || strings.Contains(p.body, `<code>search</code>`) {
		t.Fatalf("deleted: %d %s", p.status, p.body)
	}
	if status, _ := checkOnce(t, in, aKey, "search", "u2"); status != 400 {
		t.Fatalf("a check of the deleted policy: %d", status)
	}
	if p := a.post("/console/policies/search/delete", ask, url.Values{}); p.status != 404 {
		t.Fatalf("deleted twice: %d", p.status)
	}
}

// tryForm posts a policy's "Try it" form.
func tryForm(b *browser, name, subject, cost, mode string) page {
	path := "/console/policies/" + name
	return b.post(path+"/try", b.get(path), url.Values{"subject": {subject}, "cost": {cost}, "mode": {mode}})
}

// tryRemaining is the remaining count a "Try it" answer shows.
var tryRemaining = regexp.MustCompile(`data-testid="try-remaining">(\d+)<`)

// TestConsolePolicyTryAndUnlock tries a policy from its console page and
// unlocks a subject against the real binary: on the live counters a
// subject used 2 of 3 shows remaining 1, with the RateLimit headers the
// API would send, however often it is tried (a peek counts nothing), the
// sandbox's counter apart; a bad cost or a missing subject is a 400 on the
// form; unlocking clears the subject's counter, audited with the member's
// email and never the subject; another tenant's policy name in the try
// and unlock addresses is a 404 that leaves its counters as they were.
func TestConsolePolicyTryAndUnlock(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_DEV=1")
	a, b := newBrowser(t, in.base), newBrowser(t, in.base)
	consoleTestKey(t, a, "a@example.com", "Acme")
	consoleConfirm(t, a) // the newest mail of the mailbox: before B signs up
	bKey := consoleTestKey(t, b, "b@example.com", "Beta")
	p, live := createKey(a, "prod", "live", "none")
	if live == "" {
		t.Fatalf("no live key: %d %s", p.status, p.body)
	}
	putPolicyForm(a, url.Values{"name": {"api"}, "limit": {"3"}, "window": {"1h"}}, false)
	for range 2 {
		if status, allowed := checkOnce(t, in, live, "api", "alice"); status != 200 || !allowed {
			t.Fatalf("a check of alice: %d %v", status, allowed)
		}
	}
	for range 3 {
		p := tryForm(a, "api", "alice", "1", "live")
		if m := tryRemaining.FindStringSubmatch(p.body); p.status != 200 || m == nil || m[1] != "1" {
			t.Fatalf("try alice used 2 of 3: %d %s", p.status, p.body)
		}
		if !strings.Contains(p.body, `RateLimit-Policy: &#34;api&#34;;q=3;w=3600`) || !strings.Contains(p.body, `RateLimit: &#34;api&#34;;r=1;t=`) {
			t.Fatalf("try's headers: %s", p.body)
		}
	}
	if p := tryForm(a, "api", "alice", "1", "test"); !strings.Contains(p.body, `data-testid="try-remaining">3<`) {
		t.Fatalf("the sandbox's counter of alice: %d %s", p.status, p.body)
	}
	if status, allowed := checkOnce(t, in, live, "api", "alice"); status != 200 || !allowed {
		t.Fatalf("alice's third check after the tries: %d %v", status, allowed)
	}
	if p := tryForm(a, "api", "alice", "1", "live"); !strings.Contains(p.body, `data-testid="try-remaining">0<`) || !strings.Contains(p.body, "Retry-After: ") {
		t.Fatalf("try alice used 3 of 3: %d %s", p.status, p.body)
	}
	if p := tryForm(a, "api", "alice", "two", "live"); p.status != 400 || !strings.Contains(p.body, `data-testid="try-error"`) {
		t.Fatalf("a cost not a number: %d %s", p.status, p.body)
	}
	if p := tryForm(a, "api", "", "1", "live"); p.status != 400 || !strings.Contains(p.body, "subject required") {
		t.Fatalf("no subject: %d %s", p.status, p.body)
	}

	// Unlock alice: her counter starts again.
	edit := a.get("/console/policies/api")
	if p := a.post("/console/policies/api/unlock", edit, url.Values{"subject": {"alice"}, "mode": {"live"}}); p.status != 200 || !strings.Contains(p.body, "The subject is unlocked") {
		t.Fatalf("unlock: %d %s", p.status, p.body)
	}
	if p := tryForm(a, "api", "alice", "1", "live"); !strings.Contains(p.body, `data-testid="try-remaining">3<`) {
		t.Fatalf("try alice after the unlock: %d %s", p.status, p.body)
	}
	if status, allowed := checkOnce(t, in, live, "api", "alice"); status != 200 || !allowed {
		t.Fatalf("alice's check after the unlock: %d %v", status, allowed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var actor, detail string
	eventually.NoError(t, 10*time.Second, "the unlock's audit entry", func() error {
		return conn.QueryRow(ctx, `SELECT actor, detail::text FROM audit WHERE kind = 'counter_reset'`).Scan(&actor, &detail)
	})
	if actor != "a@example.com" || !strings.Contains(detail, `"policy": "api"`) || strings.Contains(detail, "alice") {
		t.Errorf("the unlock's audit entry by %s: %s", actor, detail)
	}

	// B's policy upload, limit 1, used up: A's try and unlock of that name
	// are 404s, and B's counter stays used up.
	putPolicyForm(b, url.Values{"name": {"upload"}, "limit": {"1"}, "window": {"1h"}}, false)
	checkOnce(t, in, bKey, "upload", "x")
	page := a.get("/console/policies")
	for _, path := range []string{"/console/policies/upload/try", "/console/policies/upload/unlock"} {
		if p := a.post(path, page, url.Values{"subject": {"x"}, "mode": {"test"}}); p.status != 404 {
			t.Fatalf("A's POST %s of B's policy: %d %s", path, p.status, p.body)
		}
	}
	if status, allowed := checkOnce(t, in, bKey, "upload", "x"); status != 200 || allowed {
		t.Fatalf("B's second check after A's unlock of its name: %d %v", status, allowed)
	}
}

// TestConsolePolicyOverrides manages a policy's overrides from its console
// page against the real binary: an override made through the form lifts
// its subject's limit at the API and shows in the list, a bad limit is a
// 400 on the form with nothing saved, deleting asks on a page of its own,
// then the API counts the subject by the policy's limit again; another
// tenant's policy name takes no override.
func TestConsolePolicyOverrides(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1")
	a, b := newBrowser(t, in.base), newBrowser(t, in.base)
	aKey := consoleTestKey(t, a, "a@example.com", "Acme")
	bKey := consoleTestKey(t, b, "b@example.com", "Beta")
	putPolicyForm(a, url.Values{"name": {"api"}, "limit": {"1"}, "window": {"1h"}}, false)
	putPolicyForm(b, url.Values{"name": {"upload"}, "limit": {"1"}, "window": {"1h"}}, false)

	edit := a.get("/console/policies/api")
	if p := a.post("/console/policies/api/overrides", edit, url.Values{"pattern": {"vip-*"}, "limit": {"lots"}}); p.status != 400 || !strings.Contains(p.body, `data-testid="override-error"`) {
		t.Fatalf("a bad override limit: %d %s", p.status, p.body)
	}
	p := a.post("/console/policies/api/overrides", edit, url.Values{"pattern": {"vip-*"}, "limit": {"2"}})
	if p.status != 200 || !strings.Contains(p.body, `data-label="Pattern"><code>vip-*</code>`) {
		t.Fatalf("the override made: %d %s", p.status, p.body)
	}
	for i, want := range []bool{true, true, false} {
		if status, allowed := checkOnce(t, in, aKey, "api", "vip-1"); status != 200 || allowed != want {
			t.Fatalf("check %d of vip-1 (override 2): %d %v, want %v", i+1, status, allowed, want)
		}
	}

	// Delete it: a page that asks, then the post.
	ask := a.get("/console/policies/api/overrides/delete?pattern=" + url.QueryEscape("vip-*"))
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="override-delete-form"`) {
		t.Fatalf("the override's delete page: %d %s", ask.status, ask.body)
	}
	if p := a.post("/console/policies/api/overrides/delete", ask, url.Values{"pattern": {"vip-*"}}); p.status != 200 || strings.Contains(p.body, `<code>vip-*</code>`) {
		t.Fatalf("the override deleted: %d %s", p.status, p.body)
	}
	if status, allowed := checkOnce(t, in, aKey, "api", "vip-2"); status != 200 || !allowed {
		t.Fatalf("vip-2's first check: %d %v", status, allowed)
	}
	if status, allowed := checkOnce(t, in, aKey, "api", "vip-2"); status != 200 || allowed {
		t.Fatalf("vip-2's second check, by the policy's limit 1 again: %d %v", status, allowed)
	}
	if p := a.post("/console/policies/api/overrides/delete", ask, url.Values{"pattern": {"vip-*"}}); p.status != 404 {
		t.Fatalf("deleted twice: %d", p.status)
	}

	// B's policy name in A's addresses: 404s, and B's subject keeps its limit.
	if p := a.post("/console/policies/upload/overrides", edit, url.Values{"pattern": {"x"}, "limit": {"100"}}); p.status != 404 {
		t.Fatalf("A's override of B's policy: %d %s", p.status, p.body)
	}
	if p := a.get("/console/policies/upload/overrides/delete?pattern=x"); p.status != 404 {
		t.Fatalf("A's override delete page of B's policy: %d", p.status)
	}
	checkOnce(t, in, bKey, "upload", "x")
	if status, allowed := checkOnce(t, in, bKey, "upload", "x"); status != 200 || allowed {
		t.Fatalf("B's second check of x: %d %v", status, allowed)
	}
}

// TestConsolePolicyBudgetForm: a budget made on the console's form keeps
// its on_expiry, at the API and through an edit sent back as the page
// shows it (the form used to drop on_expiry: "release" became "settle").
func TestConsolePolicyBudgetForm(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1")
	a := newBrowser(t, in.base)
	key := consoleTestKey(t, a, "a@example.com", "Acme")
	fields := url.Values{"name": {"llm"}, "limit": {"1000"}, "window": {"1h"}, "algorithm": {"fixed_window"}, "scope": {"subject"},
		"fail_mode": {"open"}, "unit": {"tokens"}, "on_expiry": {"release"}}
	if p := putPolicyForm(a, fields, false); p.status != 200 {
		t.Fatalf("the budget made: %d %s", p.status, p.body)
	}
	onExpiry := func() string {
		t.Helper()
		c := do(t, "GET", in.base+"/v1/policies/llm", key, nil)
		var v struct {
			Unit     string `json:"unit"`
			OnExpiry string `json:"on_expiry"`
		}
		if c.status != 200 {
			t.Fatalf("GET /v1/policies/llm: %d %s", c.status, c.body)
		}
		c.json(t, &v)
		return v.Unit + " " + v.OnExpiry
	}
	if got := onExpiry(); got != "tokens release" {
		t.Fatalf("the API's unit and on_expiry after the form: %q, want tokens release", got)
	}
	edit := a.get("/console/policies/llm")
	if !regexp.MustCompile(`<option value="release" selected>`).MatchString(edit.body) {
		t.Fatalf("the edit form does not show on_expiry release: %s", edit.body)
	}
	fields.Set("limit", "2000")
	if p := putPolicyForm(a, fields, true); p.status != 200 {
		t.Fatalf("the edit: %d %s", p.status, p.body)
	}
	if got := onExpiry(); got != "tokens release" {
		t.Fatalf("the API's unit and on_expiry after an edit: %q, want tokens release", got)
	}
}
