package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, base, key string
	}{
		{"relative URL", "tollgate.internal:8080", "tg_live_x"},
		{"no host", "http://", "tg_live_x"},
		{"other scheme", "ftp://tollgate.internal", "tg_live_x"},
		{"query", "http://tollgate.internal/?a=b", "tg_live_x"},
		{"user", "http://u:p@tollgate.internal", "tg_live_x"},
		{"not a URL", "http://[::1", "tg_live_x"},
		{"empty key", "http://tollgate.internal", " "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if c, err := New(tt.base, tt.key); err == nil {
				t.Fatalf("New(%q, %q) = %+v, want an error", tt.base, tt.key, c)
			}
		})
	}
	c, err := New("https://tollgate.internal:8080/base/", "tg_live_x")
	if err != nil {
		t.Fatal(err)
	}
	if c.base != "https://tollgate.internal:8080/base" || c.timeout != DefaultTimeout || c.FailMode() != FailOpen || c.attempts != 1 {
		t.Errorf("defaults: base %q timeout %s fail mode %s attempts %d", c.base, c.timeout, c.FailMode(), c.attempts)
	}
}

// TestRateLimitedFromHeaders: a 429 is read from Tollgate's headers first,
// its problem body for what they lack.
func TestRateLimitedFromHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header map[string]string
		body   string
		want   RateLimitedError
	}{
		{"headers and body", map[string]string{"Retry-After": "42", "X-RateLimit-Layer": "quota", "X-RateLimit-Scope": "minute", "X-RateLimit-Limit": "20"},
			`{"layer":"quota","scope":"minute","limit":20,"retry_after_seconds":42,"detail":"The tenant's quota…"}`,
			RateLimitedError{Layer: "quota", Scope: "minute", Limit: 20, RetryAfter: 42 * time.Second, Detail: "The tenant's quota…"}},
		{"headers only", map[string]string{"Retry-After": "1", "X-RateLimit-Layer": "instance", "X-RateLimit-Limit": "5", "X-RateLimit-Degraded": "true"}, ``,
			RateLimitedError{Layer: "instance", Limit: 5, RetryAfter: time.Second, Degraded: true}},
		{"body only", nil, `{"layer":"ip","limit":600,"retry_after_seconds":7,"degraded":true}`,
			RateLimitedError{Layer: "ip", Limit: 600, RetryAfter: 7 * time.Second, Degraded: true}},
		{"not Tollgate's", map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, `<html>`, RateLimitedError{}},
		{"absurd Retry-After", map[string]string{"Retry-After": "99999999999"}, ``, RateLimitedError{RetryAfter: 365 * 24 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := rateLimited(h, []byte(tt.body)); *got != tt.want {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestDecisionRetryAfter(t *testing.T) {
	t.Parallel()
	d := Decision{Items: []ItemDecision{
		{Allowed: true},
		{Allowed: false, RetryAfter: 3 * time.Second},
		{Allowed: false, RetryAfter: time.Hour, Shadow: true},
		{Allowed: false, RetryAfter: 5 * time.Second},
	}}
	if got := d.RetryAfter(); got != 5*time.Second {
		t.Errorf("got %s, want 5s (the longest refused enforced item)", got)
	}
	if got := (Decision{Allowed: true}).RetryAfter(); got != 0 {
		t.Errorf("allowed: got %s, want 0", got)
	}
}

func TestTTLString(t *testing.T) {
	t.Parallel()
	for in, want := range map[time.Duration]string{
		time.Millisecond: "1s", 30 * time.Second: "30s", 1500 * time.Millisecond: "2s", 90 * time.Second: "1m30s",
	} {
		if got := ttlString(in); got == nil || *got != want {
			t.Errorf("ttlString(%s) = %v, want %q", in, got, want)
		}
	}
	for _, in := range []time.Duration{0, -time.Second} {
		if got := ttlString(in); got != nil {
			t.Errorf("ttlString(%s) = %q, want none (Tollgate's default)", in, *got)
		}
	}
}

// closedAddr is the address of a port nothing listens on: a Tollgate that
// is down.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestFailModeWhenDown: with nothing listening, every call fails with
// ErrUnavailable at once, and the decision-making calls answer with the
// fail mode, marked degraded.
func TestFailModeWhenDown(t *testing.T) {
	t.Parallel()
	base := closedAddr(t)
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c, err := New(base, "tg_live_x", WithFailMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			wantAllowed := mode == FailOpen
			d, err := c.Check(ctx, Item{Policy: "p", Subject: "s"})
			if !errors.Is(err, ErrUnavailable) || d.Allowed != wantAllowed || !d.Degraded || d.Items != nil {
				t.Errorf("Check: %+v, %v", d, err)
			}
			if err != nil && strings.Contains(err.Error(), "tg_live_x") {
				t.Errorf("the error shows the API key: %v", err)
			}
			d, err = c.Peek(ctx, Item{Policy: "p", Subject: "s"})
			if !errors.Is(err, ErrUnavailable) || d.Allowed != wantAllowed || !d.Degraded {
				t.Errorf("Peek: %+v, %v", d, err)
			}
			l, err := c.Acquire(ctx, "p", "s", time.Minute)
			if !errors.Is(err, ErrUnavailable) || l.Allowed != wantAllowed || !l.Degraded || l.ID != "" {
				t.Errorf("Acquire: %+v, %v", l, err)
			}
			if err := c.Release(ctx, l); err != nil {
				t.Errorf("Release of a lease the fail mode granted: %v", err)
			}
			if _, err := c.Usage(ctx); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Usage: %v", err)
			}
			if err := c.Reset(ctx, "p", "s"); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Reset: %v", err)
			}
		})
	}
}

// TestMiddlewareWhenDown: with Tollgate down, FailOpen lets requests
// through (the Decision in the context says degraded, no rate-limit
// headers), FailClosed answers 503; OnError hears why; the app's clients
// learn nothing of Tollgate.
func TestMiddlewareWhenDown(t *testing.T) {
	t.Parallel()
	base := closedAddr(t)
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c, err := New(base, "tg_live_secret", WithFailMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			var heard error
			mw, err := Middleware(c, MiddlewareConfig{Policy: "api", OnError: func(_ *http.Request, err error) { heard = err }})
			if err != nil {
				t.Fatal(err)
			}
			var seen *Decision
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d, ok := DecisionFromContext(r.Context())
				if ok {
					seen = &d
				}
				io.WriteString(w, "hello")
			}))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if !errors.Is(heard, ErrUnavailable) {
				t.Errorf("OnError heard %v, want ErrUnavailable", heard)
			}
			for _, name := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
				if v := w.Header().Get(name); v != "" {
					t.Errorf("%s: %q without a decision", name, v)
				}
			}
			body := w.Body.String()
			if strings.Contains(body, base[len("http://"):]) || strings.Contains(body, "secret") || strings.Contains(strings.ToLower(body), "tollgate") {
				t.Errorf("the answer shows Tollgate's details: %s", body)
			}
			switch mode {
			case FailOpen:
				if w.Code != 200 || body != "hello" || seen == nil || !seen.Allowed || !seen.Degraded {
					t.Errorf("fail open: %d %q, decision %+v", w.Code, body, seen)
				}
			case FailClosed:
				if w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" || seen != nil {
					t.Errorf("fail closed: %d %q %v", w.Code, body, w.Header())
				}
			}
		})
	}
}

func TestMiddlewareRefusesBadConfig(t *testing.T) {
	t.Parallel()
	c, err := New("http://tollgate.internal", "tg_live_x")
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		c   *Client
		cfg MiddlewareConfig
	}{
		"nil client":    {nil, MiddlewareConfig{Policy: "p"}},
		"no policy":     {c, MiddlewareConfig{}},
		"negative cost": {c, MiddlewareConfig{Policy: "p", Cost: -1}},
	} {
		if _, err := Middleware(tt.c, tt.cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
