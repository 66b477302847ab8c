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

// fakeTollgate answers every call with status and a problem body, except
// GET /v1/policies/{name}, which it answers as Tollgate does for an
// existing fixed-window policy unless policyStatus says otherwise. It
// stands for answers Tollgate gives only under conditions a unit test
// cannot make (a key revoked between two calls, a proxy's 502); the
// black-box suite has the real ones.
type fakeTollgate struct {
	*httptest.Server
	status, policyStatus atomic.Int64
}

func newFakeTollgate(t *testing.T, status int) *fakeTollgate {
	t.Helper()
	f := &fakeTollgate{}
	f.status.Store(int64(status))
	f.policyStatus.Store(200)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := int(f.status.Load())
		if r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/policies/") {
			s = int(f.policyStatus.Load())
		}
		switch {
		case s == 200 && strings.HasPrefix(r.URL.Path, "/v1/policies/"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name":%q,"limit":10,"window":"1h","algorithm":"fixed_window"}`, strings.TrimPrefix(r.URL.Path, "/v1/policies/"))
		case s == 200:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, okDecision)
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			if s == 429 {
				w.Header().Set("Retry-After", "1")
				w.Header().Set("X-RateLimit-Layer", "quota")
			}
			w.WriteHeader(s)
			fmt.Fprintf(w, `{"type":"https://tollgate.dev/problems/x","title":%q,"status":%d}`, http.StatusText(s), s)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// TestOnlyUnavailabilityIsFailMode: the fail mode answers when Tollgate
// gives no decision because it is unavailable (5xx, 408) or its own
// ceilings or billing refuse the tenant (429, 402); any other refusal of
// the call (400, 401, 403, 404, 409, 422) is an error with a Decision that
// allows nothing, whatever the fail mode.
func TestOnlyUnavailabilityIsFailMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status   int
		failMode bool
	}{
		{400, false}, {401, false}, {403, false}, {404, false}, {405, false}, {409, false}, {413, false}, {422, false},
		{408, true}, {402, true}, {429, true}, {500, true}, {502, true}, {503, true}, {504, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			f := newFakeTollgate(t, tt.status)
			for _, mode := range []FailMode{FailOpen, FailClosed} {
				c, err := New(f.URL, "tg_live_x", WithFailMode(mode), WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				wantAllowed := tt.failMode && mode == FailOpen
				for name, ask := range map[string]func(context.Context, ...Item) (Decision, error){"check": c.Check, "peek": c.Peek} {
					d, err := ask(ctx, Item{Policy: "api", Subject: "s"})
					if err == nil || d.Allowed != wantAllowed || d.Degraded != tt.failMode || d.Items != nil {
						t.Errorf("%s failing %s: %+v, %v; want allowed %t, degraded %t and an error", name, mode, d, err, wantAllowed, tt.failMode)
					}
					var ae *APIError
					if !tt.failMode && (!errors.As(err, &ae) || ae.Status != tt.status || errors.Is(err, ErrUnavailable)) {
						t.Errorf("%s: %v, want an *APIError of status %d", name, err, tt.status)
					}
				}
				l, err := c.Acquire(ctx, "exports", "s", time.Minute)
				if err == nil || l.Allowed != wantAllowed || l.Degraded != tt.failMode || l.ID != "" {
					t.Errorf("acquire failing %s: %+v, %v; want allowed %t, degraded %t and an error", mode, l, err, wantAllowed, tt.failMode)
				}
			}
		})
	}
}

// TestMiddlewareCallErrors: a call Tollgate refuses as wrong (here a key
// revoked after the middleware was built, a policy deleted) fails every
// request with 500, whatever the fail mode, and OnError hears it; the
// fail mode still answers for an unavailable Tollgate and its ceilings.
func TestMiddlewareCallErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status         int
		open, closed   int
		wantAPIError   bool
		wantHandlerRan bool
	}{
		{401, 500, 500, true, false},
		{400, 500, 500, true, false},
		{403, 500, 500, true, false},
		{404, 500, 500, true, false},
		{429, 200, 503, false, true},
		{402, 200, 503, false, true},
		{502, 200, 503, false, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			f := newFakeTollgate(t, 200)
			for mode, want := range map[FailMode]int{FailOpen: tt.open, FailClosed: tt.closed} {
				c, err := New(f.URL, "tg_live_secret", WithFailMode(mode), WithTimeout(5*time.Second))
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
					t.Fatal(err)
				}
				ran := false
				h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true; io.WriteString(w, "hello") }))
				f.status.Store(int64(tt.status))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				f.status.Store(200)
				if w.Code != want || ran != (tt.wantHandlerRan && mode == FailOpen) {
					t.Errorf("failing %s: %d %q (handler ran: %t), want %d", mode, w.Code, w.Body, ran, want)
				}
				if w.Code >= 500 && w.Header().Get("Content-Type") != "application/problem+json" {
					t.Errorf("failing %s: %d with Content-Type %q", mode, w.Code, w.Header().Get("Content-Type"))
				}
				if b := strings.ToLower(w.Body.String()); strings.Contains(b, "tollgate") || strings.Contains(b, "secret") || strings.Contains(b, f.Listener.Addr().String()) {
					t.Errorf("the answer shows Tollgate's details: %s", b)
				}
				var ae *APIError
				if mu.Lock(); heard == nil || errors.As(heard, &ae) != tt.wantAPIError {
					t.Errorf("failing %s: OnError heard %v", mode, heard)
				}
				mu.Unlock()
			}
		})
	}
}

// TestMiddlewareVerifiesWhenBuilt: building the middleware asks Tollgate
// for the policy once: a key it does not know, a policy it does not have,
// or a concurrency policy (which a check cannot use) fail the build; an
// unavailable Tollgate does not (the fail mode answers for it, request by
// request).
func TestMiddlewareVerifiesWhenBuilt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		ok     bool
	}{
		{"policy exists", 200, "", true},
		{"unknown key", 401, "", false},
		{"unknown policy", 404, "", false},
		{"Tollgate's ceiling", 429, "", true},
		{"Tollgate unavailable", 503, "", true},
		{"concurrency policy", 200, `{"name":"api","limit":3,"algorithm":"concurrency"}`, false},
		{"not Tollgate", 200, `<html>`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if r.Method != "GET" || r.URL.Path != "/v1/policies/api" || r.Header.Get("Authorization") != "Bearer tg_live_x" {
					t.Errorf("verify call: %s %s", r.Method, r.URL)
				}
				if tt.status != 200 {
					// Tollgate's refusal: a problem.
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(tt.status)
					fmt.Fprintf(w, `{"type":"https://tollgate.dev/problems/x","title":%q,"status":%d}`, http.StatusText(tt.status), tt.status)
					return
				}
				if tt.body != `<html>` {
					w.Header().Set("Content-Type", "application/json")
				}
				io.WriteString(w, cmpOr(tt.body, `{"name":"api","limit":10,"window":"1h","algorithm":"fixed_window"}`))
			}))
			defer srv.Close()
			c, err := New(srv.URL, "tg_live_x", WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Middleware(c, MiddlewareConfig{Policy: "api"})
			if (err == nil) != tt.ok || calls.Load() != 1 {
				t.Errorf("built: %v after %d calls, want ok %t after one", err, calls.Load(), tt.ok)
			}
			var ae *APIError
			if !tt.ok && tt.status != 200 && (!errors.As(err, &ae) || ae.Status != tt.status) {
				t.Errorf("%v, want an *APIError of status %d", err, tt.status)
			}
		})
	}
	// Nothing listening: the middleware is built at once.
	c, err := New(closedAddr(t), "tg_live_x")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := Middleware(c, MiddlewareConfig{Policy: "api"}); err != nil || time.Since(start) > 2*time.Second {
		t.Errorf("built with Tollgate down: %v after %s", err, time.Since(start))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
