package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout is how long one call to Tollgate may take unless
// WithTimeout says otherwise: a check sits in the path of a request of the
// app's own, so an outage should cost the app milliseconds, not seconds.
const DefaultTimeout = 100 * time.Millisecond

// maxAnswer bounds the bytes read of one answer of Tollgate's: the largest,
// a check of 32 items, is a few kilobytes.
const maxAnswer = 1 << 20

// FailMode is what the decision-making calls (Check, Peek, Acquire) answer
// when Tollgate is unavailable, or its own ceilings or billing refuse the
// tenant for now; never when it refuses a call as wrong (see the package
// doc).
type FailMode int

const (
	// FailOpen allows, marked Degraded: an outage of Tollgate does not
	// become an outage of the app. It is the default.
	FailOpen FailMode = iota
	// FailClosed refuses, marked Degraded: for limits that protect
	// something (sign-in attempts, paid resources) more than they
	// inconvenience.
	FailClosed
)

// String returns "open" or "closed".
func (m FailMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// Client calls one Tollgate service with one API key. It is safe for
// concurrent use; make one and share it.
type Client struct {
	base     string // scheme://host[:port][/path], no trailing slash
	key      string
	hc       *http.Client
	timeout  time.Duration
	failMode FailMode
	attempts int           // 1: no retry
	maxWait  time.Duration // the longest Retry-After a retry waits for
	batcher  *batcher      // nil: each check its own request
}

// Option configures a Client in New.
type Option func(*Client)

// WithTimeout bounds each call to Tollgate (each attempt, when retrying) to
// d; d <= 0 keeps DefaultTimeout. A call that runs out of time fails with
// ErrUnavailable, and the decision-making calls answer with the FailMode.
// The caller's context bounds the whole call too.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithFailMode sets what Check, Peek and Acquire answer when Tollgate is
// unavailable or its own ceilings or billing refuse the tenant; the
// default is FailOpen.
func WithFailMode(m FailMode) Option {
	return func(c *Client) { c.failMode = m }
}

// WithRetry makes a call that Tollgate's own ceilings refuse (a 429, a
// *RateLimitedError) try again after the Retry-After Tollgate names, up to
// attempts tries in all, when that wait is at most maxWait and ends before
// the caller's context does; otherwise the refusal is returned at once.
// Nothing else is retried: a check refused by the ceilings has counted
// nothing, so trying it again is safe, but an unreachable Tollgate is
// answered by the FailMode, not by waiting. Retry is off by default.
func WithRetry(attempts int, maxWait time.Duration) Option {
	return func(c *Client) {
		c.attempts, c.maxWait = max(1, attempts), max(0, maxWait)
	}
}

// WithHTTPClient makes the Client send its requests through hc instead of
// its own (whose transport keeps up to 64 idle connections to Tollgate).
// The per-call timeout still applies; hc's own Timeout, if shorter, too.
// The Client uses a copy of hc that follows no redirect (see New); hc
// itself is left as it is.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// New returns a Client of the Tollgate at baseURL (such as
// "https://tollgate.internal:8080") using apiKey (tg_live_… or tg_test_…).
// It fails when baseURL is not an absolute http or https URL or apiKey is
// empty; it makes no call (Verify does).
//
// The Client follows no redirect: a redirect would carry the API key to
// wherever it points. A 3xx answer is Tollgate unavailable (ErrUnavailable,
// so the FailMode answers), with an error that names where it points: the
// base URL to set instead, such as https:// where a load balancer
// redirects http:// there.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tollgate client: base URL %q: want an absolute http or https URL", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("tollgate client: base URL %q: want no user, query or fragment", baseURL)
	}
	if strings.TrimSpace(apiKey) == "" {
		return nil, errors.New("tollgate client: empty API key")
	}
	c := &Client{
		base:     strings.TrimRight(u.String(), "/"),
		key:      apiKey,
		timeout:  DefaultTimeout,
		failMode: FailOpen,
		attempts: 1,
	}
	for _, o := range opts {
		o(c)
	}
	if c.batcher != nil {
		c.batcher.c = c
	}
	if c.hc == nil {
		// An app server calls Tollgate once per request of its own: keep
		// more than net/http's two idle connections, or bursts pay a TCP
		// (and TLS) handshake each.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 64
		t.MaxIdleConnsPerHost = 64
		c.hc = &http.Client{Transport: t}
	}
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	return c, nil
}

// FailMode returns the client's fail mode.
func (c *Client) FailMode() FailMode { return c.failMode }

// do sends one call to Tollgate: in (if not nil) as the JSON body, out
// filled from its 200 answer (nil for a call Tollgate answers 204). Each
// attempt runs under c.timeout; Tollgate's own 429s are retried as
// WithRetry allows.
func (c *Client) do(ctx context.Context, method, path string, in any, out answerReader) error {
	return c.doKeyed(ctx, method, path, "", in, out)
}

// doKeyed is do with an Idempotency-Key (none when key is ""): every
// attempt carries the same key, so that Tollgate takes a retry for the
// call it may have made already.
func (c *Client) doKeyed(ctx context.Context, method, path, key string, in any, out answerReader) error {
	var body []byte
	if a, ok := in.(appender); ok {
		body = a.appendJSON(make([]byte, 0, 256))
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = b
	}
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, method, path, key, body, out)
		var rl *RateLimitedError
		if attempt >= c.attempts || !errors.As(err, &rl) || !c.mayWait(ctx, rl.RetryAfter) {
			return err
		}
		t := time.NewTimer(rl.RetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// mayWait reports whether a retry after d is allowed: within maxWait and
// before ctx's deadline, leaving the next attempt a moment to run.
func (c *Client) mayWait(ctx context.Context, d time.Duration) bool {
	if d > c.maxWait || ctx.Err() != nil {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	return true
}

// once is one attempt of do.
func (c *Client) once(ctx context.Context, method, path, key string, body []byte, out answerReader) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return unavailable(method, path, cause(err))
	}
	defer resp.Body.Close()
	b, err := readBody(resp)
	if err != nil {
		return unavailable(method, path, cause(err))
	}
	if len(b) > maxAnswer {
		return unavailable(method, path, fmt.Errorf("answer larger than %d bytes", maxAnswer))
	}
	switch s := resp.StatusCode; {
	case s >= 300 && s < 400:
		return unavailable(method, path, redirected(resp, path))
	case s == http.StatusTooManyRequests:
		return fmt.Errorf("%s %s: %w", method, path, rateLimited(resp.Header, b))
	case s == http.StatusPaymentRequired:
		var p problemBody
		_ = json.Unmarshal(b, &p)
		return fmt.Errorf("%s %s: %w", method, path, &PaymentRequiredError{BillingURL: p.BillingURL, Detail: p.Detail})
	case s >= 500 || s == http.StatusRequestTimeout:
		// A 408 is a proxy's or server's timeout, as unavailable as a 504.
		return unavailable(method, path, fmt.Errorf("Tollgate answered %d", s))
	case s >= 400:
		p, err := readProblem(resp, b)
		if err != nil {
			// A web server's 404 page at a wrong base URL, another
			// service's error: Tollgate did not refuse the call.
			return unavailable(method, path, err)
		}
		return fmt.Errorf("%s %s: %w", method, path, &APIError{Status: s, Type: p.Type, Title: p.Title, Detail: p.Detail, Field: p.Field})
	}
	if err := acceptAnswer(resp, b, out); err != nil {
		// Something answered that is not Tollgate (a captive portal,
		// another service at its URL): no decision was had.
		return unavailable(method, path, err)
	}
	return nil
}

// acceptAnswer reads a 1xx or 2xx answer into out: the 204 of a call
// whose answer has no body (out nil), else 200 and application/json that
// out reads as one of Tollgate's (each answerReader checks the members its
// answer must have). With readProblem for a 4xx, it is where every
// answer's status and content type are checked; an error says how the
// answer is not Tollgate's.
func acceptAnswer(resp *http.Response, b []byte, out answerReader) error {
	s := resp.StatusCode
	switch {
	case out == nil && s == http.StatusNoContent:
		return nil
	case out == nil:
		return fmt.Errorf("answer %d is not Tollgate's, which is 204 No Content", s)
	case s != http.StatusOK:
		return fmt.Errorf("answer %d is not Tollgate's, which is 200 and JSON", s)
	}
	if err := contentType(resp, "application/json"); err != nil {
		return err
	}
	if err := out.readAnswer(b); err != nil {
		return fmt.Errorf("answer %d is not Tollgate's: %w", s, err)
	}
	return nil
}

// contentType checks that resp's body is of the media type want, as
// Tollgate labels it (parameters aside).
func contentType(resp *http.Response, want string) error {
	ct := resp.Header.Get("Content-Type")
	if ct == want {
		return nil
	}
	if ct == "" {
		return fmt.Errorf("answer %d has no Content-Type, where Tollgate's is %s: is the URL Tollgate's?", resp.StatusCode, want)
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != want {
		return fmt.Errorf("answer %d is %s, where Tollgate's is %s: is the URL Tollgate's?", resp.StatusCode, ct, want)
	}
	return nil
}

// readProblem reads a 4xx answer as the problem Tollgate writes for it,
// application/problem+json with the answer's status, or says that it is
// not Tollgate's.
func readProblem(resp *http.Response, b []byte) (problemBody, error) {
	var p problemBody
	if err := contentType(resp, "application/problem+json"); err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil || p.Status != resp.StatusCode {
		return p, fmt.Errorf("answer %d is not a problem of Tollgate's: is the URL Tollgate's?", resp.StatusCode)
	}
	return p, nil
}

// redirected is the error of a redirect, which the client does not follow
// (it would carry the API key along): where it points, which is where the
// client's URL should point.
func redirected(resp *http.Response, path string) error {
	to, err := resp.Location()
	if err != nil {
		return fmt.Errorf("answer %d without a Location is not Tollgate's", resp.StatusCode)
	}
	s := fmt.Sprintf("answer %d redirected to %s, set the URL to where it points", resp.StatusCode, to)
	if base, ok := strings.CutSuffix(to.String(), path); ok && base != "" {
		s += " (" + base + ")"
	}
	return errors.New(s + ": the client follows no redirect, which would carry the API key")
}

// readBody reads resp's body, up to one byte past maxAnswer: into a slice
// of its length when it says so (the common answer), else as it comes.
func readBody(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxAnswer {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
}

// cause unwraps the *url.Error of net/http, whose message repeats the
// method and URL that the clause around it names already.
func cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// failModeDecides reports whether err, from a decision-making call, is
// one the FailMode answers: Tollgate is unavailable, or its own ceilings
// or billing refuse the tenant for now (an answer that is not Tollgate's,
// a redirect among them). Any other error (an *APIError: a wrong key, an
// unknown policy, an invalid call) is a fault to fix, never an allow.
func failModeDecides(err error) bool {
	var rl *RateLimitedError
	var pr *PaymentRequiredError
	return errors.Is(err, ErrUnavailable) || errors.As(err, &rl) || errors.As(err, &pr)
}

// unavailable is the error of a call that had no answer from Tollgate, or
// one that is not Tollgate's.
func unavailable(method, path string, err error) error {
	return fmt.Errorf("%s %s: %w: %w", method, path, ErrUnavailable, err)
}

// problemBody is an RFC 9457 problem as Tollgate writes it, with the
// extension members of its refusals.
type problemBody struct {
	Type              string `json:"type"`
	Title             string `json:"title"`
	Detail            string `json:"detail"`
	Status            int    `json:"status"`
	Field             string `json:"field"`
	Code              string `json:"code"`
	BillingURL        string `json:"billing_url"`
	Layer             string `json:"layer"`
	Scope             string `json:"scope"`
	Limit             int64  `json:"limit"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
	Degraded          bool   `json:"degraded"`
}

// rateLimited reads a 429 of Tollgate's: the headers first (they are on
// every refusal, whatever the body), the problem for what they lack.
func rateLimited(h http.Header, body []byte) *RateLimitedError {
	var p problemBody
	_ = json.Unmarshal(body, &p)
	e := &RateLimitedError{
		Layer: cmp.Or(h.Get("X-RateLimit-Layer"), p.Layer), Scope: cmp.Or(h.Get("X-RateLimit-Scope"), p.Scope),
		Limit: p.Limit, Detail: p.Detail, Degraded: p.Degraded || h.Get("X-RateLimit-Degraded") == "true",
	}
	if n, err := strconv.ParseInt(h.Get("X-RateLimit-Limit"), 10, 64); err == nil {
		e.Limit = n
	}
	secs := p.RetryAfterSeconds
	if n, err := strconv.ParseInt(strings.TrimSpace(h.Get("Retry-After")), 10, 64); err == nil && n >= 0 {
		secs = n
	}
	e.RetryAfter = time.Duration(min(secs, int64(365*24*3600))) * time.Second
	return e
}
