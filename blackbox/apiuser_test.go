package blackbox

import (
	"github.com/tollgate/tollgate/internal/testkit/eventually"

	"bytes"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// patientStore gives an instance's counter store calls a deadline of 2 s
// instead of 50 ms, for tests that count exactly: on a busy test machine a
// call may take longer than 50 ms, and its answer is then degraded (allowed
// by the fail-open policy, uncounted by the ceilings), which is right for
// production and wrong for a test of exact counts. Degraded answers have
// TestStoreOutageDegradesAndRecovers.
const patientStore = "TOLLGATE_COUNTER_TIMEOUT=2s"

// apiUser is one tenant's caller as an instance sees it: its key and, on an
// instance that trusts 127.0.0.1 as a proxy, the client address it forwards
// (empty: the TCP peer, 127.0.0.1).
type apiUser struct {
	t   *testing.T
	in  *instance
	key string
	ip  string
}

// on returns u talking to another instance.
func (u apiUser) on(in *instance) apiUser { u.in = in; return u }

// from returns u forwarded from another client address.
func (u apiUser) from(ip string) apiUser { u.ip = ip; return u }

// with returns u using another key.
func (u apiUser) with(key string) apiUser { u.key = key; return u }

func (u apiUser) headers() []string {
	if u.ip == "" {
		return nil
	}
	return []string{"X-Forwarded-For", u.ip}
}

func (u apiUser) call(method, path string, body any) call {
	u.t.Helper()
	return do(u.t, method, u.in.base+path, u.key, body, u.headers()...)
}

// check posts one /v1/check in mode ("" for the default) with items.
func (u apiUser) check(mode string, items ...map[string]any) call {
	u.t.Helper()
	body := map[string]any{"items": items}
	if mode != "" {
		body["mode"] = mode
	}
	return u.call("POST", "/v1/check", body)
}

// raw posts body to /v1/check as it is, bytes that need not be JSON.
func (u apiUser) raw(body []byte) call {
	u.t.Helper()
	req, err := http.NewRequest("POST", u.in.base+"/v1/check", bytes.NewReader(body))
	if err != nil {
		u.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if u.key != "" {
		req.Header.Set("Authorization", "Bearer "+u.key)
	}
	if u.ip != "" {
		req.Header.Set("X-Forwarded-For", u.ip)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		u.t.Fatalf("POST /v1/check: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return call{resp.StatusCode, resp.Header, b}
}

func (u apiUser) putPolicy(name string, p map[string]any) {
	u.t.Helper()
	if c := u.call("PUT", "/v1/policies/"+name, p); c.status != 200 {
		u.t.Fatalf("PUT policy %s: %d %s", name, c.status, c.body)
	}
}

// putPolicyAll puts a policy through u's instance and waits until every
// other instance in others applies it to a check (a peek, which counts
// nothing of the tenant's policies). Policy changes reach other instances
// within a second, through the database's change notifications.
func (u apiUser) putPolicyAll(name string, p map[string]any, others ...*instance) {
	u.t.Helper()
	u.putPolicy(name, p)
	item := map[string]any{"policy": name, "subject": "probe"}
	for _, in := range others {
		eventually.True(u.t, time.Second, "policy "+name+" applied on "+in.base, func() bool {
			return u.on(in).check("peek", item).status == 200
		})
	}
}

// usageReport is the answer of GET /v1/usage.
type usageReport struct {
	TenantID         string           `json:"tenant_id"`
	Plan             string           `json:"plan"`
	EffectivePlan    string           `json:"effective_plan"`
	BillingStatus    string           `json:"billing_status"`
	ChecksUsed       int64            `json:"checks_used"`
	ChecksAllotment  *int64           `json:"checks_allotment"`
	SandboxUsed      int64            `json:"sandbox_used"`
	SandboxAllotment int64            `json:"sandbox_allotment"`
	RefusalsByLayer  map[string]int64 `json:"refusals_by_layer"`
}

func (u apiUser) usage() usageReport {
	u.t.Helper()
	c := u.call("GET", "/v1/usage", nil)
	if c.status != 200 {
		u.t.Fatalf("GET /v1/usage: %d %s", c.status, c.body)
	}
	var r usageReport
	c.json(u.t, &r)
	return r
}

// waitUsage polls /v1/usage until ok accepts it (usage is flushed every
// half second) and returns the report; it fails t after d.
func (u apiUser) waitUsage(d time.Duration, what string, ok func(usageReport) bool) usageReport {
	u.t.Helper()
	var r usageReport
	eventually.NoError(u.t, d, what, func() error {
		if r = u.usage(); !ok(r) {
			return fmt.Errorf("last usage %+v", r)
		}
		return nil
	})
	return r
}

// checkOf decodes a 200 /v1/check answer, which must not be degraded.
func checkOf(t *testing.T, c call) checkAnswer {
	t.Helper()
	if c.status != 200 {
		t.Fatalf("check: %d %s", c.status, c.body)
	}
	var a checkAnswer
	c.json(t, &a)
	if a.Degraded {
		t.Errorf("degraded answer (the counter store did not answer in time): %s", c.body)
	}
	return a
}

// problemOf decodes a problem answer, after checking its status and content
// type.
func problemOf(t *testing.T, c call, status int) map[string]any {
	t.Helper()
	if c.status != status {
		t.Fatalf("status %d, want %d: %s", c.status, status, c.body)
	}
	if ct := c.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("content type %q, want application/problem+json", ct)
	}
	var p map[string]any
	c.json(t, &p)
	if p["status"] != float64(status) || p["type"] == nil || p["title"] == nil {
		t.Errorf("problem without type, title or status %d: %s", status, c.body)
	}
	return p
}

// wantHeaders fails t for each header of h that is not as in want.
func wantHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := h.Get(name); got != v {
			t.Errorf("%s: %q, want %q", name, got, v)
		}
	}
}

// cliOut runs a tollgate command and returns what it printed.
func cliOut(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = environ(dsn)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tollgate %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// planNames lists the plans `tollgate plans list` prints.
func planNames(t *testing.T, dsn string) []string {
	t.Helper()
	var names []string
	for i, line := range strings.Split(strings.TrimSpace(cliOut(t, dsn, "plans", "list")), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			names = append(names, f[0])
		}
	}
	if len(names) < 4 {
		t.Fatalf("plans list: %v", names)
	}
	return names
}

// docIP is the n-th documentation address (RFC 5737) of one of three
// blocks: a client address a test may forward, distinct per test so that
// tests keep out of each other's per-IP buckets.
func docIP(block, n int) string {
	return fmt.Sprintf("%s.%d", []string{"192.0.2", "198.51.100", "203.0.113"}[block%3], n%250+1)
}
