package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(attackerEnv) != "" {
		// This process is a load generator another test started.
		os.Exit(attacker())
	}
	bintest.Main(m, &binary)
}

const pepper = "blackbox-pepper-0123456789abcdef0123456789"

// instance is one running `tollgate serve`.
type instance struct {
	base string
	// grpc is where its rate limit service listens, when it was started
	// with one (startWithRLS).
	grpc string
	logs *logbuf.Buffer
	cmd  *exec.Cmd
	srv  *bintest.Server
}

func environ(dsn string, extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dsn,
		"TOLLGATE_PEPPER=" + pepper,
		"TOLLGATE_LOG_FORMAT=text",
	}
	return append(env, extra...)
}

// start runs an instance on dsn and waits until it is ready.
func start(t testing.TB, dsn string, extra ...string) *instance {
	t.Helper()
	s := bintest.Start(t, binary, environ(dsn, extra...))
	return &instance{base: s.URL, logs: s.Logs, cmd: s.Cmd, srv: s}
}

// ready is nil when the server at base answers /readyz with 200.
func ready(base string) error { return bintest.Ready(base) }

func tail(s string, n int) string { return bintest.Tail(s, n) }

// cli runs a tollgate command and decodes its one JSON line into v.
func cli(t testing.TB, dsn string, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = environ(dsn)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tollgate %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	if v != nil {
		if err := json.Unmarshal(out.Bytes(), v); err != nil {
			t.Fatalf("tollgate %s printed %q: %v", strings.Join(args, " "), out.String(), err)
		}
	}
}

type newTenant struct {
	TenantID string `json:"tenant_id"`
	LiveKey  string `json:"live_key"`
	TestKey  string `json:"test_key"`
}

func createTenant(t testing.TB, dsn, plan string) newTenant {
	t.Helper()
	var nt newTenant
	cli(t, dsn, &nt, "tenants", "create", "--name", "blackbox "+plan, "--plan", plan)
	if nt.TenantID == "" || !strings.HasPrefix(nt.LiveKey, "tg_live_") || !strings.HasPrefix(nt.TestKey, "tg_test_") {
		t.Fatalf("tenants create: %+v", nt)
	}
	return nt
}

// call is one HTTP exchange.
type call struct {
	status int
	header http.Header
	body   []byte
}

func (c call) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(c.body, v); err != nil {
		t.Fatalf("answer %d %q: %v", c.status, c.body, err)
	}
}

func do(t testing.TB, method, u, key string, body any, headers ...string) call {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return call{resp.StatusCode, resp.Header, b}
}

type checkAnswer struct {
	Allowed  bool `json:"allowed"`
	Degraded bool `json:"degraded"`
	Items    []struct {
		Policy       string `json:"policy"`
		Allowed      bool   `json:"allowed"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		ResetAt      string `json:"reset_at"`
		RetryAfterMS int64  `json:"retry_after_ms"`
		Shadow       bool   `json:"shadow"`
	} `json:"items"`
}

func putPolicy(t testing.TB, in *instance, key, name string, p map[string]any) {
	t.Helper()
	if c := do(t, "PUT", in.base+"/v1/policies/"+name, key, p); c.status != 200 {
		t.Fatalf("PUT policy %s: %d %s", name, c.status, c.body)
	}
}

func check(t testing.TB, in *instance, key string, items ...map[string]any) call {
	t.Helper()
	return do(t, "POST", in.base+"/v1/check", key, map[string]any{"items": items})
}

func sql(t testing.TB, dsn, stmt string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestExactAcrossTwoInstances races checks at one subject through two
// instances: the policy admits exactly its limit.
func TestExactAcrossTwoInstances(t *testing.T) {
	dsn := pgtest.New(t)
	// A patient store: under a loaded test machine the 50 ms default would
	// let fail-open answers through, which is degraded mode, not this test.
	exactOverInstances(t, dsn, start(t, dsn, patientStore), start(t, dsn, patientStore))
}

// exactOverInstances puts a policy with a limit of 50 on the first
// instance, waits until every instance has it, then races 200 checks of one
// subject over the instances in turn: exactly 50 are admitted, none is
// degraded, and every refusal says when to retry.
func exactOverInstances(t *testing.T, dsn string, ins ...*instance) {
	t.Helper()
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, ins[0], nt.LiveKey, "sign-in-ip", map[string]any{"limit": 50, "window": "1h", "algorithm": "fixed_window"})
	for _, in := range ins[1:] {
		eventually.True(t, time.Second, "policy visible on another instance", func() bool {
			return do(t, "GET", in.base+"/v1/policies/sign-in-ip", nt.LiveKey, nil).status == 200
		})
	}
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			c := check(t, ins[i%len(ins)], nt.LiveKey, map[string]any{"policy": "sign-in-ip", "subject": "203.0.113.7"})
			if c.status != 200 {
				t.Errorf("check: %d %s", c.status, c.body)
				return
			}
			var ans checkAnswer
			c.json(t, &ans)
			if ans.Degraded {
				t.Errorf("degraded answer: %s", c.body)
			}
			if ans.Allowed {
				allowed.Add(1)
			} else {
				refused.Add(1)
				if ans.Items[0].Remaining != 0 || ans.Items[0].RetryAfterMS <= 0 {
					t.Errorf("refused item: %+v", ans.Items[0])
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 50 || refused.Load() != 150 {
		t.Fatalf("200 checks at limit 50 over %d instances: %d allowed, %d refused", len(ins), allowed.Load(), refused.Load())
	}
}

// TestQuotaRefusalShape drives a tenant past its per-minute quota and
// checks every header and the problem body.
func TestQuotaRefusalShape(t *testing.T) {
	dsn := pgtest.New(t)
	a, b := start(t, dsn), start(t, dsn)
	nt := createTenant(t, dsn, "starter")
	sql(t, dsn, "UPDATE tenants SET quota_per_minute = 20 WHERE id = $1", nt.TenantID)
	putPolicy(t, a, nt.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})
	var first call
	for i := range 40 {
		in := []*instance{a, b}[i%2]
		c := check(t, in, nt.LiveKey, map[string]any{"policy": "open", "subject": "x"})
		if c.status == 429 {
			first = c
			break
		}
	}
	if first.status != 429 {
		t.Fatalf("no 429 within 40 checks at a quota of 20 a minute")
	}
	h := first.header
	for name, want := range map[string]string{
		"X-RateLimit-Layer": "quota", "X-RateLimit-Scope": "minute", "X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "0",
		"Content-Type": "application/problem+json",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if h.Get("Retry-After") == "" || !strings.HasPrefix(h.Get("RateLimit-Policy"), `"quota";q=20;w=60`) || !strings.HasPrefix(h.Get("RateLimit"), `"quota";r=0;t=`) {
		t.Errorf("rate-limit fields: Retry-After %q, RateLimit-Policy %q, RateLimit %q", h.Get("Retry-After"), h.Get("RateLimit-Policy"), h.Get("RateLimit"))
	}
	var p map[string]any
	first.json(t, &p)
	if p["layer"] != "quota" || p["limit"] != float64(20) || p["remaining"] != float64(0) || p["retry_after_seconds"] == nil {
		t.Errorf("problem body: %v", p)
	}
}

// TestForwardedForCannotEscapeIPLimit rotates X-Forwarded-For: without a
// trusted proxy it changes nothing; behind one, each client has its bucket.
func TestForwardedForCannotEscapeIPLimit(t *testing.T) {
	dsn := pgtest.New(t)
	direct := start(t, dsn)
	proxied := start(t, dsn, "TOLLGATE_TRUSTED_PROXIES=127.0.0.1/32")
	nt := createTenant(t, dsn, "starter")
	sql(t, dsn, "UPDATE tenants SET rate_limit_per_minute = 5 WHERE id = $1", nt.TenantID)
	putPolicy(t, direct, nt.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})

	refusedAt := 0
	for i := range 12 {
		c := do(t, "POST", direct.base+"/v1/check", nt.LiveKey, map[string]any{"items": []any{map[string]any{"policy": "open", "subject": "s"}}},
			"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		if c.status == 429 {
			if c.header.Get("X-RateLimit-Layer") != "ip" || c.header.Get("X-RateLimit-Limit") != "5" {
				t.Fatalf("refusal: layer %q limit %q", c.header.Get("X-RateLimit-Layer"), c.header.Get("X-RateLimit-Limit"))
			}
			refusedAt = i
			break
		}
	}
	if refusedAt == 0 {
		t.Fatalf("rotating X-Forwarded-For escaped the per-IP limit of 5 without a trusted proxy")
	}
	// Behind a trusted proxy, the forwarded client is the key: new clients
	// are admitted, one client is held to 5.
	for i := range 8 {
		c := do(t, "POST", proxied.base+"/v1/check", nt.LiveKey, map[string]any{"items": []any{map[string]any{"policy": "open", "subject": "s"}}},
			"X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1))
		if c.status != 200 {
			t.Fatalf("forwarded client %d behind a trusted proxy: %d %s", i, c.status, c.body)
		}
	}
	statuses := []int{}
	for range 7 {
		c := do(t, "POST", proxied.base+"/v1/check", nt.LiveKey, map[string]any{"items": []any{map[string]any{"policy": "open", "subject": "s"}}},
			"X-Forwarded-For", "192.0.2.200, 127.0.0.1")
		statuses = append(statuses, c.status)
	}
	if statuses[4] != 200 || statuses[5] != 429 {
		t.Fatalf("one forwarded client at a limit of 5: %v", statuses)
	}
}

// TestEffectivePlanByBillingStatus sets each billing status and reads the
// effective plan from /v1/usage on the other instance.
func TestEffectivePlanByBillingStatus(t *testing.T) {
	dsn := pgtest.New(t)
	a, b := start(t, dsn), start(t, dsn)
	_ = a
	nt := createTenant(t, dsn, "pro")
	want := map[string]string{
		"active": "pro", "trialing": "pro", "past_due": "pro", "unpaid": "starter", "canceled": "starter",
		"incomplete": "starter", "incomplete_expired": "starter", "paused": "starter",
	}
	for status, plan := range want {
		sql(t, dsn, "UPDATE tenants SET billing_status = $2 WHERE id = $1", nt.TenantID, status)
		eventually.True(t, time.Second, "effective plan for "+status, func() bool {
			var u map[string]any
			c := do(t, "GET", b.base+"/v1/usage", nt.LiveKey, nil)
			if c.status != 200 {
				return false
			}
			c.json(t, &u)
			return u["billing_status"] == status && u["effective_plan"] == plan && u["plan"] == "pro"
		})
	}
}

// TestRevokedKeyRefusedOnOtherInstance revokes through the CLI and sees the
// other instance refuse within a second.
func TestRevokedKeyRefusedOnOtherInstance(t *testing.T) {
	dsn := pgtest.New(t)
	a, b := start(t, dsn), start(t, dsn)
	nt := createTenant(t, dsn, "starter")
	var k struct {
		KeyID string `json:"key_id"`
		Key   string `json:"key"`
	}
	cli(t, dsn, &k, "keys", "create", "--tenant", nt.TenantID)
	for _, in := range []*instance{a, b} {
		if c := do(t, "GET", in.base+"/v1/usage", k.Key, nil); c.status != 200 {
			t.Fatalf("new key: %d %s", c.status, c.body)
		}
	}
	// The CLI revokes in the database: each instance hears of it through
	// its own change listener, each in its own time.
	cli(t, dsn, nil, "keys", "revoke", k.KeyID)
	for _, in := range []*instance{a, b} {
		took := eventually.True(t, 3*time.Second, "revoked key refused on "+in.base, func() bool {
			return do(t, "GET", in.base+"/v1/usage", k.Key, nil).status == 401
		})
		t.Logf("revocation reached %s in %s", in.base, took)
	}
}

// TestStoreOutageDegradesAndRecovers cuts one instance off PostgreSQL in
// the middle of traffic: answers keep coming, marked degraded, following
// each policy's fail mode, and come back exact once the store returns.
func TestStoreOutageDegradesAndRecovers(t *testing.T) {
	dsn := pgtest.New(t)
	u, _ := url.Parse(dsn)
	proxy := faultnet.New(t, u.Host)
	u.Host = proxy.Addr()
	in := start(t, u.String())
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "lenient", map[string]any{"limit": 1000, "window": "1h", "fail_mode": "open"})
	putPolicy(t, in, nt.LiveKey, "strict", map[string]any{"limit": 1000, "window": "1h", "fail_mode": "closed"})
	for range 5 {
		if c := check(t, in, nt.LiveKey, map[string]any{"policy": "lenient", "subject": "s"}); c.status != 200 {
			t.Fatalf("before the outage: %d %s", c.status, c.body)
		}
	}
	proxy.Cut()
	for range 20 {
		start := time.Now()
		c := check(t, in, nt.LiveKey, map[string]any{"policy": "lenient", "subject": "s"})
		if took := time.Since(start); took > time.Second {
			t.Fatalf("answer during the outage took %s", took)
		}
		var ans checkAnswer
		c.json(t, &ans)
		if c.status != 200 || !ans.Allowed || !ans.Degraded || c.header.Get("X-RateLimit-Degraded") != "true" {
			t.Fatalf("fail-open policy during the outage: %d %s %v", c.status, c.body, c.header)
		}
		c = check(t, in, nt.LiveKey, map[string]any{"policy": "strict", "subject": "s"})
		c.json(t, &ans)
		if c.status != 200 || ans.Allowed || !ans.Degraded {
			t.Fatalf("fail-closed policy during the outage: %d %s", c.status, c.body)
		}
	}
	// The log reaches us through a pipe, read by a goroutine of its own: the
	// line may land a moment after the answer it was written before.
	eventually.True(t, 5*time.Second, "an L2_DEGRADED line in the log", func() bool {
		return strings.Contains(in.logs.String(), "L2_DEGRADED")
	})
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "exact answers again", func() bool {
		c := check(t, in, nt.LiveKey, map[string]any{"policy": "strict", "subject": "s"})
		var ans checkAnswer
		c.json(t, &ans)
		return c.status == 200 && ans.Allowed && !ans.Degraded
	})
	m := do(t, "GET", in.base+"/metrics", "", nil)
	if !strings.Contains(string(m.body), "tollgate_degraded_answers_total") {
		t.Errorf("/metrics has no degraded answers counter")
	}
}

// TestMalformedCheckPassesAuthFirst: a bad body costs the caller like a good
// one, and without a valid key it learns only 401.
func TestMalformedCheckPassesAuthFirst(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	nt := createTenant(t, dsn, "starter")
	for _, key := range []string{"", "tg_live_garbage"} {
		if c := do(t, "POST", in.base+"/v1/check", key, map[string]any{"mode": "sideways"}); c.status != 401 {
			t.Fatalf("malformed check with key %q: %d %s, want 401", key, c.status, c.body)
		}
	}
	if c := do(t, "POST", in.base+"/v1/check", nt.LiveKey, map[string]any{"mode": "sideways"}); c.status != 400 {
		t.Fatalf("malformed check with a valid key: %d %s, want 400", c.status, c.body)
	}
}

// TestPolicyChangesAreAudited: policy and override changes through the API
// land in the audit log with what changed.
func TestPolicyChangesAreAudited(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	nt := createTenant(t, dsn, "starter")
	putPolicy(t, in, nt.LiveKey, "sign-in-ip", map[string]any{"limit": 10, "window": "1m"})
	if c := do(t, "PUT", in.base+"/v1/policies/sign-in-ip/overrides/203.0.113.7", nt.LiveKey, map[string]any{"limit": 50, "expires_at": nil}); c.status != 200 {
		t.Fatalf("PUT override: %d %s", c.status, c.body)
	}
	if c := do(t, "DELETE", in.base+"/v1/policies/sign-in-ip/overrides/203.0.113.7", nt.LiveKey, nil); c.status != 204 {
		t.Fatalf("DELETE override: %d %s", c.status, c.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT kind, detail->>'pattern', coalesce(detail->>'limit', '') FROM audit WHERE tenant_id = $1 AND actor = 'tenant api' ORDER BY id", nt.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var kind, limit string
		var pattern *string
		if err := rows.Scan(&kind, &pattern, &limit); err != nil {
			t.Fatal(err)
		}
		p := ""
		if pattern != nil {
			p = *pattern
		}
		got = append(got, kind+" "+p+" "+limit)
	}
	want := []string{"policy_put  10", "override_put 203.0.113.7 50", "override_deleted 203.0.113.7 "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("audit entries:\n got  %q\n want %q", got, want)
	}
}
