package blackbox

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestCheckAnswers covers what /v1/check answers for a tenant's own
// policies, through two instances on one database: the RateLimit fields of
// allowed answers, peek, global scope, shadow policies, overrides made on
// one instance and applied by the other, and the 400 and 401 answers to bad
// requests.
func TestCheckAnswers(t *testing.T) {
	dsn := pgtest.New(t)
	a, b := start(t, dsn, patientStore), start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: a, key: nt.LiveKey}

	t.Run("rate-limit fields of allowed answers", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicy("tight", map[string]any{"limit": 3, "window": "1m"})
		item := map[string]any{"policy": "tight", "subject": "s"}
		for i := range 3 {
			c := u.check("", item)
			if ans := checkOf(t, c); !ans.Allowed {
				t.Fatalf("check %d: %s", i+1, c.body)
			}
			// Of the pro plan's generous ceilings and this policy, the policy
			// is the tightest.
			wantRateLimit(t, c.header, "tight", 3, 60, int64(2-i), 60)
			if c.header.Get("X-RateLimit-Layer") != "" {
				t.Errorf("allowed answer with X-RateLimit-Layer %q", c.header.Get("X-RateLimit-Layer"))
			}
		}
		// A refusal by the tenant's own policy is an answer, 200, still with
		// the fields, Retry-After agreeing with their t, and no ceiling layer.
		c := u.check("", item)
		ans := checkOf(t, c)
		if ans.Allowed || ans.Items[0].Allowed || ans.Items[0].Remaining != 0 || ans.Items[0].RetryAfterMS <= 0 {
			t.Fatalf("fourth check at a limit of 3: %s", c.body)
		}
		wantRateLimit(t, c.header, "tight", 3, 60, 0, 60)
		if c.header.Get("X-RateLimit-Layer") != "" {
			t.Errorf("policy refusal with a ceiling's layer: %v", c.header)
		}
		wantRetry := strconv.FormatInt(max(1, (ans.Items[0].RetryAfterMS+999)/1000), 10)
		if got := c.header.Get("Retry-After"); got != wantRetry || !strings.HasSuffix(c.header.Get("RateLimit"), ";t="+wantRetry) {
			t.Errorf("policy refusal: Retry-After %q and RateLimit %q, want both %s s (retry_after_ms %d)",
				got, c.header.Get("RateLimit"), wantRetry, ans.Items[0].RetryAfterMS)
		}

		// A tenant whose per-IP limit is the tightest layer sees that layer.
		slow := createTenant(t, dsn, "pro")
		sql(t, dsn, "UPDATE tenants SET rate_limit_per_minute = 5 WHERE id = $1", slow.TenantID)
		s := apiUser{t: t, in: a, key: slow.LiveKey}
		s.putPolicy("open", map[string]any{"limit": 1000000, "window": "1h"})
		c = s.check("", map[string]any{"policy": "open", "subject": "s"})
		checkOf(t, c)
		// The per-IP layer is a sliding window: it is whole again up to two
		// windows later.
		wantRateLimit(t, c.header, "ip", 5, 60, 4, 120)
	})

	t.Run("peek", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicyAll("peeked", map[string]any{"limit": 2, "window": "1h"}, b)
		item := map[string]any{"policy": "peeked", "subject": "s"}
		// A peek says what is left now: the whole limit, each time.
		for i, in := range []*instance{a, b, a} {
			ans := checkOf(t, u.on(in).check("peek", item))
			if !ans.Allowed || !ans.Items[0].Allowed || ans.Items[0].Limit != 2 || ans.Items[0].Remaining != 2 {
				t.Fatalf("peek %d: %+v", i+1, ans)
			}
		}
		// Nothing was consumed: the whole limit is left.
		for i, in := range []*instance{b, a} {
			if ans := checkOf(t, u.on(in).check("consume", item)); !ans.Allowed || ans.Items[0].Remaining != int64(1-i) {
				t.Fatalf("consume %d after three peeks: %+v", i+1, ans)
			}
		}
		if ans := checkOf(t, u.on(b).check("", item)); ans.Allowed {
			t.Fatalf("third consume at a limit of 2: %+v", ans)
		}
		// A peek at a used-up policy says so, and still consumes nothing.
		if ans := checkOf(t, u.check("peek", item)); ans.Allowed || ans.Items[0].RetryAfterMS <= 0 {
			t.Fatalf("peek at a used-up policy: %+v", ans)
		}
		// (That peeks count toward the service's ceilings is in
		// TestCeilings/allotment.)
	})

	t.Run("remaining is what a consume would be admitted for", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicyAll("five", map[string]any{"limit": 5, "window": "1h"}, b)
		u.putPolicyAll("one", map[string]any{"limit": 1, "window": "1h"}, b)
		five, one := map[string]any{"policy": "five", "subject": "s"}, map[string]any{"policy": "one", "subject": "s"}
		if ans := checkOf(t, u.on(a).check("", five, one)); !ans.Allowed || ans.Items[0].Remaining != 4 || ans.Items[1].Remaining != 0 {
			t.Fatalf("first check: %+v, want allowed, remaining 4 and 0", ans)
		}
		// Refused by "one": nothing was counted, so "five" still has its 4,
		// and says so, although it would have allowed alone.
		ans := checkOf(t, u.on(b).check("", five, one))
		if ans.Allowed || !ans.Items[0].Allowed || ans.Items[0].Remaining != 4 || ans.Items[1].Allowed || ans.Items[1].Remaining != 0 {
			t.Fatalf("check refused by one of two items: %+v, want five allowed with 4 remaining, one refused with 0", ans)
		}
		// Two items on one counter in a refused check both say what is left.
		twice := map[string]any{"policy": "five", "subject": "s", "cost": 3}
		ans = checkOf(t, u.on(a).check("", twice, twice))
		if ans.Allowed || !ans.Items[0].Allowed || ans.Items[1].Allowed || ans.Items[0].Remaining != 4 || ans.Items[1].Remaining != 4 {
			t.Fatalf("3 and 3 of the 4 left: %+v, want the second refused, both with 4 remaining", ans)
		}
		// A peek of cost 4 is allowed, of cost 5 not; the 4 are all there.
		for cost, want := range map[int64]bool{4: true, 5: false} {
			ans := checkOf(t, u.on(b).check("peek", map[string]any{"policy": "five", "subject": "s", "cost": cost}))
			if ans.Allowed != want || ans.Items[0].Remaining != 4 {
				t.Fatalf("peek of cost %d: %+v, want allowed %v, remaining 4", cost, ans, want)
			}
		}
		for i := range 4 {
			if ans := checkOf(t, u.on([]*instance{a, b}[i%2]).check("", five)); !ans.Allowed || ans.Items[0].Remaining != int64(3-i) {
				t.Fatalf("consume %d of the 4 left: %+v", i+1, ans)
			}
		}
	})

	t.Run("global scope ignores the subject", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicyAll("errors", map[string]any{"limit": 2, "window": "1h", "scope": "global"}, b)
		u.putPolicy("per-subject", map[string]any{"limit": 1, "window": "1h"})
		for i, it := range []map[string]any{
			{"policy": "errors"}, // a global policy needs no subject
			{"policy": "errors", "subject": "a"},
		} {
			if ans := checkOf(t, u.on([]*instance{a, b}[i]).check("", it)); !ans.Allowed {
				t.Fatalf("global check %d: %+v", i+1, ans)
			}
		}
		for _, subject := range []string{"b", "c"} {
			if ans := checkOf(t, u.check("", map[string]any{"policy": "errors", "subject": subject})); ans.Allowed {
				t.Fatalf("subject %q escaped a global policy used up by others: %+v", subject, ans)
			}
		}
		// A subject policy keeps one counter per subject.
		for _, subject := range []string{"a", "b"} {
			if ans := checkOf(t, u.check("", map[string]any{"policy": "per-subject", "subject": subject})); !ans.Allowed {
				t.Fatalf("subject %q of a subject policy: %+v", subject, ans)
			}
		}
	})

	t.Run("shadow", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicyAll("dark", map[string]any{"limit": 2, "window": "1h", "shadow": true}, b)
		item := map[string]any{"policy": "dark", "subject": "s"}
		for i := range 4 {
			c := u.on([]*instance{a, b}[i%2]).check("", item)
			ans := checkOf(t, c)
			it := ans.Items[0]
			if !ans.Allowed || !it.Shadow || it.Limit != 2 {
				t.Fatalf("shadow check %d: %s", i+1, c.body)
			}
			// Each item says what the policy would have decided: it counts.
			if wouldAllow := i < 2; it.Allowed != wouldAllow || (it.RetryAfterMS > 0) == wouldAllow {
				t.Errorf("shadow check %d at a limit of 2: item %s", i+1, c.body)
			}
		}
		// Beside an enforced policy, a shadow policy that would refuse
		// neither refuses the check nor keeps the enforced policy from
		// counting (shadow items are advisory counter items).
		u.putPolicyAll("enforced", map[string]any{"limit": 2, "window": "1h"}, b)
		enforced := map[string]any{"policy": "enforced", "subject": "s"}
		for i := range 3 {
			c := u.on([]*instance{b, a}[i%2]).check("", item, enforced)
			ans := checkOf(t, c)
			if wantAllowed := i < 2; ans.Allowed != wantAllowed || ans.Items[0].Allowed || !ans.Items[0].Shadow ||
				ans.Items[1].Allowed != wantAllowed || ans.Items[1].Remaining != max(0, int64(1-i)) {
				t.Fatalf("shadow and enforced, check %d at limits of 2: %s", i+1, c.body)
			}
		}
	})

	t.Run("overrides apply on the other instance within a second", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicyAll("o", map[string]any{"limit": 10, "window": "1h"}, b)
		limitOf := func(in *instance, subject string) int64 {
			ans := checkOf(t, u.on(in).check("peek", map[string]any{"policy": "o", "subject": subject}))
			return ans.Items[0].Limit
		}
		// b has the tenant's policies in memory before they change.
		if got := limitOf(b, "user-1"); got != 10 {
			t.Fatalf("limit before any override: %d", got)
		}
		put := func(pattern string, limit int) {
			t.Helper()
			if c := u.call("PUT", "/v1/policies/o/overrides/"+url.PathEscape(pattern), map[string]any{"limit": limit}); c.status != 200 {
				t.Fatalf("PUT override %q: %d %s", pattern, c.status, c.body)
			}
		}
		put("user-*", 2)
		put("user-1*", 3)
		put("user-1", 5)
		want := map[string]int64{"user-1": 5, "user-12": 3, "user-2": 2, "other": 10}
		took := eventually.True(t, time.Second, "overrides applied on the other instance", func() bool {
			for subject, limit := range want {
				if limitOf(b, subject) != limit {
					return false
				}
			}
			return true
		})
		t.Logf("overrides reached the other instance in %s", took)
		// The exact override beats both wildcards; the longer wildcard beats
		// the shorter. Without it, user-1 falls to the longest wildcard.
		if c := u.call("DELETE", "/v1/policies/o/overrides/user-1", nil); c.status != 204 {
			t.Fatalf("DELETE override: %d %s", c.status, c.body)
		}
		eventually.True(t, time.Second, "deleted override gone on the other instance", func() bool {
			return limitOf(b, "user-1") == 3
		})
	})

	t.Run("bad requests", func(t *testing.T) {
		u := u
		u.t = t
		u.putPolicy("p", map[string]any{"limit": 10, "window": "1m"})
		items := func(n int) string {
			return "[" + strings.TrimSuffix(strings.Repeat(`{"policy":"p","subject":"s"},`, n), ",") + "]"
		}
		tests := []struct {
			name, body, field string
			detail            string // what the detail says, when it matters
		}{
			{"unknown policy", `{"items":[{"policy":"p","subject":"s"},{"policy":"nope","subject":"s"}]}`, "items[1].policy", ""},
			{"missing subject", `{"items":[{"policy":"p"}]}`, "items[0].subject", ""},
			{"empty subject", `{"items":[{"policy":"p","subject":""}]}`, "items[0].subject", ""},
			{"subject too long", `{"items":[{"policy":"p","subject":"` + strings.Repeat("s", 513) + `"}]}`, "items[0].subject", ""},
			{"cost 0", `{"items":[{"policy":"p","subject":"s","cost":0}]}`, "items[0].cost", ""},
			{"cost negative", `{"items":[{"policy":"p","subject":"s","cost":-1}]}`, "items[0].cost", ""},
			{"cost too large", `{"items":[{"policy":"p","subject":"s","cost":1000000001}]}`, "items[0].cost", ""},
			{"cost not a number", `{"items":[{"policy":"p","subject":"s","cost":"1"}]}`, "items.cost", "want an integer"},
			{"items not an array", `{"items":"x"}`, "items", "want an array"},
			{"mode not a string", `{"mode":1,"items":[{"policy":"p","subject":"s"}]}`, "mode", "want a string"},
			{"mode", `{"mode":"x","items":[{"policy":"p","subject":"s"}]}`, "mode", ""},
			{"no items", `{"items":[]}`, "items", ""},
			{"items missing", `{}`, "items", ""},
			{"33 items", `{"items":` + items(33) + `}`, "items", ""},
			{"70 KB", `{"items":[{"policy":"p","subject":"` + strings.Repeat("s", 70<<10) + `"}]}`, "body", ""},
			{"not JSON", `items=p`, "body", ""},
			{"empty", ``, "body", ""},
			{"trailing data", `{"items":[{"policy":"p","subject":"s"}]} {}`, "body", ""},
			{"unknown member", `{"items":[{"policy":"p","subject":"s"}],"burst":1}`, "body", ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c := u.with(nt.LiveKey).raw([]byte(tt.body))
				p := problemOf(t, c, 400)
				if p["type"] != "https://tollgate.dev/problems/invalid-request" || p["field"] != tt.field || p["detail"] == "" {
					t.Errorf("problem %s, want field %q", c.body, tt.field)
				}
				// The detail speaks JSON, never Go.
				if d, _ := p["detail"].(string); !strings.Contains(d, tt.detail) || strings.Contains(d, "struct {") {
					t.Errorf("detail %q, want it to say %q", d, tt.detail)
				}
			})
		}
		// 32 items is the most, and fine.
		if c := u.raw([]byte(`{"items":` + items(32) + `}`)); c.status != 200 {
			t.Errorf("32 items: %d %s", c.status, c.body)
		}
		if strings.Contains(a.logs.String(), "request failed") || strings.Contains(a.logs.String(), "panicked") {
			t.Errorf("a bad request was logged as a fault of ours:\n%s", tail(a.logs.String(), 2000))
		}
	})

	t.Run("bad keys", func(t *testing.T) {
		body := map[string]any{"items": []any{map[string]any{"policy": "p", "subject": "s"}}}
		for name, auth := range map[string]string{
			"no header":          "",
			"empty bearer":       "Bearer ",
			"basic":              "Basic " + nt.LiveKey,
			"malformed":          "Bearer tg_live_short",
			"wrong secret":       "Bearer " + nt.LiveKey[:len(nt.LiveKey)-1] + flip(nt.LiveKey[len(nt.LiveKey)-1]),
			"unknown":            "Bearer tg_live_" + strings.Repeat("A", 40),
			"live key as a test": "Bearer " + strings.Replace(nt.LiveKey, "tg_live_", "tg_test_", 1),
		} {
			t.Run(name, func(t *testing.T) {
				var hs []string
				if auth != "" {
					hs = []string{"Authorization", auth}
				}
				for _, path := range []string{"/v1/check", "/v1/usage"} {
					method, b := "POST", any(body)
					if path == "/v1/usage" {
						method, b = "GET", nil
					}
					c := do(t, method, a.base+path, "", b, hs...)
					p := problemOf(t, c, http.StatusUnauthorized)
					if p["type"] != "https://tollgate.dev/problems/unauthorized" {
						t.Errorf("%s: problem %s", path, c.body)
					}
				}
			})
		}
	})
}

// wantRateLimit checks the IETF RateLimit fields of an answer: policy name,
// quota q over w seconds, r remaining, and a reset in 0 to maxReset s.
func wantRateLimit(t *testing.T, h http.Header, name string, q, w, r, maxReset int64) {
	t.Helper()
	if got, want := h.Get("RateLimit-Policy"), fmt.Sprintf("%q;q=%d;w=%d", name, q, w); got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	m := regexp.MustCompile(`^"([^"]+)";r=(\d+);t=(\d+)$`).FindStringSubmatch(h.Get("RateLimit"))
	if m == nil {
		t.Errorf("RateLimit %q", h.Get("RateLimit"))
		return
	}
	reset, _ := strconv.ParseInt(m[3], 10, 64)
	if m[1] != name || m[2] != strconv.FormatInt(r, 10) || reset > maxReset {
		t.Errorf("RateLimit %q, want %q;r=%d;t=0..%d", h.Get("RateLimit"), name, r, maxReset)
	}
}

// flip returns a base62 character other than c.
func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
