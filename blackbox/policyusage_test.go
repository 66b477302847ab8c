package blackbox

import (
	"bytes"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// policyCounts is one row of a page's checks and refusals per policy, as
// its data-testid cells read.
type policyCounts struct{ checks24h, refusals24h, checks30d, refusals30d string }

// policyRows parses the rows of a page's table of checks and refusals per
// policy (data-testid policy-usage-row), by policy.
func policyRows(t *testing.T, body string) map[string]policyCounts {
	t.Helper()
	root, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	attr := func(n *html.Node, k string) string {
		for _, a := range n.Attr {
			if a.Key == k {
				return a.Val
			}
		}
		return ""
	}
	var find func(n *html.Node, id string) []*html.Node
	find = func(n *html.Node, id string) []*html.Node {
		var out []*html.Node
		if n.Type == html.ElementNode && attr(n, "data-testid") == id {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			out = append(out, find(c, id)...)
		}
		return out
	}
	text := func(n *html.Node, id string) string {
		ns := find(n, id)
		if len(ns) != 1 {
			t.Fatalf("%d elements %q in a policy row", len(ns), id)
		}
		var b strings.Builder
		var walk func(*html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.TextNode {
				b.WriteString(n.Data)
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(ns[0])
		return strings.TrimSpace(b.String())
	}
	out := map[string]policyCounts{}
	for _, r := range find(root, "policy-usage-row") {
		out[attr(r, "data-policy")] = policyCounts{text(r, "policy-checks-24h"), text(r, "policy-refusals-24h"), text(r, "policy-checks-30d"), text(r, "policy-refusals-30d")}
	}
	return out
}

// pollPolicies gets path with b until its policy rows are want, and
// returns the page (policy counts are flushed every two seconds).
func pollPolicies(t *testing.T, b *browser, path string, want map[string]policyCounts) page {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := b.get(path)
		var got map[string]policyCounts
		if p.status == 200 {
			got = policyRows(t, p.body)
			if len(got) == len(want) {
				same := true
				for k, w := range want {
					if got[k] != w {
						same = false
					}
				}
				if same {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed the policies %v: %d, rows %v", path, want, p.status, got)
		}
		time.Sleep(time.Second) // the console counts pages per address
	}
}

// TestPolicyUsagePages: checks of two policies of tenant A, single and
// in batches, through two instances of the real binary on one database
// (both counting into the same hours), then A's console usage page and its
// page on the dashboard show each policy's checks and refusals; a name
// that is not a policy (answered 400) shows nowhere; tenant B's policy
// never shows on A's pages, nor A's on B's.
func TestPolicyUsagePages(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in, in2 := start(t, dsn, "TOLLGATE_DEV=1"), start(t, dsn, "TOLLGATE_DEV=1")
	a, b := newBrowser(t, in.base), newBrowser(t, in.base)
	signUpConfirmed(t, a, dsn, "owner@a.example", "Acme")
	signUpConfirmed(t, b, dsn, "owner@b.example", "Bravo")

	empty := a.get("/console/usage")
	if empty.status != 200 || !strings.Contains(empty.body, `data-testid="console-policy-usage-empty"`) {
		t.Fatalf("the usage page before any check: %d %s", empty.status, empty.body)
	}
	_, keyA := createKey(a, "prod", "live", "none")
	_, keyB := createKey(b, "prod", "live", "none")
	if keyA == "" || keyB == "" {
		t.Fatal("no live keys")
	}
	putPolicy(t, in, keyA, "search", map[string]any{"limit": 1000, "window": "1h"})
	putPolicy(t, in, keyA, "login", map[string]any{"limit": 2, "window": "1h"})
	putPolicy(t, in, keyB, "bravo-only", map[string]any{"limit": 1000, "window": "1h"})

	// search: 4 single checks (two on each instance) and 3 in a batch;
	// login: 3 single checks (the third refused) and 2 in a batch (both
	// refused): search 7 checks, none refused; login 5, 3 refused.
	allowed := func(c call) bool {
		t.Helper()
		if c.status != 200 {
			t.Fatalf("a check: %d %s", c.status, c.body)
		}
		var ans checkAnswer
		c.json(t, &ans)
		return ans.Allowed
	}
	for i, inst := range []*instance{in, in2, in, in2} {
		if !allowed(check(t, inst, keyA, map[string]any{"policy": "search", "subject": "u"})) {
			t.Fatalf("search check %d refused", i)
		}
	}
	for i := range 3 {
		if got := allowed(check(t, in, keyA, map[string]any{"policy": "login", "subject": "u"})); got != (i < 2) {
			t.Fatalf("login check %d: allowed %v", i, got)
		}
	}
	one := func(policy string) map[string]any {
		return map[string]any{"items": []map[string]any{{"policy": policy, "subject": "u"}}}
	}
	batch := do(t, "POST", in2.base+"/v1/check/batch", keyA, map[string]any{"checks": []map[string]any{
		one("search"), one("login"), one("search"), one("login"), one("search"),
	}})
	if batch.status != 200 {
		t.Fatalf("a batch: %d %s", batch.status, batch.body)
	}
	// A name that is not a policy is a 400 and counts nowhere.
	if c := check(t, in, keyA, map[string]any{"policy": "ghost", "subject": "u"}); c.status != 400 {
		t.Fatalf("a check of no policy: %d %s", c.status, c.body)
	}
	for range 2 {
		if !allowed(check(t, in2, keyB, map[string]any{"policy": "bravo-only", "subject": "u"})) {
			t.Fatal("B's check refused")
		}
	}

	wantA := map[string]policyCounts{
		"search": {"7", "0", "7", "0"},
		"login":  {"5", "3", "5", "3"},
	}
	pa := pollPolicies(t, a, "/console/usage", wantA)
	pb := pollPolicies(t, b, "/console/usage", map[string]policyCounts{"bravo-only": {"2", "0", "2", "0"}})
	if strings.Contains(pa.body, "bravo-only") || strings.Contains(pa.body, "ghost") {
		t.Errorf("A's usage page names B's policy or a name that is no policy")
	}
	if strings.Contains(pb.body, "search") || strings.Contains(pb.body, `data-policy="login"`) {
		t.Errorf("B's usage page names A's policies")
	}
	if n := strings.Count(pa.body, `data-testid="policy-charts"`); n != 2 {
		t.Errorf("A's usage page draws %d policies' charts, want 2", n)
	}

	// The dashboard's tenant page shows the same rows.
	admin := exec.Command(binary, "admins", "create", "--email", "ops@example.com")
	admin.Env = environ(dsn)
	admin.Stdin = strings.NewReader("correct horse battery staple\n")
	var errb bytes.Buffer
	admin.Stderr = &errb
	if err := admin.Run(); err != nil {
		t.Fatalf("admins create: %v %s", err, errb.String())
	}
	ops := newBrowser(t, in.base)
	login := ops.get("/admin/login")
	if p := ops.post("/admin/login", login, url.Values{"email": {"ops@example.com"}, "password": {"correct horse battery staple"}}); p.status != 200 || strings.Contains(p.url, "/admin/login") {
		t.Fatalf("operator sign-in: %d %s", p.status, p.url)
	}
	list := ops.get("/admin/tenants?q=Acme")
	m := regexp.MustCompile(`/admin/tenants/([0-9a-f-]{36})`).FindStringSubmatch(list.body)
	if m == nil {
		t.Fatalf("no link to Acme in the tenant list: %s", list.body)
	}
	pd := pollPolicies(t, ops, "/admin/tenants/"+m[1], wantA)
	if strings.Contains(pd.body, "bravo-only") {
		t.Errorf("A's dashboard page names B's policy")
	}
}
