package blackbox

import (
	"net/url"
	"strings"
	"testing"

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
