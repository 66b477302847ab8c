package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// okDecision is Tollgate's answer to a check of one item of the policy
// "api", as it writes it.
const okDecision = `{"allowed":true,"degraded":false,"items":[{"policy":"api","allowed":true,"limit":10,"remaining":9,"window_seconds":60,"reset_at":"2026-12-05T23:01:00Z","retry_after_ms":0,"shadow":false}]}`

// wrongAnswer is an answer that is not Tollgate's, as something else at
// Tollgate's URL gives it: another service, a captive portal, a load
// balancer's redirect, a web server's 404 page.
type wrongAnswer struct {
	name        string
	status      int
	contentType string // "-": no Content-Type at all
	body        string
	// redirect, when set, is where a 3xx points: "https" for the same
	// host over https, "elsewhere" for another server (the path asked is
	// appended).
	redirect string
	// says is what the error must say.
	says string
	// shape marks an answer whose members are what is wrong: the calls
	// that read other answers than a decision say only that it is not
	// Tollgate's.
	shape bool
}

// ofOtherCalls is a as the calls that read no decision see it.
func (a wrongAnswer) ofOtherCalls() wrongAnswer {
	if a.shape {
		a.says = "not Tollgate's"
	}
	return a
}

// wrongAnswers are the answers that must never come back as a decision, to
// /v1/check and to every other call of the client.
var wrongAnswers = []wrongAnswer{
	{name: "JSON of another service", status: 200, contentType: "application/json", body: `{"ok":true}`, says: "not Tollgate's"},
	{name: "captive portal", status: 200, contentType: "text/html; charset=utf-8", body: `<!doctype html><title>Sign in to the network</title>`, says: "text/html"},
	{name: "decision as text/plain", status: 200, contentType: "text/plain; charset=utf-8", body: okDecision, says: "text/plain"},
	{name: "decision without Content-Type", status: 200, contentType: "-", body: okDecision, says: "no Content-Type"},
	{name: "problem with status 200", status: 200, contentType: "application/problem+json", body: answerProblem, says: "application/problem+json"},
	{name: "truncated JSON", status: 200, contentType: "application/json", body: okDecision[:70], says: "not Tollgate's"},
	{name: "decision without allowed", status: 200, contentType: "application/json", body: strings.Replace(okDecision, `"allowed":true,`, ``, 1), says: "allowed", shape: true},
	{name: "allowed null", status: 200, contentType: "application/json", body: strings.Replace(okDecision, `"allowed":true,`, `"allowed":null,`, 1), says: "allowed", shape: true},
	{name: "decision without items", status: 200, contentType: "application/json", body: `{"allowed":true,"degraded":false}`, says: "items", shape: true},
	{name: "item without its decision", status: 200, contentType: "application/json", body: `{"allowed":true,"degraded":false,"items":[{"policy":"api"}]}`, says: "allowed", shape: true},
	{name: "item without remaining", status: 200, contentType: "application/json", body: strings.Replace(okDecision, `"remaining":9,`, ``, 1), says: "remaining", shape: true},
	{name: "no item for the item asked", status: 200, contentType: "application/json", body: `{"allowed":true,"degraded":false,"items":[]}`, says: "0 items for 1", shape: true},
	{name: "no content", status: 204, contentType: "-", says: "204"},
	{name: "301 http to https", status: 301, redirect: "https", says: "set the URL to where it points"},
	{name: "307 to another host", status: 307, redirect: "elsewhere", says: "set the URL to where it points"},
	{name: "HTML 404 at a wrong base URL", status: 404, contentType: "text/html", body: `<html><body><h1>404 Not Found</h1></body></html>`, says: "404"},
	{name: "JSON 404 of another service", status: 404, contentType: "application/json", body: `{"error":"no such route"}`, says: "404"},
}

// wrongServer answers every call with a, and counts the calls that reach
// the server a redirect points to (none may: the API key would go along).
func wrongServer(t *testing.T, a wrongAnswer) (url string, elsewhere *atomic.Int64) {
	t.Helper()
	elsewhere = &atomic.Int64{}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, okDecision)
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answerWrongly(w, r, a, other.URL)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, elsewhere
}

// answerWrongly writes a to w; elsewhere is the server an "elsewhere"
// redirect points to.
func answerWrongly(w http.ResponseWriter, r *http.Request, a wrongAnswer, elsewhere string) {
	switch a.redirect {
	case "https":
		w.Header().Set("Location", "https://"+r.Host+r.URL.Path)
	case "elsewhere":
		w.Header().Set("Location", elsewhere+r.URL.Path)
	}
	if a.contentType == "-" {
		w.Header()["Content-Type"] = nil
	} else if a.contentType != "" {
		w.Header().Set("Content-Type", a.contentType)
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

// wantUnavailable fails t unless err says that Tollgate was unavailable,
// and what a says.
func wantUnavailable(t *testing.T, call string, a wrongAnswer, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("%s: %v, want an error wrapping ErrUnavailable", call, err)
		return
	}
	if !strings.Contains(err.Error(), a.says) {
		t.Errorf("%s: %q does not say %q", call, err, a.says)
	}
	if a.redirect != "" && !strings.Contains(err.Error(), "redirected to http") {
		t.Errorf("%s: %q does not say where it was redirected to", call, err)
	}
	if strings.Contains(err.Error(), "tg_live_") {
		t.Errorf("%s: the error shows the API key: %v", call, err)
	}
}

// TestWrongAnswersAreUnavailable: an answer that is not Tollgate's is no
// decision: Check and Peek answer with the fail mode (marked degraded, no
// items), never a zero Decision (which refuses, not degraded, as if the
// tenant's policy had), and say why with an error wrapping ErrUnavailable;
// Acquire likewise; Verify, Usage and Reset fail with it. A redirect is
// followed by none of them.
func TestWrongAnswersAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, a := range wrongAnswers {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			url, elsewhere := wrongServer(t, a)
			for _, mode := range []FailMode{FailOpen, FailClosed} {
				c, err := New(url, "tg_live_secret", WithFailMode(mode), WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				wantAllowed := mode == FailOpen
				for name, ask := range map[string]func(context.Context, ...Item) (Decision, error){"check": c.Check, "peek": c.Peek} {
					d, err := ask(ctx, Item{Policy: "api", Subject: "s"})
					if d.Allowed != wantAllowed || !d.Degraded || d.Items != nil {
						t.Errorf("%s failing %s: %+v; want the fail mode's decision", name, mode, d)
					}
					wantUnavailable(t, name, a, err)
				}
				o := a.ofOtherCalls()
				l, err := c.Acquire(ctx, "exports", "s", time.Minute)
				if l.Allowed != wantAllowed || !l.Degraded || l.ID != "" {
					t.Errorf("acquire failing %s: %+v; want the fail mode's lease", mode, l)
				}
				wantUnavailable(t, "acquire", o, err)
				wantUnavailable(t, "verify", o, c.Verify(ctx, "api"))
				wantUnavailable(t, "verify of the key", o, c.Verify(ctx))
				_, err = c.Usage(ctx)
				wantUnavailable(t, "usage", o, err)
				if a.status != http.StatusNoContent {
					// Tollgate answers these 204, nothing else.
					r := o
					if a.status == http.StatusOK {
						r.says = "not Tollgate's"
					}
					wantUnavailable(t, "reset", r, c.Reset(ctx, "api", "s"))
					wantUnavailable(t, "release", r, c.Release(ctx, Lease{ID: "ls_0123"}))
				}
				_, err = c.Renew(ctx, Lease{ID: "ls_0123"}, time.Minute)
				wantUnavailable(t, "renew", o, err)
			}
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("the server a redirect points to heard %d calls", n)
			}
		})
	}
}

// TestWrongAnswersInTheMiddleware: behind an answer that is not Tollgate's
// the middleware is built (it is an outage, not a wrong key or policy) and
// its requests get the fail mode: FailOpen serves them, their Decision
// degraded, FailClosed answers 503; never 500, never a panic.
func TestWrongAnswersInTheMiddleware(t *testing.T) {
	t.Parallel()
	for _, a := range wrongAnswers {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			url, _ := wrongServer(t, a)
			for mode, want := range map[FailMode]int{FailOpen: 200, FailClosed: 503} {
				c, err := New(url, "tg_live_secret", WithFailMode(mode), WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var heard error
				mw, err := Middleware(c, MiddlewareConfig{Policy: "api", OnError: func(_ *http.Request, err error) {
					mu.Lock()
					defer mu.Unlock()
					heard = err
				}})
				if err != nil {
					t.Fatalf("failing %s: the middleware is not built: %v", mode, err)
				}
				var seen *Decision
				h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if d, ok := DecisionFromContext(r.Context()); ok {
						seen = &d
					}
					io.WriteString(w, "hello")
				}))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				if w.Code != want {
					t.Errorf("failing %s: %d %q, want %d", mode, w.Code, w.Body, want)
				}
				if mode == FailOpen && (seen == nil || !seen.Allowed || !seen.Degraded) {
					t.Errorf("failing open: the handler saw the decision %+v, want allowed and degraded", seen)
				}
				mu.Lock()
				wantUnavailable(t, "OnError", a, heard)
				mu.Unlock()
			}
		})
	}
}

// wrongBatchAnswers are answers to POST /v1/check/batch, for three checks
// of one item each, that are not Tollgate's.
var wrongBatchAnswers = []wrongAnswer{
	{name: "fewer results than checks", status: 200, contentType: "application/json", body: `{"results":[` + okDecision + `]}`, says: "1 results for 3 checks"},
	{name: "JSON of another service", status: 200, contentType: "application/json", body: `{"ok":true}`, says: "not Tollgate's"},
	{name: "results of another shape", status: 200, contentType: "application/json", body: `{"results":[{"ok":true},{"ok":true},{"ok":true}]}`, says: "allowed"},
	{name: "results without their item", status: 200, contentType: "application/json", body: `{"results":[` + strings.Repeat(`{"allowed":true,"degraded":false,"items":[]},`, 2) + `{"allowed":true,"degraded":false,"items":[]}]}`, says: "0 items for 1"},
	{name: "items without their decision", status: 200, contentType: "application/json", body: `{"results":[` + strings.Repeat(`{"allowed":true,"degraded":false,"items":[{"policy":"api"}]},`, 2) + `{"allowed":true,"degraded":false,"items":[{"policy":"api"}]}]}`, says: "allowed"},
	{name: "captive portal", status: 200, contentType: "text/html", body: `<!doctype html><title>Sign in to the network</title>`, says: "text/html"},
	{name: "answer as text/plain", status: 200, contentType: "text/plain", body: `{"results":[` + okDecision + `,` + okDecision + `,` + okDecision + `]}`, says: "text/plain"},
	{name: "truncated JSON", status: 200, contentType: "application/json", body: `{"results":[` + okDecision + `,` + okDecision[:50], says: "not Tollgate's"},
	{name: "307 to another host", status: 307, redirect: "elsewhere", says: "set the URL to where it points"},
	{name: "HTML 404", status: 404, contentType: "text/html", body: `<html><body><h1>404 Not Found</h1></body></html>`, says: "404"},
}

// TestWrongBatchAnswersAreUnavailable: a batch's answer that is not
// Tollgate's, or a result of it that is no decision, answers each of its
// callers with the fail mode and an error wrapping ErrUnavailable, as
// /v1/check's would.
func TestWrongBatchAnswersAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, a := range wrongBatchAnswers {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			for _, mode := range []FailMode{FailOpen, FailClosed} {
				// The first check goes alone to /v1/check, which answers
				// once the next three, sent meanwhile, went as a batch.
				var batches atomic.Int64
				first, batched := make(chan struct{}), make(chan struct{})
				var firstOnce sync.Once
				other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					t.Errorf("a redirect was followed: %s %s", r.Method, r.URL)
				}))
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/check" {
						firstOnce.Do(func() { close(first) })
						<-batched
						w.Header().Set("Content-Type", "application/json")
						io.WriteString(w, okDecision)
						return
					}
					batches.Add(1)
					answerWrongly(w, r, a, other.URL)
				}))
				c, err := New(srv.URL, "tg_live_secret", WithFailMode(mode), WithTimeout(5*time.Second), WithBatching(time.Hour, 3))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				alone := make(chan error, 1)
				go func() {
					d, err := c.Check(ctx, Item{Policy: "api", Subject: "first"})
					if err == nil && (!d.Allowed || d.Degraded || len(d.Items) != 1) {
						err = fmt.Errorf("decision %+v", d)
					}
					alone <- err
				}()
				<-first
				var wg sync.WaitGroup
				for i := range 3 {
					wg.Go(func() {
						d, err := c.Check(ctx, Item{Policy: "api", Subject: fmt.Sprint("s", i)})
						if d.Allowed != (mode == FailOpen) || !d.Degraded || d.Items != nil {
							t.Errorf("check %d failing %s: %+v; want the fail mode's decision", i, mode, d)
						}
						wantUnavailable(t, fmt.Sprint("check ", i), a, err)
					})
				}
				wg.Wait()
				close(batched)
				if err := <-alone; err != nil {
					t.Errorf("the check sent alone: %v", err)
				}
				if n := batches.Load(); n != 1 {
					t.Errorf("%d batches, want the three checks in one", n)
				}
				srv.Close()
				other.Close()
			}
		})
	}
}
