package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// forward sends a forward-auth request to a as a proxy would, from the
// peer from (host:port), with headers in pairs; a GET is checked against
// the OpenAPI document as every other answer is.
func forward(t *testing.T, a *tenantAPI, method, key, target, from string, headers ...string) answer {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = from
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, req)
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	if method == http.MethodGet {
		checkOpenAPI(t, req, nil, resp, body)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// forwardProblem decodes a forward-auth refusal's problem body.
type forwardProblem struct {
	Type             string   `json:"type"`
	Status           int      `json:"status"`
	Layer            string   `json:"layer"`
	Limit            int64    `json:"limit"`
	Remaining        int64    `json:"remaining"`
	RetryAfter       int64    `json:"retry_after_seconds"`
	ViolatedPolicies []string `json:"violated-policies"`
	BillingURL       string   `json:"billing_url"`
	Field            string   `json:"field"`
}

func (r answer) problem(t *testing.T) forwardProblem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("answer %d: Content-Type %q, want application/problem+json: %s", r.status, ct, r.body)
	}
	var p forwardProblem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("answer %d %s: %v", r.status, r.body, err)
	}
	return p
}

// TestForwardAuthKeysByClientAddress: with no subject header, each client
// address has the policy's limit; a refusal is 429 (or the status the
// proxy asked for) with Retry-After, the RateLimit fields and a problem,
// and an allowed answer is an empty 200 with the RateLimit fields.
func TestForwardAuthKeysByClientAddress(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/pages", `{"limit":3,"window":"1m","algorithm":"fixed_window"}`), 200)

	for i := range 3 {
		r := forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", "198.51.100.7:4000")
		wantStatus(t, r, 200)
		if len(r.body) != 0 {
			t.Errorf("allowed answer has a body: %q", r.body)
		}
		rl := parseRateLimit(t, r.header)
		if rl.policy != "pages" || rl.q != 3 || rl.r != int64(2-i) || !rl.hasW || rl.w != 60 {
			t.Errorf("allowed answer %d: RateLimit %+v", i, rl)
		}
		if r.header.Get("Retry-After") != "" || r.header.Get("X-Tollgate-Degraded") != "" {
			t.Errorf("allowed answer %d: %v", i, r.header)
		}
	}
	r := forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", "198.51.100.7:4001")
	wantStatus(t, r, http.StatusTooManyRequests)
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Errorf("refusal's Retry-After %q", r.header.Get("Retry-After"))
	}
	rl := parseRateLimit(t, r.header)
	if rl.policy != "pages" || rl.r != 0 || rl.t != int64(retry) {
		t.Errorf("refusal's RateLimit %+v, Retry-After %d", rl, retry)
	}
	p := r.problem(t)
	if p.Type != problemBase+"rate-limited" || p.Status != 429 || p.Layer != "policy" || p.Limit != 3 ||
		p.RetryAfter != int64(retry) || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "pages" {
		t.Errorf("refusal's problem: %s", r.body)
	}
	// nginx's form of the same refusal.
	r = forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages?refusal_status=403", "198.51.100.7:4002")
	wantStatus(t, r, http.StatusForbidden)
	if r.header.Get("Retry-After") == "" || parseRateLimit(t, r.header).policy != "pages" || r.problem(t).Status != 403 {
		t.Errorf("refusal as 403: %v %s", r.header, r.body)
	}
	// Another address has a budget of its own.
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", "198.51.100.8:4000"), 200)
	// An IPv6 client is keyed by its /64, as every per-IP layer keys it.
	for i := range 4 {
		r := forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", "[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:4000")
		if want := map[bool]int{true: 200, false: 429}[i < 3]; r.status != want {
			t.Errorf("IPv6 request %d of one /64: %d, want %d", i, r.status, want)
		}
	}

	// The checks count as checks: usage counts every decided one.
	r = a.do(key, http.MethodGet, "/v1/usage", "")
	wantStatus(t, r, 200)
	if m := r.json(t); m["checks_used"] != 10.0 {
		t.Errorf("usage after 10 forward-auth checks (5 allowed, 3 refused, 2 at other addresses): %s", r.body)
	}
}

// TestForwardAuthBelievesOnlyTrustedProxies: the client's address is
// resolved as every per-IP layer resolves it: a proxy Tollgate trusts
// names it in X-Forwarded-For, and a client that writes its own
// X-Forwarded-For, directly or through the proxy, is not believed.
func TestForwardAuthBelievesOnlyTrustedProxies(t *testing.T) {
	t.Parallel()
	_, trusted, _ := net.ParseCIDR("10.0.0.1/32")
	a := newTenantAPIWith(t, pgtest.New(t), apiOptions{clientIP: ClientIPConfig{TrustedProxies: []*net.IPNet{trusted}}})
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/pages", `{"limit":2,"window":"1m"}`), 200)
	const proxy = "10.0.0.1:5000"
	for i := range 2 {
		// The proxy appends the client's address to what the client sent.
		spoof := "203.0.113." + strconv.Itoa(i+1) + ", 198.51.100.7"
		wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", proxy, "X-Forwarded-For", spoof), 200)
	}
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", proxy, "X-Forwarded-For", "203.0.113.9, 198.51.100.7"), 429)
	// Another client behind the proxy.
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", proxy, "X-Forwarded-For", "198.51.100.8"), 200)
	// A client that reaches Tollgate itself names no one but itself.
	for i := range 2 {
		wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", "198.51.100.9:1", "X-Forwarded-For", "203.0.113."+strconv.Itoa(i+20)), 200)
	}
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", "198.51.100.9:1", "X-Forwarded-For", "203.0.113.99"), 429)
}

// TestForwardAuthSubjectHeader: ?subject_header names the header whose
// value is the subject; without it (or empty) the client's address is; a
// value too long to be a subject is counted by its SHA-256, never refused
// (a 400 would let a client choose to be waved through by a proxy that
// fails open).
func TestForwardAuthSubjectHeader(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/users", `{"limit":2,"window":"1h"}`), 200)
	const target = "/v1/forward-auth/users?subject_header=X-User-Id"
	const from = "198.51.100.7:4000"
	long := strings.Repeat("u", 600)
	for _, subject := range []string{"alice", "bob", long, "caf\xe9"} {
		for i := range 3 {
			r := forward(t, a, http.MethodGet, key, target, from, "X-User-Id", subject)
			if want := map[bool]int{true: 200, false: 429}[i < 2]; r.status != want {
				t.Errorf("subject %.12q, request %d: %d %s, want %d", subject, i, r.status, r.body, want)
			}
		}
	}
	// No header: the client's address, a budget of its own.
	for i := range 3 {
		r := forward(t, a, http.MethodGet, key, target, from)
		if want := map[bool]int{true: 200, false: 429}[i < 2]; r.status != want {
			t.Errorf("no header, request %d: %d %s, want %d", i, r.status, r.body, want)
		}
	}
	// The client's address, written as a header value, is that same subject.
	wantStatus(t, forward(t, a, http.MethodGet, key, target, "198.51.100.99:1", "X-User-Id", "198.51.100.7"), 429)
}

// TestForwardAuthAnyMethodNoBody: a proxy may forward the request's own
// method; any is answered, and a body is never read.
func TestForwardAuthAnyMethodNoBody(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/pages", `{"limit":100,"window":"1m"}`), 200)
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		var read atomic.Bool
		req := httptest.NewRequest(method, "/v1/forward-auth/pages", &trapBody{read: &read})
		req.ContentLength = 1 << 20
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		a.e.ServeHTTP(rec, req)
		if rec.Code != 200 || read.Load() {
			t.Errorf("%s with a body: %d, body read %v", method, rec.Code, read.Load())
		}
		if rec.Header().Get("Connection") != "close" {
			t.Errorf("%s with a body left unread: Connection %q, want close", method, rec.Header().Get("Connection"))
		}
	}
}

// trapBody is a request body that records being read.
type trapBody struct{ read *atomic.Bool }

func (b *trapBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return 0, io.EOF
}

// TestForwardAuthMistakes: a key Tollgate does not know is 401; what the
// proxy's configuration got wrong is 400 naming it, and counts nothing.
func TestForwardAuthMistakes(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/pages", `{"limit":1,"window":"1m"}`), 200)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/jobs", `{"limit":1,"algorithm":"concurrency"}`), 200)
	const from = "198.51.100.7:4000"
	for _, k := range []string{"", "tg_live_nope"} {
		r := forward(t, a, http.MethodGet, k, "/v1/forward-auth/pages", from)
		wantStatus(t, r, 401)
		if p := r.problem(t); p.Type != problemBase+"unauthorized" {
			t.Errorf("bad key: %s", r.body)
		}
	}
	for _, c := range []struct{ target, field string }{
		{"/v1/forward-auth/nope", "policy"},
		{"/v1/forward-auth/jobs", "policy"},
		{"/v1/forward-auth/pages?cost=0", "cost"},
		{"/v1/forward-auth/pages?cost=x", "cost"},
		{"/v1/forward-auth/pages?cost=1000000000001", "cost"},
		{"/v1/forward-auth/pages?refusal_status=500", "refusal_status"},
		{"/v1/forward-auth/pages?subject_header=Bad%20Name", "subject_header"},
	} {
		r := forward(t, a, http.MethodGet, key, c.target, from)
		wantStatus(t, r, 400)
		if p := r.problem(t); p.Field != c.field {
			t.Errorf("%s: field %q, want %q: %s", c.target, p.Field, c.field, r.body)
		}
	}
	// None of those counted against the policy.
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages?cost=1", from), 200)
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/pages", from), 429)
}

// TestForwardAuthCeilings: a ceiling that limits the client's address
// refuses as the policy does; one that holds back the whole tenant (its
// allotment, its billing) is 503, so that the proxy's fail mode decides as
// a client's FailMode does, and no billing link reaches the tenant's users.
func TestForwardAuthCeilings(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	if _, err := a.tenants.SetPlanLimits(context.Background(), tenant.PlanStarter, tenant.PlanLimits{MonthlyChecks: ptr(int64(1))}); err != nil {
		t.Fatal(err)
	}
	const from = "198.51.100.7:4000"
	limited, _ := a.tenant(tenant.PlanPro, `UPDATE tenants SET rate_limit_per_minute = 1 WHERE id = $1`)
	starter, _ := a.tenant(tenant.PlanStarter)
	unpaid, _ := a.tenant(tenant.PlanPro, `UPDATE tenants SET billing_status = 'unpaid' WHERE id = $1`)
	for _, k := range []string{limited, starter, unpaid} {
		wantStatus(t, a.do(k, http.MethodPut, "/v1/policies/open", `{"limit":1000000,"window":"1h"}`), 200)
	}
	wantStatus(t, forward(t, a, http.MethodGet, limited, "/v1/forward-auth/open", from), 200)
	r := forward(t, a, http.MethodGet, limited, "/v1/forward-auth/open?refusal_status=403", from)
	wantStatus(t, r, 403)
	if r.header.Get("X-RateLimit-Layer") != "ip" || r.header.Get("Retry-After") == "" || r.problem(t).Layer != "ip" {
		t.Errorf("per-IP ceiling: %v %s", r.header, r.body)
	}
	wantStatus(t, forward(t, a, http.MethodGet, limited, "/v1/forward-auth/open", "198.51.100.8:1"), 200)

	for _, k := range []string{starter, unpaid} {
		wantStatus(t, forward(t, a, http.MethodGet, k, "/v1/forward-auth/open", from), 200)
		r := forward(t, a, http.MethodGet, k, "/v1/forward-auth/open?refusal_status=403", from)
		wantStatus(t, r, 503)
		p := r.problem(t)
		if r.header.Get("X-RateLimit-Layer") != "allotment" || r.header.Get("Retry-After") == "" || p.Layer != "allotment" || p.BillingURL != "" || strings.Contains(string(r.body), "/billing/portal/") {
			t.Errorf("allotment: %v %s", r.header, r.body)
		}
	}
}

// TestForwardAuthDegraded: with the counter store out of reach the
// policy's fail mode decides, as for a check, and the answer says so.
func TestForwardAuthDegraded(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: proxied, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := newTenantAPI(t, dsn, store)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/lenient", `{"limit":10,"window":"1m","fail_mode":"open"}`), 200)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/strict", `{"limit":10,"window":"1m","fail_mode":"closed"}`), 200)
	const from = "198.51.100.7:4000"
	wantStatus(t, forward(t, a, http.MethodGet, key, "/v1/forward-auth/lenient", from), 200)

	proxy.Cut()
	r := forward(t, a, http.MethodGet, key, "/v1/forward-auth/lenient", from)
	if r.status != 200 || r.header.Get("X-Tollgate-Degraded") != "true" {
		t.Errorf("fail open: %d %v %s", r.status, r.header, r.body)
	}
	r = forward(t, a, http.MethodGet, key, "/v1/forward-auth/strict", from)
	if r.status != 429 || r.header.Get("X-Tollgate-Degraded") != "true" || r.header.Get("Retry-After") == "" {
		t.Errorf("fail closed: %d %v %s", r.status, r.header, r.body)
	}
}

// TestForwardAuthKeyAsBasicPassword: a proxy that cannot add a header to
// its auth request (Traefik) sends the key as the password of Basic
// credentials, from the userinfo of its auth address.
func TestForwardAuthKeyAsBasicPassword(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/pages", `{"limit":1,"window":"1m"}`), 200)
	basic := func(password string) string {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.SetBasicAuth("tollgate", password)
		return req.Header.Get("Authorization")
	}
	const from = "198.51.100.7:4000"
	wantStatus(t, forward(t, a, http.MethodGet, "", "/v1/forward-auth/pages", from, "Authorization", basic(key)), 200)
	wantStatus(t, forward(t, a, http.MethodGet, "", "/v1/forward-auth/pages", from, "Authorization", basic(key)), 429)
	wantStatus(t, forward(t, a, http.MethodGet, "", "/v1/forward-auth/pages", from, "Authorization", basic("tg_live_nope")), 401)
}
