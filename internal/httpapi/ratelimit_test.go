package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/pgtest"
	"github.com/tollgate/tollgate/internal/tenant"
)

// rateLimitFields are an answer's RateLimit-Policy and RateLimit fields as
// a Structured Fields parser reads them: one quota policy each.
type rateLimitFields struct {
	policy, name string // the policy named in RateLimit-Policy and in RateLimit
	q, w, r, t   int64
	hasW, hasT   bool
}

// parseRateLimit parses r's RateLimit-Policy and RateLimit fields with
// httpsfv (RFC 9651 Lists of Items whose value is a String), failing t
// unless each holds exactly one quota policy with the parameters
// draft-ietf-httpapi-ratelimit-headers requires (q; r) and only those it
// defines.
func parseRateLimit(t *testing.T, h http.Header) rateLimitFields {
	t.Helper()
	var f rateLimitFields
	one := func(field string, allowed ...string) (string, *httpsfv.Params) {
		t.Helper()
		l, err := httpsfv.UnmarshalList(h.Values(field))
		if err != nil {
			t.Fatalf("%s %q: not a Structured Fields List: %v", field, h.Values(field), err)
		}
		if len(l) != 1 {
			t.Fatalf("%s %q: %d members, want 1", field, h.Values(field), len(l))
		}
		it, ok := l[0].(httpsfv.Item)
		if !ok {
			t.Fatalf("%s %q: an inner list, want an Item", field, h.Values(field))
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s %q: the quota policy is a %T, want a String", field, h.Values(field), it.Value)
		}
		for _, k := range it.Params.Names() {
			v, _ := it.Params.Get(k)
			if _, ok := v.(int64); !ok || !contains(allowed, k) {
				t.Fatalf("%s %q: parameter %s=%v, want only Integer %v", field, h.Values(field), k, v, allowed)
			}
		}
		return name, it.Params
	}
	get := func(p *httpsfv.Params, k string) (int64, bool) {
		v, ok := p.Get(k)
		n, _ := v.(int64)
		return n, ok
	}
	var pp, rp *httpsfv.Params
	f.policy, pp = one("RateLimit-Policy", "q", "w")
	f.name, rp = one("RateLimit", "r", "t")
	var hasQ, hasR bool
	f.q, hasQ = get(pp, "q")
	f.w, f.hasW = get(pp, "w")
	f.r, hasR = get(rp, "r")
	f.t, f.hasT = get(rp, "t")
	if !hasQ || !hasR || f.policy != f.name {
		t.Fatalf("RateLimit-Policy %q, RateLimit %q: want q and r, for one policy", h.Values("RateLimit-Policy"), h.Values("RateLimit"))
	}
	return f
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ceilSeconds is milliseconds in whole seconds, rounded up.
func ceilSeconds(ms float64) int64 { return (int64(ms) + 999) / 1000 }

// TestRateLimitFieldsFollowOneRule checks the RateLimit fields of real
// answers, read with a Structured Fields parser nobody here wrote, against
// the rule of ratelimit.go: a refused check names its refusing item with
// the longest wait, and its t is Retry-After; an allowed one names its
// tightest quota; w is the window in seconds; for fixed and sliding windows
// and token buckets, and for checks of several items.
func TestRateLimitFieldsFollowOneRule(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	for _, p := range []struct{ name, body string }{
		{"fixed", `{"limit":2,"window":"1m","algorithm":"fixed_window"}`},
		{"sliding", `{"limit":2,"window":"2m","algorithm":"sliding_window"}`},
		{"bucket", `{"limit":2,"window":"1m","algorithm":"token_bucket"}`},
		{"short", `{"limit":1,"window":"1m","algorithm":"fixed_window"}`},
		{"long", `{"limit":1,"window":"1h","algorithm":"sliding_window"}`},
		{"big", `{"limit":100,"window":"1h"}`},
		{"small", `{"limit":3,"window":"15m"}`},
		{"dark", `{"limit":1,"window":"1h","shadow":true}`},
	} {
		wantStatus(t, a.do(key, "PUT", "/v1/policies/"+p.name, p.body), 200)
	}
	check := func(items string) (answer, map[string]any, rateLimitFields) {
		t.Helper()
		r := a.do(key, "POST", "/v1/check", `{"items":`+items+`}`)
		wantStatus(t, r, 200)
		return r, r.json(t), parseRateLimit(t, r.header)
	}
	item := func(m map[string]any, i int) map[string]any {
		return m["items"].([]any)[i].(map[string]any)
	}
	// wantRefusedBy: the fields and Retry-After name the refused item i of
	// the answer m, with its window.
	wantRefusedBy := func(what string, r answer, m map[string]any, f rateLimitFields, i int, window int64) {
		t.Helper()
		it := item(m, i)
		retry, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
		want := max(1, ceilSeconds(it["retry_after_ms"].(float64)))
		switch {
		case m["allowed"] != false || it["allowed"] != false:
			t.Errorf("%s: not refused: %s", what, r.body)
		case f.name != it["policy"]:
			t.Errorf("%s: fields name %q, want the refusing %q: %s", what, f.name, it["policy"], r.body)
		case err != nil || retry != want:
			t.Errorf("%s: Retry-After %q, want %d (retry_after_ms %v)", what, r.header.Get("Retry-After"), want, it["retry_after_ms"])
		case !f.hasT || f.t != retry:
			t.Errorf("%s: RateLimit t=%d, want Retry-After's %d", what, f.t, retry)
		case f.q != int64(it["limit"].(float64)) || f.r != int64(it["remaining"].(float64)):
			t.Errorf("%s: q=%d r=%d, want the item's limit and remaining: %s", what, f.q, f.r, r.body)
		case !f.hasW || f.w != window:
			t.Errorf("%s: w=%d (present %t), want %d", what, f.w, f.hasW, window)
		}
	}
	wantAllowedBy := func(what string, r answer, m map[string]any, f rateLimitFields, name string, limit, remaining, window int64) {
		t.Helper()
		switch {
		case m["allowed"] != true:
			t.Errorf("%s: refused: %s", what, r.body)
		case r.header.Get("Retry-After") != "":
			t.Errorf("%s: allowed with Retry-After %q", what, r.header.Get("Retry-After"))
		case f.name != name || f.q != limit || f.r != remaining:
			t.Errorf("%s: fields %q;q=%d;r=%d, want %q;q=%d;r=%d", what, f.name, f.q, f.r, name, limit, remaining)
		case !f.hasW || f.w != window:
			t.Errorf("%s: w=%d (present %t), want %d", what, f.w, f.hasW, window)
		case !f.hasT || f.t < 1 || f.t > 2*window:
			// Whole again by the end of the next window at the latest (a
			// sliding window's count of this one weighs on the next).
			t.Errorf("%s: t=%d, want within two windows of %d s", what, f.t, window)
		}
	}

	for _, p := range []struct {
		name   string
		window int64
	}{{"fixed", 60}, {"sliding", 120}, {"bucket", 60}} {
		body := `[{"policy":"` + p.name + `","subject":"s"}]`
		for i := range 2 {
			r, m, f := check(body)
			wantAllowedBy(p.name+" allowed", r, m, f, p.name, 2, int64(1-i), p.window)
		}
		r, m, f := check(body)
		wantRefusedBy(p.name+" refused", r, m, f, 0, p.window)
	}

	// Several items: the refusing one with the longest wait (long: about an
	// hour; short: at most a minute), though it is not the first.
	both := `[{"policy":"short","subject":"s"},{"policy":"long","subject":"s"}]`
	r, m, f := check(both)
	wantAllowedBy("short and long, first", r, m, f, "short", 1, 0, 60)
	r, m, f = check(both)
	wantRefusedBy("short and long, both refuse", r, m, f, 1, 3600)
	// Allowed: the item with the least left relative to its limit, not the
	// first; a shadow item that would refuse is not one.
	sizes := `[{"policy":"big","subject":"s"},{"policy":"small","subject":"s"},{"policy":"dark","subject":"s"}]`
	check(sizes)
	r, m, f = check(sizes)
	if item(m, 2)["allowed"] != false {
		t.Fatalf("the shadow item allowed twice: %s", r.body)
	}
	wantAllowedBy("big and small", r, m, f, "small", 3, 1, 900)

	// A ceiling's refusal: the ceiling, r=0, t is Retry-After.
	limited, _ := a.tenant(tenant.PlanPro, `UPDATE tenants SET rate_limit_per_minute = 1 WHERE id = $1`)
	wantStatus(t, a.do(limited, "PUT", "/v1/policies/big", `{"limit":100,"window":"1h"}`), 200)
	wantStatus(t, a.do(limited, "POST", "/v1/check", `{"items":[{"policy":"big","subject":"s"}]}`), 200)
	r = a.do(limited, "POST", "/v1/check", `{"items":[{"policy":"big","subject":"s"}]}`)
	wantStatus(t, r, 429)
	f = parseRateLimit(t, r.header)
	if f.name != "ip" || f.q != 1 || f.w != 60 || f.r != 0 || strconv.FormatInt(f.t, 10) != r.header.Get("Retry-After") {
		t.Errorf("ip ceiling: %+v, Retry-After %q", f, r.header.Get("Retry-After"))
	}
}

// TestMiddlewareRateLimitFields runs the Go client's middleware against
// this API over HTTP and reads its RateLimit fields with the same parser:
// they follow the rule of Tollgate's own answers (w the policy's window;
// on the refusal, t is Retry-After and the item's wait), for fixed and
// sliding windows and token buckets; chained middlewares add one member
// each.
func TestMiddlewareRateLimitFields(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	srv := httptest.NewServer(a.e)
	defer srv.Close()
	tg, err := client.New(srv.URL, key)
	if err != nil {
		t.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	get := func(app http.Handler) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec
	}
	for _, p := range []struct {
		name, body      string
		window, maxWait int64
	}{
		{"fixed", `{"limit":2,"window":"1m","algorithm":"fixed_window"}`, 60, 60},
		// A sliding window weighs the previous window's count: two taken
		// late in one window leave room for a third only half-way through
		// the next, up to one and a half windows later.
		{"sliding", `{"limit":2,"window":"2m","algorithm":"sliding_window"}`, 120, 180},
		{"bucket", `{"limit":2,"window":"1m","algorithm":"token_bucket"}`, 60, 60},
	} {
		wantStatus(t, a.do(key, "PUT", "/v1/policies/"+p.name, p.body), 200)
		mw, err := client.Middleware(tg, client.MiddlewareConfig{Policy: p.name})
		if err != nil {
			t.Fatal(err)
		}
		app := mw(hello)
		for i := range 3 {
			rec := get(app)
			f := parseRateLimit(t, rec.Header())
			if f.name != p.name || f.q != 2 || !f.hasW || f.w != p.window || f.r != int64(max(0, 1-i)) || !f.hasT {
				t.Errorf("%s, request %d: %+v", p.name, i+1, f)
			}
			if i < 2 {
				if rec.Code != 200 || rec.Header().Get("Retry-After") != "" || f.t < 1 || f.t > 2*p.window {
					t.Errorf("%s, request %d: %d, Retry-After %q, t=%d", p.name, i+1, rec.Code, rec.Header().Get("Retry-After"), f.t)
				}
				continue
			}
			// What the middleware was told: a peek answers the same wait.
			d, err := tg.Peek(context.Background(), clientItem(p.name))
			if err != nil {
				t.Fatal(err)
			}
			if rec.Code != 429 || rec.Header().Get("Retry-After") != strconv.FormatInt(f.t, 10) ||
				f.t < ceilSeconds(float64(d.RetryAfter().Milliseconds())) || f.t > p.maxWait {
				t.Errorf("%s refused: %d, Retry-After %q, t=%d, a peek's wait %s", p.name, rec.Code, rec.Header().Get("Retry-After"), f.t, d.RetryAfter())
			}
		}
	}

	// Chained: one member each, in the order of the chain.
	wantStatus(t, a.do(key, "PUT", "/v1/policies/outer", `{"limit":5,"window":"1h"}`), 200)
	wantStatus(t, a.do(key, "PUT", "/v1/policies/inner", `{"limit":7,"window":"1d"}`), 200)
	outer, err := client.Middleware(tg, client.MiddlewareConfig{Policy: "outer"})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := client.Middleware(tg, client.MiddlewareConfig{Policy: "inner", Name: `in"ner`})
	if err != nil {
		t.Fatal(err)
	}
	rec := get(outer(inner(hello)))
	pl, err := httpsfv.UnmarshalList(rec.Header().Values("RateLimit-Policy"))
	if err != nil || len(pl) != 2 {
		t.Fatalf("chained RateLimit-Policy %q: %v", rec.Header().Values("RateLimit-Policy"), err)
	}
	for i, want := range []struct {
		name string
		q, w int64
	}{{"outer", 5, 3600}, {`in"ner`, 7, 86400}} {
		it := pl[i].(httpsfv.Item)
		q, _ := it.Params.Get("q")
		w, _ := it.Params.Get("w")
		if it.Value != want.name || q != want.q || w != want.w {
			t.Errorf("chained member %d: %v q=%v w=%v, want %q q=%d w=%d", i, it.Value, q, w, want.name, want.q, want.w)
		}
	}
	if _, err := client.Middleware(tg, client.MiddlewareConfig{Policy: "outer", Name: "ünï"}); err == nil {
		t.Error("a name a Structured Fields String cannot hold was taken")
	}
}

// clientItem is a check of policy for the middleware's subject: the
// request's address, as httptest sends it.
func clientItem(policy string) client.Item {
	return client.Item{Policy: policy, Subject: "192.0.2.1"}
}
