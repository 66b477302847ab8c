package blackbox

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestCeilings drives each of the service's own ceilings (DESIGN §3) to its
// refusal through two instances on one database: the monthly allotment (and
// that management routes and test keys stay out of it), the sandbox
// allotment, the 402 of a paid tenant held to starter, the instance ceiling
// (with the health routes exempt) and the pre-authentication bucket. The
// subtests share the instances and run in order: the last one lowers every
// plan's per-IP limit.
func TestCeilings(t *testing.T) {
	dsn := pgtest.New(t)
	// Both instances believe X-Forwarded-For from the test (127.0.0.1), so
	// that each subtest's callers have client addresses, and per-IP buckets,
	// of their own.
	const proxied = "TOLLGATE_TRUSTED_PROXIES=127.0.0.1/32"
	a, b := start(t, dsn, proxied, patientStore), start(t, dsn, proxied, patientStore)
	cli(t, dsn, nil, "plans", "set", "starter", "--monthly-checks", "5")

	starter := createTenant(t, dsn, "starter")
	// The sandbox subtest makes a thousand checks in a minute, more than
	// starter's quota of 1,200 leaves room for with the polling around them.
	sql(t, dsn, "UPDATE tenants SET quota_per_minute = 100000 WHERE id = $1", starter.TenantID)
	live := apiUser{t: t, in: a, key: starter.LiveKey, ip: docIP(0, 1)}

	t.Run("allotment", func(t *testing.T) {
		u := live
		u.t = t
		for _, in := range []*instance{a, b} {
			u.on(in).waitUsage(2*time.Second, "starter's lowered allotment on "+in.base, func(r usageReport) bool {
				return r.ChecksAllotment != nil && *r.ChecksAllotment == 5
			})
		}
		// Managing policies is not checking: none of this counts.
		u.putPolicy("open", map[string]any{"limit": 1000000, "window": "1h"})
		u.on(b).putPolicy("open", map[string]any{"limit": 1000000, "window": "1h"})
		u.putPolicy("other", map[string]any{"limit": 10, "window": "1m"})
		if c := u.call("GET", "/v1/policies", nil); c.status != 200 {
			t.Fatalf("GET /v1/policies: %d %s", c.status, c.body)
		}
		if c := u.call("DELETE", "/v1/policies/other", nil); c.status != 204 {
			t.Fatalf("DELETE /v1/policies/other: %d %s", c.status, c.body)
		}

		// Five checks over both instances, two of them peeks: a peek is not
		// counted by the tenant's policy but is by the ceilings.
		item := map[string]any{"policy": "open", "subject": "s"}
		monthStart, monthEnd := monthBounds(time.Now())
		for i, mode := range []string{"peek", "peek", "", "consume", ""} {
			c := u.on([]*instance{a, b}[i%2]).check(mode, item)
			if ans := checkOf(t, c); !ans.Allowed {
				t.Fatalf("check %d: %s", i+1, c.body)
			}
			// The allotment is the tightest layer by far: its fields are on
			// every allowed answer.
			wantHeaders(t, c.header, map[string]string{
				"RateLimit-Policy": fmt.Sprintf(`"allotment";q=5;w=%d`, int64(monthEnd.Sub(monthStart).Seconds())),
			})
			if rl := c.header.Get("RateLimit"); !strings.HasPrefix(rl, fmt.Sprintf(`"allotment";r=%d;t=`, 4-i)) {
				t.Errorf("check %d: RateLimit %q, want r=%d", i+1, rl, 4-i)
			}
		}

		before := time.Now()
		c := u.on(b).check("", item)
		after := time.Now()
		p := problemOf(t, c, 429)
		wantHeaders(t, c.header, map[string]string{
			"X-RateLimit-Layer": "allotment", "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
		})
		// Retry-After runs to the first of next month, UTC.
		lo, hi := secondsUntil(nextMonth(after), after), secondsUntil(nextMonth(before), before)
		retry, err := strconv.ParseInt(c.header.Get("Retry-After"), 10, 64)
		if err != nil || retry < lo-2 || retry > hi+2 {
			t.Errorf("Retry-After %q, want %d to %d s (until %s)", c.header.Get("Retry-After"), lo, hi, nextMonth(after).Format(time.RFC3339))
		}
		if p["layer"] != "allotment" || p["limit"] != 5.0 || p["remaining"] != 0.0 || p["retry_after_seconds"] != float64(retry) ||
			p["type"] != "https://tollgate.dev/problems/quota-exceeded" {
			t.Errorf("allotment problem: %s", c.body)
		}
		// It names the plan, the cap and the remedy.
		detail, _ := p["detail"].(string)
		for _, want := range []string{"starter", " 5 ", "Upgrade", nextMonth(after).Format(time.RFC3339)} {
			if !strings.Contains(detail, want) {
				t.Errorf("allotment detail %q does not say %q", detail, want)
			}
		}

		// Management routes still answer once the allotment is used up.
		u.putPolicy("open", map[string]any{"limit": 1000000, "window": "1h"})

		r := u.waitUsage(3*time.Second, "five checks and one allotment refusal metered", func(r usageReport) bool {
			return r.ChecksUsed == 5 && r.RefusalsByLayer["allotment"] == 1
		})
		if r.SandboxUsed != 0 || r.Plan != "starter" || r.EffectivePlan != "starter" {
			t.Errorf("usage after live checks: %+v", r)
		}
	})

	t.Run("sandbox", func(t *testing.T) {
		// The same tenant, whose live allotment is used up: its test key draws
		// from the sandbox, never from the live allotment.
		u := live.with(starter.TestKey)
		u.t = t
		item := map[string]any{"policy": "open", "subject": "s"}
		if ans := checkOf(t, u.check("", item)); !ans.Allowed {
			t.Fatalf("test key after the live allotment ran out: %+v", ans)
		}
		// The other 999 of the sandbox's 1,000 come from eight clients at
		// once, each well within starter's 600 a minute per IP.
		var allowed atomic.Int64
		var wg sync.WaitGroup
		const workers = 8
		started := time.Now()
		for w := range workers {
			wg.Go(func() {
				c := u.from(docIP(1, w))
				for i := w; i < 999; i += workers {
					r := c.check("", item)
					var ans checkAnswer
					if r.status == 200 {
						r.json(t, &ans)
					}
					if r.status != 200 || !ans.Allowed || ans.Degraded {
						t.Errorf("sandbox check %d: %d %s", i, r.status, r.body)
						return
					}
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		t.Logf("999 sandbox checks in %s", time.Since(started))
		if allowed.Load() != 999 {
			t.Fatalf("%d of 999 sandbox checks allowed", allowed.Load())
		}
		c := u.on(b).check("", item)
		p := problemOf(t, c, 429)
		wantHeaders(t, c.header, map[string]string{
			"X-RateLimit-Layer": "sandbox", "X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "0",
		})
		if retry, err := strconv.Atoi(c.header.Get("Retry-After")); err != nil || retry <= 0 {
			t.Errorf("Retry-After %q", c.header.Get("Retry-After"))
		}
		if p["layer"] != "sandbox" || p["limit"] != 1000.0 {
			t.Errorf("sandbox problem: %s", c.body)
		}
		r := u.waitUsage(3*time.Second, "sandbox checks metered", func(r usageReport) bool {
			return r.SandboxUsed == 1000 && r.RefusalsByLayer["sandbox"] == 1
		})
		if r.ChecksUsed != 5 || r.SandboxAllotment != 1000 {
			t.Errorf("test keys touched the live allotment: %+v", r)
		}
		// And the live key is still held to its used-up allotment.
		if c := live.on(b).check("", item); c.status != 429 || c.header.Get("X-RateLimit-Layer") != "allotment" {
			t.Errorf("live key after the sandbox checks: %d %s", c.status, c.body)
		}
	})

	t.Run("payment required", func(t *testing.T) {
		pro := createTenant(t, dsn, "pro")
		u := apiUser{t: t, in: a, key: pro.LiveKey, ip: docIP(0, 2)}
		// Put through each instance, so that each applies it at once (a
		// peek to wait for it would count toward the allotment).
		u.putPolicy("open", map[string]any{"limit": 1000000, "window": "1h"})
		u.on(b).putPolicy("open", map[string]any{"limit": 1000000, "window": "1h"})
		sql(t, dsn, "UPDATE tenants SET billing_status = 'unpaid' WHERE id = $1", pro.TenantID)
		for _, in := range []*instance{a, b} {
			u.on(in).waitUsage(time.Second, "unpaid pro held to starter on "+in.base, func(r usageReport) bool {
				return r.EffectivePlan == "starter" && r.ChecksAllotment != nil && *r.ChecksAllotment == 5
			})
		}
		item := map[string]any{"policy": "open", "subject": "s"}
		for i := range 5 {
			if ans := checkOf(t, u.on([]*instance{a, b}[i%2]).check("", item)); !ans.Allowed {
				t.Fatalf("check %d of 5: %+v", i+1, ans)
			}
		}
		c := u.on(b).check("", item)
		p := problemOf(t, c, 402)
		if p["code"] != "payment_required" || p["type"] != "https://tollgate.dev/problems/payment-required" || p["title"] == "" {
			t.Errorf("402 problem: %s", c.body)
		}
		bu, _ := p["billing_url"].(string)
		if pu, err := url.Parse(bu); err != nil || !pu.IsAbs() || !strings.Contains(bu, pro.TenantID) {
			t.Errorf("billing_url %q", bu)
		}
		if c.header.Get("Retry-After") == "" {
			t.Errorf("402 without Retry-After")
		}
		// A starter tenant out of allotment is told to wait, not to pay: see
		// the allotment subtest. This one pays, and is a pro again.
		sql(t, dsn, "UPDATE tenants SET billing_status = 'active' WHERE id = $1", pro.TenantID)
		eventually.True(t, time.Second, "paid tenant admitted again", func() bool {
			return u.check("", item).status == 200
		})
	})

	t.Run("instance ceiling", func(t *testing.T) {
		c := start(t, dsn, "TOLLGATE_INSTANCE_CEILING=5", patientStore)
		nt := createTenant(t, dsn, "pro")
		u := apiUser{t: t, in: c, key: nt.LiveKey}
		eventually.True(t, 5*time.Second, "a policy put through a ceiling of 5 a second", func() bool {
			return u.call("PUT", "/v1/policies/open", map[string]any{"limit": 1000000, "window": "1h"}).status == 200
		})
		item := map[string]any{"policy": "open", "subject": "s"}

		// A burst of 20 at once: the bucket holds 5 and refills 5 a second.
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		began := time.Now()
		for range 20 {
			wg.Go(func() {
				r := u.check("", item)
				switch {
				case r.status == 200:
					ok.Add(1)
				case r.status == 429 && r.header.Get("X-RateLimit-Layer") == "instance":
					refused.Add(1)
				default:
					t.Errorf("burst: %d %v %s", r.status, r.header, r.body)
				}
			})
		}
		wg.Wait()
		took := time.Since(began)
		if most := 5 + 1 + int64(math.Ceil(took.Seconds()*5)); ok.Load() > most || refused.Load() == 0 {
			t.Fatalf("burst of 20 at a ceiling of 5/s over %s: %d allowed (at most %d), %d refused", took, ok.Load(), most, refused.Load())
		}

		// Between two refusals, the bucket is empty: the health routes and
		// the metrics must answer all the same. (A token comes back every
		// 200 ms; if one came back in between, try again.)
		deadline := time.Now().Add(10 * time.Second)
		for {
			first := u.check("", item)
			if first.status != 429 {
				if time.Now().After(deadline) {
					t.Fatalf("no two refusals in a row at a ceiling of 5/s")
				}
				continue
			}
			p := problemOf(t, first, 429)
			wantHeaders(t, first.header, map[string]string{
				"X-RateLimit-Layer": "instance", "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
				"Retry-After": "1", "RateLimit-Policy": `"instance";q=5;w=1`,
			})
			if p["layer"] != "instance" || p["limit"] != 5.0 {
				t.Errorf("instance problem: %s", first.body)
			}
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				if r := do(t, "GET", c.base+path, "", nil); r.status != 200 {
					t.Fatalf("GET %s while the instance ceiling refuses: %d %s", path, r.status, r.body)
				}
			}
			if u.check("", item).status == 429 {
				break
			}
		}
		m := do(t, "GET", c.base+"/metrics", "", nil)
		if !strings.Contains(string(m.body), `tollgate_decisions_total{layer="instance",outcome="refused"}`) {
			t.Errorf("/metrics does not count instance refusals")
		}
	})

	t.Run("pre-authentication bucket", func(t *testing.T) {
		// The bucket before the key is known holds the highest per-IP limit
		// of any plan: lower them all to 10.
		for _, plan := range planNames(t, dsn) {
			cli(t, dsn, nil, "plans", "set", plan, "--ip-per-minute", "10")
		}
		bad := []string{
			"",         // no key
			"nonsense", // not a key at all
			starter.LiveKey[:len(starter.LiveKey)-1] + flip(starter.LiveKey[len(starter.LiveKey)-1]), // a known prefix, the wrong secret
			"tg_live_" + strings.Repeat("A", 40),                                                     // well formed, unknown
		}
		// Each attempt comes from a fresh address: until the change reaches
		// the instance (within a second), all eleven are 401.
		for n := 0; ; n++ {
			if n == 30 {
				t.Fatalf("no refusal by the pre-authentication bucket in 30 attempts over 3 s")
			}
			guesser := apiUser{t: t, in: a, ip: docIP(2, n)}
			var statuses []int
			var last call
			for i := range 11 {
				last = guesser.with(bad[i%len(bad)]).check("", map[string]any{"policy": "open", "subject": "s"})
				statuses = append(statuses, last.status)
			}
			if last.status == 401 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for i, s := range statuses[:10] {
				if s != 401 {
					t.Fatalf("guess %d: %d, want 401 (all: %v)", i+1, s, statuses)
				}
			}
			p := problemOf(t, last, 429)
			wantHeaders(t, last.header, map[string]string{"X-RateLimit-Layer": "ip", "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0"})
			// A sliding window at its limit admits again within two windows.
			if retry, err := strconv.Atoi(last.header.Get("Retry-After")); err != nil || retry <= 0 || retry > 120 {
				t.Errorf("Retry-After %q", last.header.Get("Retry-After"))
			}
			if p["layer"] != "ip" || p["limit"] != 10.0 {
				t.Errorf("pre-authentication problem: %s", last.body)
			}
			// The guesser's address is refused before its key is looked at,
			// a valid key included; another address is not.
			if c := guesser.with(starter.LiveKey).call("GET", "/v1/usage", nil); c.status != 429 || c.header.Get("X-RateLimit-Layer") != "ip" {
				t.Errorf("valid key from the guessing address: %d %s", c.status, c.body)
			}
			if c := guesser.with(starter.LiveKey).from(docIP(2, n+100)).call("GET", "/v1/usage", nil); c.status != 200 {
				t.Errorf("valid key from another address: %d %s", c.status, c.body)
			}
			return
		}
	})
}

// monthBounds returns the calendar month (UTC) of now.
func monthBounds(now time.Time) (start, end time.Time) {
	u := now.UTC()
	start = time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

func nextMonth(now time.Time) time.Time {
	_, end := monthBounds(now)
	return end
}

// secondsUntil is the whole seconds from now to then, rounded up.
func secondsUntil(then, now time.Time) int64 {
	return int64(math.Ceil(then.Sub(now).Seconds()))
}
