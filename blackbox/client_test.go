package blackbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/client/echomw"
	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// The client package's black-box suite: the Go client and its middleware
// against Tollgate built from the tree, over real HTTP.

// patient gives a client of a test a per-call timeout for a loaded test
// machine; the tests of the 100 ms default say so.
var patient = client.WithTimeout(5 * time.Second)

func newClient(t *testing.T, base, key string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(base, key, append([]client.Option{patient}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countingTransport counts the round trips a client makes.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// stop stops an instance and waits until it has exited.
func stop(t *testing.T, in *instance) {
	t.Helper()
	if err := in.srv.Stop(); errors.Is(err, bintest.ErrKilled) {
		t.Fatal(err)
	}
}

// appGet is one request to an app server.
func appGet(t *testing.T, base string, headers ...string) call {
	t.Helper()
	return do(t, "GET", base+"/hello", "", nil, headers...)
}

// noTollgateDetails fails t when an answer of the app shows its clients
// anything of Tollgate: its address, the API key, its ceilings.
func noTollgateDetails(t *testing.T, c call, in *instance, key string) {
	t.Helper()
	host := strings.TrimPrefix(in.base, "http://")
	for name, vs := range c.header {
		v := strings.Join(vs, ",")
		if strings.HasPrefix(name, "X-Ratelimit") || strings.Contains(v, host) || strings.Contains(v, key) {
			t.Errorf("app answer header %s: %q", name, v)
		}
	}
	b := strings.ToLower(string(c.body))
	if strings.Contains(b, "tollgate") || strings.Contains(b, host) || strings.Contains(string(c.body), key) || strings.Contains(b, "billing") {
		t.Errorf("app answer body shows Tollgate's details: %s", c.body)
	}
}

// TestClientCheckPeekUsage: Check counts, Peek does not, a refusal of a
// policy is a Decision (not an error), several items are all-or-nothing, a
// global policy needs no subject, Usage reads /v1/usage, and Tollgate's 400
// and 401 are *APIErrors with a Decision that allows nothing.
func TestClientCheckPeekUsage(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "failed-sign-ins", map[string]any{"limit": 3, "window": "15m", "alert_after": 1})
	putPolicy(t, in, nt.LiveKey, "roomy", map[string]any{"limit": 100, "window": "1h"})
	putPolicy(t, in, nt.LiveKey, "error-reports", map[string]any{"limit": 2, "window": "1h", "scope": "global"})
	tg := newClient(t, in.base, nt.LiveKey)
	ctx := context.Background()
	failed := client.Item{Policy: "failed-sign-ins", Subject: "account:42"}

	// Peeks count nothing of the policy.
	for i := range 5 {
		d, err := tg.Peek(ctx, failed)
		if err != nil || !d.Allowed || d.Degraded || len(d.Items) != 1 || !d.Items[0].Allowed || d.Items[0].Limit != 3 || d.Items[0].Policy != "failed-sign-ins" {
			t.Fatalf("peek %d: %+v, %v", i+1, d, err)
		}
	}
	// Checks do: three allowed, the fourth refused.
	for i := range 3 {
		d, err := tg.Check(ctx, failed)
		if err != nil || !d.Allowed || d.Items[0].Remaining != int64(2-i) {
			t.Fatalf("check %d: %+v, %v", i+1, d, err)
		}
	}
	before := time.Now()
	for _, ask := range []func(context.Context, ...client.Item) (client.Decision, error){tg.Check, tg.Peek} {
		d, err := ask(ctx, failed)
		if err != nil {
			t.Fatalf("a policy's refusal is an answer, not an error: %v", err)
		}
		it := d.Items[0]
		if d.Allowed || d.Degraded || it.Allowed || it.Remaining != 0 || it.RetryAfter <= 0 || it.RetryAfter > 15*time.Minute || d.RetryAfter() != it.RetryAfter {
			t.Fatalf("refused: %+v", d)
		}
		if it.ResetAt.Before(before) || it.ResetAt.After(before.Add(15*time.Minute+time.Second)) {
			t.Errorf("reset_at %s, want within the 15 minutes after %s", it.ResetAt, before)
		}
	}

	// All or nothing: the roomy item is not counted when the other refuses.
	roomy := client.Item{Policy: "roomy", Subject: "account:42"}
	d, err := tg.Check(ctx, roomy, failed)
	if err != nil || d.Allowed || len(d.Items) != 2 || !d.Items[0].Allowed || d.Items[1].Allowed {
		t.Fatalf("two items, one refused: %+v, %v", d, err)
	}
	if d, err := tg.Check(ctx, roomy); err != nil || !d.Allowed || d.Items[0].Remaining != 99 {
		t.Fatalf("roomy after the refused pair: %+v, %v (want 99 left: the pair counted nothing)", d, err)
	}
	// A cost, and a global policy without a subject.
	if d, err := tg.Check(ctx, client.Item{Policy: "roomy", Subject: "account:43", Cost: 10}); err != nil || d.Items[0].Remaining != 90 {
		t.Fatalf("cost 10: %+v, %v", d, err)
	}
	for i, want := range []bool{true, true, false} {
		if d, err := tg.Check(ctx, client.Item{Policy: "error-reports"}); err != nil || d.Allowed != want {
			t.Fatalf("global check %d: %+v, %v", i+1, d, err)
		}
	}

	// A global policy counts no subject: there is none to reset.
	var ae *client.APIError
	if err := tg.Reset(ctx, "error-reports", "s"); !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "subject" {
		t.Errorf("reset of a global policy: %v", err)
	}

	// Tollgate's 400 names the field; the Decision allows nothing (a
	// wrong call is not the fail mode's to answer).
	d, err = tg.Check(ctx, client.Item{Policy: "no-such-policy", Subject: "s"})
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "items[0].policy" || d.Allowed || d.Degraded {
		t.Fatalf("unknown policy: %+v, %v", d, err)
	}
	closed := newClient(t, in.base, nt.LiveKey, client.WithFailMode(client.FailClosed))
	if d, err := closed.Check(ctx, client.Item{Policy: "roomy", Subject: "s", Cost: -1}); !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "items[0].cost" || d.Allowed || d.Degraded {
		t.Fatalf("negative cost, failing closed: %+v, %v", d, err)
	}
	// A key Tollgate does not know.
	stranger := newClient(t, in.base, "tg_live_0000000000000000000000000000")
	if _, err := stranger.Check(ctx, roomy); !errors.As(err, &ae) || ae.Status != 401 || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := stranger.Usage(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("usage with an unknown key: %v", err)
	}

	// Usage is /v1/usage, typed.
	var u client.Usage
	eventually.True(t, 5*time.Second, "checks metered and the refusal alerted", func() bool {
		u, err = tg.Usage(ctx)
		return err == nil && u.ChecksUsed > 0 && len(u.Alerts) > 0
	})
	if a := u.Alerts[0]; a.Policy != "failed-sign-ins" || a.Subjects != 1 || a.Count < 1 || a.AlertAfter != 1 ||
		a.SubjectKey == "" || strings.Contains(a.SubjectKey, "account") || a.FirstAt.IsZero() || a.LastAt.Before(a.FirstAt) {
		t.Errorf("alert %+v", a)
	}
	raw := apiUser{t: t, in: in, key: nt.LiveKey}.usage()
	if u.TenantID != nt.TenantID || u.Plan != "pro" || u.EffectivePlan != "pro" || u.BillingStatus != raw.BillingStatus ||
		u.ChecksAllotment == nil || *u.ChecksAllotment != *raw.ChecksAllotment || u.SandboxAllotment != 1000 ||
		!u.PeriodStart.Before(time.Now()) || !u.PeriodEnd.After(time.Now()) || u.RefusalsByLayer == nil || u.Alerts == nil {
		t.Errorf("usage %+v, /v1/usage says %+v", u, raw)
	}
}

// TestClientRefusals: Tollgate's own ceilings are *RateLimitedErrors
// (layer, limit, Retry-After) and the 402 a *PaymentRequiredError with the
// billing URL; the calls then answer with the fail mode. A retry honours
// Retry-After, and never waits past the caller's context or the longest
// wait it was given.
func TestClientRefusals(t *testing.T) {
	dsn := pgtest.New(t)
	cli(t, dsn, nil, "plans", "set", "starter", "--monthly-checks", "5")
	in := start(t, dsn, patientStore)
	ctx := context.Background()

	t.Run("quota", func(t *testing.T) {
		nt := createTenant(t, dsn, "pro")
		sql(t, dsn, "UPDATE tenants SET quota_per_hour = 3 WHERE id = $1", nt.TenantID)
		putPolicy(t, in, nt.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})
		item := client.Item{Policy: "open", Subject: "s"}
		open := newClient(t, in.base, nt.LiveKey)
		closed := newClient(t, in.base, nt.LiveKey, client.WithFailMode(client.FailClosed))
		var rl *client.RateLimitedError
		for i := 0; ; i++ {
			d, err := open.Check(ctx, item)
			if errors.As(err, &rl) {
				if !d.Allowed || !d.Degraded || d.Items != nil {
					t.Errorf("failing open after Tollgate's 429: %+v", d)
				}
				break
			}
			if err != nil || !d.Allowed || i == 10 {
				t.Fatalf("check %d under a quota of 3 an hour: %+v, %v", i+1, d, err)
			}
		}
		if rl.Layer != "quota" || rl.Scope != "hour" || rl.Limit != 3 || rl.RetryAfter <= 0 || rl.RetryAfter > time.Hour {
			t.Fatalf("quota refusal: %+v", rl)
		}
		if d, err := closed.Check(ctx, item); !errors.As(err, &rl) || d.Allowed || !d.Degraded {
			t.Fatalf("failing closed after Tollgate's 429: %+v, %v", d, err)
		}
		if rl.RetryAfter < 3*time.Second {
			// The hour ends in a moment: the waits below need one.
			t.Logf("quota hour ends in %s; waiting for the next", rl.RetryAfter)
			time.Sleep(rl.RetryAfter)
			for {
				if _, err := open.Check(ctx, item); errors.As(err, &rl) {
					break
				}
			}
		}
		// A retry never waits past the caller's context…
		ct := &countingTransport{}
		retrying := newClient(t, in.base, nt.LiveKey, client.WithRetry(5, 2*time.Hour), client.WithHTTPClient(&http.Client{Transport: ct}))
		cctx, cancel := context.WithTimeout(ctx, rl.RetryAfter-time.Second)
		defer cancel()
		if _, err := retrying.Check(cctx, item); !errors.As(err, &rl) || cctx.Err() != nil || ct.n.Load() != 1 {
			t.Fatalf("retry with a context shorter than Retry-After: %v, context %v, %d round trips", err, cctx.Err(), ct.n.Load())
		}
		// …nor longer than it was told.
		ct.n.Store(0)
		short := newClient(t, in.base, nt.LiveKey, client.WithRetry(5, time.Second), client.WithHTTPClient(&http.Client{Transport: ct}))
		start := time.Now()
		if _, err := short.Check(ctx, item); !errors.As(err, &rl) || ct.n.Load() != 1 || time.Since(start) > rl.RetryAfter/2 {
			t.Fatalf("retry with a longest wait shorter than Retry-After: %v, %d round trips in %s", err, ct.n.Load(), time.Since(start))
		}
	})

	t.Run("payment required", func(t *testing.T) {
		nt := createTenant(t, dsn, "pro")
		sql(t, dsn, "UPDATE tenants SET billing_status = 'unpaid' WHERE id = $1", nt.TenantID)
		putPolicy(t, in, nt.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})
		item := client.Item{Policy: "open", Subject: "s"}
		tg := newClient(t, in.base, nt.LiveKey)
		for i := range 5 {
			if d, err := tg.Check(ctx, item); err != nil || !d.Allowed {
				t.Fatalf("check %d of the starter allotment of 5: %+v, %v", i+1, d, err)
			}
		}
		var pr *client.PaymentRequiredError
		d, err := tg.Check(ctx, item)
		if !errors.As(err, &pr) || !d.Allowed || !d.Degraded {
			t.Fatalf("beyond the allotment of an unpaid tenant: %+v, %v", d, err)
		}
		if !strings.HasPrefix(pr.BillingURL, in.base+"/billing/portal/"+nt.TenantID+".") || pr.Detail == "" {
			t.Errorf("402: %+v", pr)
		}
		// Retrying does not help, and is not done.
		ct := &countingTransport{}
		retrying := newClient(t, in.base, nt.LiveKey, client.WithRetry(3, time.Hour), client.WithHTTPClient(&http.Client{Transport: ct}))
		if _, err := retrying.Check(ctx, item); !errors.As(err, &pr) || ct.n.Load() != 1 {
			t.Errorf("retrying a 402: %v after %d round trips", err, ct.n.Load())
		}

		// The middleware on a tenant Tollgate refuses: the fail mode
		// decides, OnError hears why, the app's clients learn nothing.
		for _, mode := range []client.FailMode{client.FailOpen, client.FailClosed} {
			var heard atomic.Value
			mw, err := client.Middleware(newClient(t, in.base, nt.LiveKey, client.WithFailMode(mode)), client.MiddlewareConfig{
				Policy: "open", OnError: func(_ *http.Request, err error) { heard.Store(err) },
			})
			if err != nil {
				t.Fatal(err)
			}
			app := httptest.NewServer(mw(hello()))
			c := appGet(t, app.URL)
			app.Close()
			want := map[client.FailMode]int{client.FailOpen: 200, client.FailClosed: 503}[mode]
			if c.status != want {
				t.Errorf("middleware failing %s on a 402: %d %s", mode, c.status, c.body)
			}
			if err, _ := heard.Load().(error); !errors.As(err, &pr) {
				t.Errorf("OnError heard %v", err)
			}
			noTollgateDetails(t, c, in, nt.LiveKey)
		}
	})

	t.Run("retry honours Retry-After", func(t *testing.T) {
		nt := createTenant(t, dsn, "pro")
		putPolicy(t, in, nt.LiveKey, "open", map[string]any{"limit": 1000000, "window": "1h"})
		// An instance that admits 3 requests a second: its refusals say
		// Retry-After: 1.
		ceiling := start(t, dsn, patientStore, "TOLLGATE_INSTANCE_CEILING=3")
		item := client.Item{Policy: "open", Subject: "s"}
		exhaust := func() {
			for {
				c := check(t, ceiling, nt.LiveKey, map[string]any{"policy": "open", "subject": "s"})
				if c.status == 429 {
					if c.header.Get("X-RateLimit-Layer") != "instance" || c.header.Get("Retry-After") != "1" {
						t.Fatalf("instance ceiling: %d %v", c.status, c.header)
					}
					return
				}
			}
		}
		var rl *client.RateLimitedError
		exhaust()
		if _, err := newClient(t, ceiling.base, nt.LiveKey).Check(ctx, item); !errors.As(err, &rl) || rl.Layer != "instance" || rl.Limit != 3 || rl.RetryAfter != time.Second {
			t.Fatalf("without retry: %v", err)
		}
		// The first attempt may fall in the next second and pass: then the
		// ceiling is exhausted again until one attempt is refused.
		for try := 0; ; try++ {
			ct := &countingTransport{}
			tg := newClient(t, ceiling.base, nt.LiveKey, client.WithRetry(3, 2*time.Second), client.WithHTTPClient(&http.Client{Transport: ct}))
			exhaust()
			start := time.Now()
			d, err := tg.Check(ctx, item)
			if err != nil || !d.Allowed || d.Degraded {
				t.Fatalf("with retry: %+v, %v after %d round trips", d, err, ct.n.Load())
			}
			if ct.n.Load() >= 2 {
				if took := time.Since(start); took < 500*time.Millisecond {
					t.Errorf("retried after %s, before the Retry-After of 1 s", took)
				}
				break
			}
			if try == 5 {
				t.Fatalf("no attempt refused by the instance ceiling in 5 tries")
			}
		}
	})
}

func hello() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
}

// TestClientFailModes: with Tollgate stopped, stalled, or unable to answer
// (a 5xx), the client answers with its fail mode at once, and the
// middleware lets requests through (FailOpen) or answers 503 (FailClosed).
func TestClientFailModes(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	// Another instance reaches PostgreSQL through a link the test cuts.
	// (After the cut, its first requests may answer 500 while its pool
	// drops dead connections: the other subtests keep off it.)
	u, _ := url.Parse(dsn)
	pgProxy := faultnet.New(t, u.Host)
	u.Host = pgProxy.Addr()
	cut := start(t, u.String(), patientStore)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "api", map[string]any{"limit": 1000, "window": "1h"})
	ctx := context.Background()
	item := client.Item{Policy: "api", Subject: "s"}

	t.Run("5xx", func(t *testing.T) {
		tg := newClient(t, cut.base, nt.LiveKey)
		if _, err := tg.Usage(ctx); err != nil {
			t.Fatal(err)
		}
		// The tenant's policies are loaded (and cached) by its first check.
		if d, err := tg.Check(ctx, item); err != nil || !d.Allowed || d.Degraded {
			t.Fatalf("before the cut: %+v, %v", d, err)
		}
		pgProxy.Cut()
		// /v1/usage reads PostgreSQL: Tollgate answers 500, which is
		// unavailable to the client.
		if _, err := tg.Usage(ctx); !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "500") {
			t.Fatalf("usage with PostgreSQL cut off: %v", err)
		}
		// A check is answered by Tollgate's own degraded mode: a decision,
		// not an error.
		if d, err := tg.Check(ctx, item); err != nil || !d.Allowed || !d.Degraded {
			t.Fatalf("check with PostgreSQL cut off: %+v, %v", d, err)
		}
		if err := pgProxy.Restore(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stalled", func(t *testing.T) {
		proxy := faultnet.New(t, strings.TrimPrefix(in.base, "http://"))
		base := "http://" + proxy.Addr()
		if d, err := newClient(t, base, nt.LiveKey).Check(ctx, item); err != nil || !d.Allowed {
			t.Fatalf("through the proxy: %+v, %v", d, err)
		}
		proxy.Stall()
		defer proxy.Restore()
		// The default per-call timeout, 100 ms.
		tg, err := client.New(base, nt.LiveKey, client.WithFailMode(client.FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d, err := tg.Check(ctx, item)
		took := time.Since(start)
		if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || d.Allowed || !d.Degraded {
			t.Fatalf("stalled Tollgate: %+v, %v", d, err)
		}
		if took < 100*time.Millisecond || took > time.Second {
			t.Errorf("stalled Tollgate answered by the fail mode after %s, want about 100 ms", took)
		}
		// A caller's deadline shorter than the per-call timeout wins.
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := newClient(t, base, nt.LiveKey).Check(cctx, item); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stalled Tollgate, 50 ms context: %v", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("a 50 ms context ended a call with a 5 s timeout after %s", took)
		}
	})

	t.Run("stopped", func(t *testing.T) {
		open := newClient(t, in.base, nt.LiveKey)
		closed := newClient(t, in.base, nt.LiveKey, client.WithFailMode(client.FailClosed))
		mws := map[client.FailMode]*httptest.Server{}
		for mode, c := range map[client.FailMode]*client.Client{client.FailOpen: open, client.FailClosed: closed} {
			if d, err := c.Check(ctx, item); err != nil || !d.Allowed {
				t.Fatalf("before the stop: %+v, %v", d, err)
			}
			mw, err := client.Middleware(c, client.MiddlewareConfig{Policy: "api", Key: client.ByHeader("X-User")})
			if err != nil {
				t.Fatal(err)
			}
			app := httptest.NewServer(mw(hello()))
			defer app.Close()
			mws[mode] = app
			if c := appGet(t, app.URL, "X-User", "u"); c.status != 200 || c.header.Get("RateLimit") == "" {
				t.Fatalf("app before the stop: %d %v", c.status, c.header)
			}
		}
		stop(t, in)
		for mode, c := range map[client.FailMode]*client.Client{client.FailOpen: open, client.FailClosed: closed} {
			start := time.Now()
			d, err := c.Check(ctx, item)
			if !errors.Is(err, client.ErrUnavailable) || d.Allowed != (mode == client.FailOpen) || !d.Degraded {
				t.Errorf("failing %s with Tollgate stopped: %+v, %v", mode, d, err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("failing %s with Tollgate stopped took %s", mode, took)
			}
			if _, err := c.Usage(ctx); !errors.Is(err, client.ErrUnavailable) {
				t.Errorf("usage with Tollgate stopped: %v", err)
			}
			l, err := c.Acquire(ctx, "exports", "s", time.Minute)
			if !errors.Is(err, client.ErrUnavailable) || l.Allowed != (mode == client.FailOpen) || !l.Degraded || l.ID != "" {
				t.Errorf("lease failing %s with Tollgate stopped: %+v, %v", mode, l, err)
			}
			if err := c.Release(ctx, l); err != nil {
				t.Errorf("releasing the fail mode's lease: %v", err)
			}
		}
		if c := appGet(t, mws[client.FailOpen].URL, "X-User", "u"); c.status != 200 || string(c.body) != "hello" || c.header.Get("RateLimit") != "" {
			t.Errorf("app failing open: %d %q %v", c.status, c.body, c.header)
		}
		c := appGet(t, mws[client.FailClosed].URL, "X-User", "u")
		if c.status != 503 || c.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("app failing closed: %d %q %v", c.status, c.body, c.header)
		}
		noTollgateDetails(t, c, in, nt.LiveKey)
	})
}

// rateLimitRE matches one entry of the middleware's RateLimit header.
var rateLimitRE = regexp.MustCompile(`^"([^"]+)";r=(\d+);t=(\d+)$`)

// TestClientMiddleware: the net/http and Echo middleware against a real
// Tollgate: allowed requests carry RateLimit-Policy and RateLimit, the
// refused one the app's 429 with Retry-After, keyed by header, by client
// address (believing X-Forwarded-For from trusted proxies only) or
// unkeyed; a shadow policy publishes nothing; chained middlewares publish
// one entry each.
func TestClientMiddleware(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	for _, name := range []string{"by-header", "by-ip", "by-proxied-ip", "unkeyed", "echo", "outer"} {
		putPolicy(t, in, nt.LiveKey, name, map[string]any{"limit": 2, "window": "1h"})
	}
	putPolicy(t, in, nt.LiveKey, "dark", map[string]any{"limit": 1, "window": "1h", "shadow": true})
	tg := newClient(t, in.base, nt.LiveKey)
	serve := func(cfg client.MiddlewareConfig) string {
		mw, err := client.Middleware(tg, cfg)
		if err != nil {
			t.Fatal(err)
		}
		app := httptest.NewServer(mw(hello()))
		t.Cleanup(app.Close)
		return app.URL
	}
	// twoThenRefused makes three requests as one client: two allowed with
	// the policy's fields, the third the app's 429.
	twoThenRefused := func(what, app, name string, headers ...string) {
		t.Helper()
		for i := range 3 {
			c := appGet(t, app, headers...)
			noTollgateDetails(t, c, in, nt.LiveKey)
			if got, want := c.header.Get("RateLimit-Policy"), fmt.Sprintf("%q;q=2;w=3600", name); got != want {
				t.Errorf("%s, request %d: RateLimit-Policy %q, want %q", what, i+1, got, want)
			}
			m := rateLimitRE.FindStringSubmatch(c.header.Get("RateLimit"))
			if m == nil || m[1] != name || m[2] != strconv.Itoa(max(0, 1-i)) {
				t.Errorf("%s, request %d: RateLimit %q, want %q;r=%d;t=…", what, i+1, c.header.Get("RateLimit"), name, max(0, 1-i))
				continue
			}
			if secs, _ := strconv.Atoi(m[3]); secs < 1 || secs > 3600 {
				t.Errorf("%s, request %d: RateLimit t=%d, want within the hour", what, i+1, secs)
			}
			if i < 2 {
				if c.status != 200 || string(c.body) != "hello" {
					t.Errorf("%s, request %d: %d %s", what, i+1, c.status, c.body)
				}
				continue
			}
			var p map[string]any
			if c.status != 429 || c.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%s, request 3: %d %s", what, c.status, c.body)
			}
			c.json(t, &p)
			retry, err := strconv.Atoi(c.header.Get("Retry-After"))
			if err != nil || retry < 1 || retry > 3600 || m[3] != c.header.Get("Retry-After") || p["status"] != 429.0 {
				t.Errorf("%s, refused: Retry-After %q, RateLimit %q, body %s", what, c.header.Get("Retry-After"), c.header.Get("RateLimit"), c.body)
			}
		}
	}

	t.Run("by header", func(t *testing.T) {
		app := serve(client.MiddlewareConfig{Policy: "by-header", Name: "api", Key: client.ByHeader("X-User")})
		twoThenRefused("user a", app, "api", "X-User", "a")
		twoThenRefused("user b", app, "api", "X-User", "b")
	})
	t.Run("unkeyed", func(t *testing.T) {
		app := serve(client.MiddlewareConfig{Policy: "unkeyed", Key: client.ByHeader("X-User")})
		// Requests without the header share one bucket.
		twoThenRefused("no header", app, "unkeyed")
	})
	t.Run("by client address", func(t *testing.T) {
		// No trusted proxy: X-Forwarded-For does not move the key.
		direct := serve(client.MiddlewareConfig{Policy: "by-ip"})
		for i := range 3 {
			c := appGet(t, direct, "X-Forwarded-For", docIP(0, i))
			if want := []int{200, 200, 429}[i]; c.status != want {
				t.Errorf("rotating X-Forwarded-For, request %d: %d, want %d", i+1, c.status, want)
			}
		}
		// Behind a trusted proxy (the test, 127.0.0.1), each forwarded client
		// has its own bucket.
		proxied := serve(client.MiddlewareConfig{Policy: "by-proxied-ip", Key: client.ByIP(client.IPConfig{
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		})})
		twoThenRefused("forwarded client 1", proxied, "by-proxied-ip", "X-Forwarded-For", docIP(1, 1))
		twoThenRefused("forwarded client 2", proxied, "by-proxied-ip", "X-Forwarded-For", "203.0.113.9, "+docIP(1, 2))
		// One IPv6 /64 is one client.
		twoThenRefused("IPv6 /64", proxied, "by-proxied-ip", "X-Forwarded-For", "2001:db8:7:7::1")
		if c := appGet(t, proxied, "X-Forwarded-For", "2001:db8:7:7:ffff::2"); c.status != 429 {
			t.Errorf("another address of the same /64: %d", c.status)
		}
	})
	t.Run("shadow", func(t *testing.T) {
		app := serve(client.MiddlewareConfig{Policy: "dark", Key: client.ByHeader("X-User")})
		for i := range 3 {
			c := appGet(t, app, "X-User", "a")
			if c.status != 200 || c.header.Get("RateLimit") != "" || c.header.Get("RateLimit-Policy") != "" {
				t.Errorf("shadow policy, request %d: %d %v", i+1, c.status, c.header)
			}
		}
	})
	t.Run("chained", func(t *testing.T) {
		outer, err := client.Middleware(tg, client.MiddlewareConfig{Policy: "outer", Key: client.ByHeader("X-User")})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := client.Middleware(tg, client.MiddlewareConfig{Policy: "by-header", Name: "api", Key: client.ByHeader("X-User")})
		if err != nil {
			t.Fatal(err)
		}
		app := httptest.NewServer(outer(inner(hello())))
		defer app.Close()
		c := appGet(t, app.URL, "X-User", "chained")
		if got := c.header.Values("RateLimit-Policy"); c.status != 200 || len(got) != 2 || got[0] != `"outer";q=2;w=3600` || got[1] != `"api";q=2;w=3600` {
			t.Errorf("two middlewares: %d, RateLimit-Policy %q", c.status, got)
		}
		if got := c.header.Values("RateLimit"); len(got) != 2 || !strings.HasPrefix(got[0], `"outer";r=1;`) || !strings.HasPrefix(got[1], `"api";r=1;`) {
			t.Errorf("two middlewares: RateLimit %q", got)
		}
	})
	t.Run("echo", func(t *testing.T) {
		limit, err := echomw.Middleware(tg, client.MiddlewareConfig{Policy: "echo", Key: client.ByHeader("X-User")})
		if err != nil {
			t.Fatal(err)
		}
		e := echo.New()
		e.Use(limit)
		e.GET("/hello", func(c echo.Context) error {
			if d, ok := client.DecisionFromContext(c.Request().Context()); !ok || !d.Allowed {
				return c.String(http.StatusInternalServerError, "no decision in the context")
			}
			return c.String(http.StatusOK, "hello")
		})
		app := httptest.NewServer(e)
		defer app.Close()
		twoThenRefused("echo", app.URL, "echo", "X-User", "a")
	})
}

// TestClientLeasesAndReset: Acquire holds at most a concurrency policy's
// limit at once across two instances, many goroutines racing; Release
// frees a place at once and is idempotent; Renew moves the expiry and
// reports a lost lease as ErrLeaseGone; an unrenewed lease lapses; Reset
// starts a subject afresh (its counter, or its leases), escaping any
// subject, and a test key resets only its sandbox.
func TestClientLeasesAndReset(t *testing.T) {
	dsn := pgtest.New(t)
	a, b := start(t, dsn, patientStore), start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: a, key: nt.LiveKey}
	u.putPolicy("exports", map[string]any{"limit": 3, "algorithm": "concurrency"})
	u.putPolicy("failed-sign-ins", map[string]any{"limit": 2, "window": "15m"})
	eventually.True(t, 2*time.Second, "policies on the other instance", func() bool {
		return u.on(b).call("GET", "/v1/policies/exports", nil).status == 200 && u.on(b).call("GET", "/v1/policies/failed-sign-ins", nil).status == 200
	})
	tgA, tgB := newClient(t, a.base, nt.LiveKey), newClient(t, b.base, nt.LiveKey)
	ctx := context.Background()

	t.Run("acquire and release", func(t *testing.T) {
		var held []client.Lease
		for i := range 3 {
			l, err := []*client.Client{tgA, tgB}[i%2].Acquire(ctx, "exports", "account:1", time.Minute)
			if err != nil || !l.Allowed || l.ID == "" || l.InFlight != int64(i+1) || l.Limit != 3 || l.Degraded ||
				l.ExpiresAt.Before(time.Now().Add(50*time.Second)) || l.ExpiresAt.After(time.Now().Add(61*time.Second)) {
				t.Fatalf("lease %d: %+v, %v", i+1, l, err)
			}
			held = append(held, l)
		}
		l, err := tgB.Acquire(ctx, "exports", "account:1", time.Minute)
		if err != nil || l.Allowed || l.ID != "" || l.InFlight != 3 || l.RetryAfter <= 0 || l.RetryAfter > time.Minute {
			t.Fatalf("a fourth lease at a limit of 3: %+v, %v", l, err)
		}
		// Another subject has places of its own.
		if l, err := tgA.Acquire(ctx, "exports", "account:2", time.Minute); err != nil || !l.Allowed || l.InFlight != 1 {
			t.Fatalf("another subject: %+v, %v", l, err)
		} else if err := tgA.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		// A release on one instance frees the place on the other at once.
		if err := tgA.Release(ctx, held[1]); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := tgB.Release(ctx, held[1]); err != nil {
			t.Errorf("releasing twice: %v, want nil", err)
		}
		l, err = tgB.Acquire(ctx, "exports", "account:1", time.Minute)
		if err != nil || !l.Allowed || l.InFlight != 3 {
			t.Fatalf("after a release: %+v, %v", l, err)
		}
		for _, l := range append(held, l) {
			if err := tgA.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		// A malformed lease id is Tollgate's 400, not a release.
		var ae *client.APIError
		if err := tgA.Release(ctx, client.Lease{ID: "not-a-lease"}); !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "id" {
			t.Errorf("release of a malformed id: %v", err)
		}
		// A check of a concurrency policy is a 400 naming the item.
		if _, err := tgA.Check(ctx, client.Item{Policy: "exports", Subject: "account:1"}); !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "items[0].policy" {
			t.Errorf("check of a concurrency policy: %v", err)
		}
	})

	t.Run("many holders", func(t *testing.T) {
		// 24 workers on two instances take, hold and release places: never
		// more than 3 held at once (a refusal means Tollgate saw 3 held).
		var holding, most, granted, refused atomic.Int64
		var wg sync.WaitGroup
		for w := range 24 {
			wg.Go(func() {
				tg := []*client.Client{tgA, tgB}[w%2]
				for range 10 {
					l, err := tg.Acquire(ctx, "exports", "account:many", time.Minute)
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if !l.Allowed {
						refused.Add(1)
						continue
					}
					granted.Add(1)
					n := holding.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if l.InFlight > 3 {
						t.Errorf("granted with %d in flight", l.InFlight)
					}
					// Hold the place a while, so that holders overlap.
					time.Sleep(10 * time.Millisecond)
					holding.Add(-1)
					if err := tg.Release(ctx, l); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d granted, %d refused, at most %d held at once", granted.Load(), refused.Load(), most.Load())
		if most.Load() > 3 || granted.Load() == 0 || refused.Load() == 0 {
			t.Fatalf("%d granted, %d refused, at most %d held at once (limit 3)", granted.Load(), refused.Load(), most.Load())
		}
		// Everything released: the three places are free.
		for i := range 3 {
			if l, err := tgA.Acquire(ctx, "exports", "account:many", time.Minute); err != nil || !l.Allowed || l.InFlight != int64(i+1) {
				t.Fatalf("after the race, lease %d: %+v, %v", i+1, l, err)
			}
		}
	})

	t.Run("renew and lapse", func(t *testing.T) {
		l, err := tgA.Acquire(ctx, "exports", "account:renew", 2*time.Second)
		if err != nil || !l.Allowed {
			t.Fatalf("acquire: %+v, %v", l, err)
		}
		r, err := tgB.Renew(ctx, l, time.Hour)
		if err != nil || r.ID != l.ID || !r.ExpiresAt.After(l.ExpiresAt.Add(50*time.Minute)) || r.InFlight != l.InFlight || r.Limit != 3 {
			t.Fatalf("renew: %+v, %v (was %+v)", r, err, l)
		}
		if err := tgA.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := tgA.Renew(ctx, r, time.Minute); !errors.Is(err, client.ErrLeaseGone) {
			t.Fatalf("renewing a released lease: %v, want ErrLeaseGone", err)
		}
		// A lease neither released nor renewed frees its place when it lapses.
		for range 3 {
			if l, err := tgA.Acquire(ctx, "exports", "account:lapse", time.Second); err != nil || !l.Allowed {
				t.Fatalf("acquire: %+v, %v", l, err)
			}
		}
		eventually.True(t, 5*time.Second, "a lapsed lease's place free", func() bool {
			l, err := tgB.Acquire(ctx, "exports", "account:lapse", time.Minute)
			return err == nil && l.Allowed
		})
	})

	t.Run("reset", func(t *testing.T) {
		for _, subject := range []string{"account:7", "a/b c?d#e%f", "ünïcode"} {
			item := client.Item{Policy: "failed-sign-ins", Subject: subject}
			for i, want := range []bool{true, true, false} {
				if d, err := tgA.Check(ctx, item); err != nil || d.Allowed != want {
					t.Fatalf("%q, check %d: %+v, %v", subject, i+1, d, err)
				}
			}
			if err := tgB.Reset(ctx, "failed-sign-ins", subject); err != nil {
				t.Fatalf("reset %q: %v", subject, err)
			}
			if d, err := tgA.Check(ctx, item); err != nil || !d.Allowed || d.Items[0].Remaining != 1 {
				t.Fatalf("%q after the reset: %+v, %v", subject, d, err)
			}
		}
		// A reset of a concurrency policy drops the subject's leases.
		l, err := tgA.Acquire(ctx, "exports", "account:reset", time.Minute)
		if err != nil || !l.Allowed {
			t.Fatalf("acquire: %+v, %v", l, err)
		}
		if err := tgA.Reset(ctx, "exports", "account:reset"); err != nil {
			t.Fatal(err)
		}
		if _, err := tgA.Renew(ctx, l, time.Minute); !errors.Is(err, client.ErrLeaseGone) {
			t.Errorf("renewing a lease dropped by a reset: %v", err)
		}
		var ae *client.APIError
		if err := tgA.Reset(ctx, "no-such-policy", "s"); !errors.As(err, &ae) || ae.Status != 404 {
			t.Errorf("reset of an unknown policy: %v", err)
		}
		// A test key resets the sandbox's counter, never the live one.
		item := client.Item{Policy: "failed-sign-ins", Subject: "account:sandboxed"}
		sandbox := newClient(t, a.base, nt.TestKey)
		for _, tg := range []*client.Client{tgA, sandbox} {
			for range 2 {
				if d, err := tg.Check(ctx, item); err != nil || !d.Allowed {
					t.Fatalf("check: %+v, %v", d, err)
				}
			}
		}
		if err := sandbox.Reset(ctx, item.Policy, item.Subject); err != nil {
			t.Fatalf("reset with a test key: %v", err)
		}
		if d, err := sandbox.Check(ctx, item); err != nil || !d.Allowed {
			t.Errorf("sandbox after its reset: %+v, %v", d, err)
		}
		if d, err := tgA.Check(ctx, item); err != nil || d.Allowed {
			t.Errorf("live counter after a test key's reset: %+v, %v (want still refused)", d, err)
		}
	})
}

// TestClientSubjectsOfAnyLength: a subject Tollgate would refuse (longer
// than its 512 bytes, or not UTF-8) is sent as its digest, so that it is
// limited like any other: six requests of a 600-byte X-User at 3 an hour
// are three 200s and three 429s through the net/http and Echo middleware;
// two such subjects differing in one byte, and two invalid UTF-8 subjects,
// are counted apart; Peek, Reset and Acquire see the same subject.
func TestClientSubjectsOfAnyLength(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	for _, name := range []string{"long-http", "long-echo", "direct"} {
		putPolicy(t, in, nt.LiveKey, name, map[string]any{"limit": 3, "window": "1h"})
	}
	putPolicy(t, in, nt.LiveKey, "exports", map[string]any{"limit": 1, "algorithm": "concurrency"})
	tg := newClient(t, in.base, nt.LiveKey)
	ctx := context.Background()
	long := strings.Repeat("u", 599)

	sixRequests := func(what, app string) {
		t.Helper()
		for i, want := range []int{200, 200, 200, 429, 429, 429} {
			if c := appGet(t, app, "X-User", long+"a"); c.status != want {
				t.Errorf("%s, request %d of a 600-byte X-User: %d %s, want %d", what, i+1, c.status, c.body, want)
			}
		}
		// Another user of the same length is another bucket.
		if c := appGet(t, app, "X-User", long+"b"); c.status != 200 {
			t.Errorf("%s, another 600-byte X-User: %d %s, want 200", what, c.status, c.body)
		}
	}
	t.Run("net/http", func(t *testing.T) {
		mw, err := client.Middleware(tg, client.MiddlewareConfig{Policy: "long-http", Key: client.ByHeader("X-User")})
		if err != nil {
			t.Fatal(err)
		}
		app := httptest.NewServer(mw(hello()))
		defer app.Close()
		sixRequests("net/http", app.URL)
	})
	t.Run("echo", func(t *testing.T) {
		limit, err := echomw.Middleware(tg, client.MiddlewareConfig{Policy: "long-echo", Key: client.ByHeader("X-User")})
		if err != nil {
			t.Fatal(err)
		}
		e := echo.New()
		e.Use(limit)
		e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
		app := httptest.NewServer(e)
		defer app.Close()
		sixRequests("echo", app.URL)
	})
	t.Run("check, peek and reset", func(t *testing.T) {
		for _, pair := range [][2]string{{"user\xff", "user\xfe"}, {long + "x", long + "y"}} {
			one, other := client.Item{Policy: "direct", Subject: pair[0]}, client.Item{Policy: "direct", Subject: pair[1]}
			for i, want := range []bool{true, true, true, false} {
				if d, err := tg.Check(ctx, one); err != nil || d.Allowed != want {
					t.Fatalf("%.20q…, check %d: %+v, %v", pair[0], i+1, d, err)
				}
			}
			if d, err := tg.Peek(ctx, one); err != nil || d.Allowed {
				t.Errorf("%.20q…, peek after the limit: %+v, %v", pair[0], d, err)
			}
			if d, err := tg.Check(ctx, other); err != nil || !d.Allowed || d.Items[0].Remaining != 2 {
				t.Errorf("%.20q… after %.20q…: %+v, %v (want a bucket of its own)", pair[1], pair[0], d, err)
			}
			if err := tg.Reset(ctx, "direct", pair[0]); err != nil {
				t.Fatalf("reset %.20q…: %v", pair[0], err)
			}
			if d, err := tg.Check(ctx, one); err != nil || !d.Allowed || d.Items[0].Remaining != 2 {
				t.Errorf("%.20q… after its reset: %+v, %v", pair[0], d, err)
			}
		}
	})
	t.Run("leases", func(t *testing.T) {
		l, err := tg.Acquire(ctx, "exports", long+"z", time.Minute)
		if err != nil || !l.Allowed || l.ID == "" {
			t.Fatalf("acquire for a 600-byte subject: %+v, %v", l, err)
		}
		if l, err := tg.Acquire(ctx, "exports", long+"z", time.Minute); err != nil || l.Allowed {
			t.Fatalf("a second lease at a limit of 1: %+v, %v", l, err)
		}
		if err := tg.Reset(ctx, "exports", long+"z"); err != nil {
			t.Fatalf("reset: %v", err)
		}
		if l, err := tg.Acquire(ctx, "exports", long+"z", time.Minute); err != nil || !l.Allowed {
			t.Fatalf("after the reset: %+v, %v", l, err)
		}
	})
}

// TestClientCallErrorsAreLoud: a call Tollgate refuses as wrong (an unknown
// policy, a key it does not know, a bad cost) is an error and never the
// fail mode's allow: building the middleware with a wrong key or policy
// fails, and a key revoked or a policy deleted after it was built makes
// every request fail (500), whatever the fail mode, while OnError hears why.
func TestClientCallErrorsAreLoud(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "api", map[string]any{"limit": 1000, "window": "1h"})
	putPolicy(t, in, nt.LiveKey, "exports", map[string]any{"limit": 1, "algorithm": "concurrency"})
	tg := newClient(t, in.base, nt.LiveKey)
	stranger := newClient(t, in.base, "tg_live_0000000000000000000000000000")
	ctx := context.Background()

	t.Run("calls", func(t *testing.T) {
		var ae *client.APIError
		for _, ask := range []func(context.Context, ...client.Item) (client.Decision, error){tg.Check, tg.Peek} {
			d, err := ask(ctx, client.Item{Policy: "no-such-policy", Subject: "s"})
			if !errors.As(err, &ae) || ae.Status != 400 || errors.Is(err, client.ErrUnavailable) || d.Allowed || d.Degraded {
				t.Errorf("unknown policy: %+v, %v (want an error and no allow)", d, err)
			}
			d, err = stranger.Check(ctx, client.Item{Policy: "api", Subject: "s"})
			if !errors.As(err, &ae) || ae.Status != 401 || d.Allowed {
				t.Errorf("unknown key: %+v, %v", d, err)
			}
		}
		if l, err := tg.Acquire(ctx, "no-such-policy", "s", time.Minute); !errors.As(err, &ae) || l.Allowed {
			t.Errorf("lease of an unknown policy: %+v, %v", l, err)
		}
		if l, err := stranger.Acquire(ctx, "exports", "s", time.Minute); !errors.As(err, &ae) || ae.Status != 401 || l.Allowed {
			t.Errorf("lease with an unknown key: %+v, %v", l, err)
		}
		if err := tg.Verify(ctx, "api", "exports"); err != nil {
			t.Errorf("Verify of a good key and policies: %v", err)
		}
		if err := tg.Verify(ctx, "api", "no-such-policy"); !errors.As(err, &ae) || ae.Status != 404 {
			t.Errorf("Verify of an unknown policy: %v", err)
		}
		if err := stranger.Verify(ctx); !errors.As(err, &ae) || ae.Status != 401 {
			t.Errorf("Verify of an unknown key: %v", err)
		}
	})

	t.Run("built", func(t *testing.T) {
		var ae *client.APIError
		for name, tt := range map[string]struct {
			c      *client.Client
			policy string
			status int
		}{
			"unknown key":        {stranger, "api", 401},
			"unknown policy":     {tg, "no-such-policy", 404},
			"concurrency policy": {tg, "exports", 0},
		} {
			cfg := client.MiddlewareConfig{Policy: tt.policy}
			_, err := client.Middleware(tt.c, cfg)
			_, errEcho := echomw.Middleware(tt.c, cfg)
			for _, err := range []error{err, errEcho} {
				if err == nil || (tt.status != 0 && (!errors.As(err, &ae) || ae.Status != tt.status)) {
					t.Errorf("%s: middleware built, err %v", name, err)
				}
			}
		}
	})

	t.Run("at request time", func(t *testing.T) {
		var k struct {
			KeyID string `json:"key_id"`
			Key   string `json:"key"`
		}
		cli(t, dsn, &k, "keys", "create", "--tenant", nt.TenantID)
		putPolicy(t, in, nt.LiveKey, "doomed", map[string]any{"limit": 1000, "window": "1h"})
		type app struct {
			name  string
			url   string
			heard *atomic.Pointer[error]
		}
		var apps []app
		for _, mode := range []client.FailMode{client.FailOpen, client.FailClosed} {
			for _, policy := range []string{"api", "doomed"} {
				key := map[string]string{"api": k.Key, "doomed": nt.LiveKey}[policy]
				var heard atomic.Pointer[error]
				cfg := client.MiddlewareConfig{Policy: policy, OnError: func(_ *http.Request, err error) { heard.Store(&err) }}
				c := newClient(t, in.base, key, client.WithFailMode(mode))
				mw, err := client.Middleware(c, cfg)
				if err != nil {
					t.Fatal(err)
				}
				h := httptest.NewServer(mw(hello()))
				defer h.Close()
				apps = append(apps, app{fmt.Sprintf("net/http %s %s", policy, mode), h.URL, &heard})
				limit, err := echomw.Middleware(c, cfg)
				if err != nil {
					t.Fatal(err)
				}
				e := echo.New()
				e.Use(limit)
				e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
				eh := httptest.NewServer(e)
				defer eh.Close()
				apps = append(apps, app{fmt.Sprintf("echo %s %s", policy, mode), eh.URL, &heard})
			}
		}
		for _, a := range apps {
			if c := appGet(t, a.url); c.status != 200 {
				t.Fatalf("%s before: %d %s", a.name, c.status, c.body)
			}
		}
		cli(t, dsn, nil, "keys", "revoke", k.KeyID)
		if c := do(t, "DELETE", in.base+"/v1/policies/doomed", nt.LiveKey, nil); c.status != 204 {
			t.Fatalf("delete policy: %d %s", c.status, c.body)
		}
		eventually.True(t, 5*time.Second, "the key revoked and the policy gone", func() bool {
			return do(t, "GET", in.base+"/v1/usage", k.Key, nil).status == 401 &&
				check(t, in, nt.LiveKey, map[string]any{"policy": "doomed", "subject": "s"}).status == 400
		})
		for _, a := range apps {
			for i := range 3 {
				a.heard.Store(nil)
				c := appGet(t, a.url)
				if c.status != 500 || string(c.body) == "hello" {
					t.Errorf("%s, request %d: %d %s, want 500", a.name, i+1, c.status, c.body)
				}
				noTollgateDetails(t, c, in, k.Key)
				var heard error
				if p := a.heard.Load(); p != nil {
					heard = *p
				}
				var ae *client.APIError
				if !errors.As(heard, &ae) {
					t.Errorf("%s: OnError heard %v, want an *APIError", a.name, heard)
				}
			}
		}
	})
}
