package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KeyFunc returns the subject a request is counted as: a client address
// (ByIP), a header's value (ByHeader), an account, an API key of the app's
// own. The empty string means the request has none; the middleware counts
// every such request under one subject, Unkeyed.
type KeyFunc func(r *http.Request) string

// Unkeyed is the subject of the one bucket the middleware counts every
// request without a key in: requests that cannot be told apart share a
// limit rather than escape it.
const Unkeyed = "unkeyed"

// ByHeader keys a request by the value of header name (such as
// "X-API-Key"), trimmed; requests without it are Unkeyed. Use it only for
// a header the app itself has checked or that its own proxy sets: a client
// chooses its headers.
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return strings.TrimSpace(r.Header.Get(name)) }
}

// MiddlewareConfig configures Middleware.
type MiddlewareConfig struct {
	// Policy is the Tollgate policy every request is checked against (a
	// consume check). Required.
	Policy string
	// Key returns the subject a request is counted as; nil means
	// ByIP(IPConfig{}), the TCP peer's address.
	Key KeyFunc
	// Cost is what each request spends; 0 means 1.
	Cost int64
	// Name is the policy's name in the RateLimit-Policy and RateLimit
	// headers the app's clients see (printable ASCII: it is sent as a
	// Structured Fields String); empty means Policy.
	Name string
	// OnError, when set, hears every check that had no decision from
	// Tollgate, with the error Check returned (to log: the error never
	// reaches the app's clients), before the request is answered. When
	// it is nil, the errors that fail a request (see Middleware) are
	// logged with slog's default logger; the others, which the FailMode
	// answers, are not.
	OnError func(r *http.Request, err error)
}

// Middleware returns net/http middleware that checks every request against
// cfg.Policy with c, keyed by cfg.Key:
//
//   - allowed: the request goes on, with RateLimit-Policy and RateLimit
//     headers (IETF draft-ietf-httpapi-ratelimit-headers-11) for the policy,
//     `"name";q=limit;w=window` and `"name";r=remaining;t=seconds`, t the
//     seconds until the policy's counter is whole again, and the Decision
//     in its context (DecisionFromContext);
//   - refused: the app answers 429 with those headers, t then the seconds
//     until the check would be allowed, and Retry-After the same, and a
//     problem+json body;
//   - no decision because Tollgate is unavailable (unreachable, too slow,
//     5xx or 408, an answer that is not Tollgate's, a redirect) or its own
//     ceilings or billing refuse the tenant for now (429, 402): the
//     client's FailMode decides. FailOpen lets the request on without
//     rate-limit headers, its Decision marked Degraded in the context;
//     FailClosed answers 503; OnError hears why (a redirect's error names
//     the URL to set);
//   - Tollgate refuses the check itself as wrong (a key it does not know
//     or has revoked, a policy deleted since, any other 4xx problem of
//     Tollgate's): the app answers 500, whatever the FailMode, for every
//     request until the fault is fixed. A limit that is silently off
//     would be found only when it was needed.
//
// Nothing of Tollgate (its address, API key, errors, ceilings) reaches the
// app's clients; a shadow policy, and an answer Tollgate marks degraded,
// set no rate-limit headers. Several middlewares
// chained add one entry each to RateLimit-Policy and RateLimit.
//
// Middleware fails when c is nil, cfg.Policy is empty, cfg.Cost is
// negative or the name is not printable ASCII. It also reads cfg.Policy from Tollgate once (a Verify, bounded
// by the client's per-call timeout), and fails when Tollgate does not know
// the API key (an *APIError with Status 401), has no such policy (404) or
// the policy is a concurrency policy, which a check cannot use. When
// Tollgate is unavailable then, the middleware is built all the same and
// its requests answer as above.
func Middleware(c *Client, cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	switch {
	case c == nil:
		return nil, errors.New("tollgate middleware: nil client")
	case cfg.Policy == "":
		return nil, errors.New("tollgate middleware: no policy")
	case cfg.Cost < 0:
		return nil, fmt.Errorf("tollgate middleware: cost %d: must be at least 0", cfg.Cost)
	}
	name, ok := sfString(cmp.Or(cfg.Name, cfg.Policy))
	if !ok {
		return nil, fmt.Errorf("tollgate middleware: name %q: the RateLimit headers carry printable ASCII only", cmp.Or(cfg.Name, cfg.Policy))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	p, err := c.policy(ctx, cfg.Policy)
	cancel()
	switch {
	case err == nil && p.Algorithm == "concurrency":
		return nil, fmt.Errorf("tollgate middleware: policy %q has algorithm concurrency: it bounds holders in flight, use Acquire and Release", cfg.Policy)
	case err != nil && !failModeDecides(err):
		return nil, fmt.Errorf("tollgate middleware: policy %q: %w", cfg.Policy, err)
	}
	key := cfg.Key
	if key == nil {
		key = ByIP(IPConfig{})
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, err := c.Check(r.Context(), Item{Policy: cfg.Policy, Subject: cmp.Or(key(r), Unkeyed), Cost: cfg.Cost})
			if err != nil {
				refused := !failModeDecides(err)
				switch {
				case cfg.OnError != nil:
					cfg.OnError(r, err)
				case refused:
					slog.ErrorContext(r.Context(), "tollgate middleware: check refused", "policy", cfg.Policy, "err", err)
				}
				if refused {
					writeProblem(w, http.StatusInternalServerError, "The request cannot be served now.")
					return
				}
				if !d.Allowed {
					writeProblem(w, http.StatusServiceUnavailable, "The request cannot be admitted now; try again shortly.")
					return
				}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
				return
			}
			// The one item is the quota the headers name, and when it
			// refuses, RateLimit's t and Retry-After are both its wait (the
			// rule Tollgate's own answers follow).
			var retry int64
			if !d.Allowed {
				retry = max(1, seconds(d.RetryAfter()))
			}
			// A shadow policy limits nobody yet, and a degraded answer
			// has no exact count: neither is published.
			if len(d.Items) == 1 && !d.Items[0].Shadow && !d.Items[0].Degraded {
				it := d.Items[0]
				t := seconds(time.Until(it.ResetAt))
				if !d.Allowed {
					t = retry
				}
				policy := name + ";q=" + strconv.FormatInt(it.Limit, 10)
				if it.Window > 0 {
					policy += ";w=" + strconv.FormatInt(seconds(it.Window), 10)
				}
				h := w.Header()
				h.Add("RateLimit-Policy", policy)
				h.Add("RateLimit", name+";r="+strconv.FormatInt(it.Remaining, 10)+";t="+strconv.FormatInt(t, 10))
			}
			if !d.Allowed {
				w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
				writeProblem(w, http.StatusTooManyRequests, fmt.Sprintf("Too many requests; retry in %d s.", retry))
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
		})
	}, nil
}

type decisionKey struct{}

// DecisionFromContext returns the Decision the middleware made for the
// request whose context ctx is, and whether there was one. Its Degraded
// field tells a handler that Tollgate gave no exact answer.
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

// sfString returns s as an RFC 9651 String ('"' and '\\' escaped), or
// false when s holds a byte a String cannot (outside printable ASCII).
func sfString(s string) (string, bool) {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), true
}

// seconds is d in whole seconds, rounded up, never negative.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// writeProblem answers an RFC 9457 problem of the app's: the status and a
// sentence, nothing of Tollgate.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	body, _ := json.Marshal(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
