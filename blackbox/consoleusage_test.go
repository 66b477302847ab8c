package blackbox

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// usagePage polls the usage page of b until it contains every one of
// want (usage and traffic are flushed every half second), and returns it.
func usagePage(t *testing.T, b *browser, want ...string) page {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last page
	for {
		p := b.get("/console/usage")
		if p.status == 200 {
			last = p
		}
		missing := ""
		for _, w := range want {
			if !strings.Contains(p.body, w) {
				missing = w
				break
			}
		}
		if p.status == 200 && missing == "" {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the usage page never showed %q: %d %s", missing, last.status, last.body)
		}
		time.Sleep(time.Second) // the console counts pages per address too
	}
}

// liveChecks makes a live key in b's console and sends n checks of the
// policy with it, returning the key and how many were refused.
func liveChecks(t *testing.T, in *instance, b *browser, policyName string, limit, n int) (string, int) {
	t.Helper()
	p, key := createKey(b, "prod", "live", "none")
	if key == "" {
		t.Fatalf("a live key: %d %s", p.status, p.body)
	}
	putPolicy(t, in, key, policyName, map[string]any{"limit": limit, "window": "1h"})
	refused := 0
	for range n {
		c := check(t, in, key, map[string]any{"policy": policyName, "subject": "user-1"})
		if c.status != 200 {
			t.Fatalf("a check: %d %s", c.status, c.body)
		}
		var ans checkAnswer
		if c.json(t, &ans); !ans.Allowed {
			refused++
		}
	}
	return key, refused
}

// TestConsoleUsage reads the usage page against the real binary: after
// allowed and refused checks with each tenant's live key, each tenant's
// page shows its own counts (the 24-hour chart's summary, the refusals by
// layer, the month against the plan, a budget's reservation) and none of
// the other's; signed out,
// the page sends the browser to sign in.
func TestConsoleUsage(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_DEV=1")
	a, b := newBrowser(t, in.base), newBrowser(t, in.base)
	signUpConfirmed(t, a, dsn, "owner@a.example", "Acme")
	signUpConfirmed(t, b, dsn, "owner@b.example", "Bravo")

	if empty := a.get("/console/usage"); empty.status != 200 || !strings.Contains(empty.body, "No checks in the last 24 hours") ||
		!strings.Contains(empty.body, `data-testid="usage-month"`) || !strings.Contains(empty.body, `href="/console/usage"`) {
		t.Fatalf("the usage page before any check: %d %s", empty.status, empty.body)
	}
	keyA, r := liveChecks(t, in, a, "api", 2, 5)
	if r != 3 {
		t.Fatalf("tenant A: %d of 5 checks refused, want 3", r)
	}
	putPolicy(t, in, keyA, "llm", map[string]any{"limit": 1000, "window": "1h", "unit": "tokens", "scope": "global"})
	if c := do(t, "POST", in.base+"/v1/reservations", keyA, map[string]any{"policy": "llm", "amount": 300}); c.status/100 != 2 {
		t.Fatalf("a reservation: %d %s", c.status, c.body)
	}
	if _, r := liveChecks(t, in, b, "api", 100, 7); r != 0 {
		t.Fatalf("tenant B: %d of 7 checks refused, want 0", r)
	}

	// The reservation is counted as A's sixth check.
	pa := usagePage(t, a, "6 checks in the last 24 hours, 3 refused", "6 checks in the last 30 days, 3 refused", "3 refused requests in all; most by tenant policy (3).", "6 of ",
		"0 tokens spent", "300 tokens reserved", "700 tokens left")
	pb := usagePage(t, b, "7 checks in the last 24 hours, 0 refused", "7 checks in the last 30 days, 0 refused", "7 of ")
	for _, leak := range []string{"7 checks", "Bravo", "7 of "} {
		if strings.Contains(pa.body, leak) {
			t.Fatalf("tenant A's usage page shows B's %q: %s", leak, pa.body)
		}
	}
	for _, leak := range []string{"6 checks", "Acme", "refused requests in all", "6 of ", "llm", "tokens reserved"} {
		if strings.Contains(pb.body, leak) {
			t.Fatalf("tenant B's usage page shows A's %q: %s", leak, pb.body)
		}
	}

	a.post("/console/logout", pa, url.Values{})
	if out := a.get("/console/usage"); !strings.Contains(out.url, "/console/login") {
		t.Fatalf("signed out, the usage page: %d %s", out.status, out.url)
	}
}
