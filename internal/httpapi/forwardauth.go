package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
)

// Forward auth: a proxy in front of a tenant's service (nginx's
// auth_request, Traefik's ForwardAuth, Caddy's forward_auth) asks Tollgate
// about every request before it passes it on. GET /v1/forward-auth/{policy}
// is one check of that policy, through the same door as /v1/check, and
// answers in statuses, which is all such a proxy reads:
//
//   - 200, empty, with the RateLimit fields for the proxy to copy: allowed
//     (degraded by a fail-open policy too, with X-Tollgate-Degraded);
//   - 429, or the 403 that ?refusal_status=403 asks for (nginx treats any
//     other status than 2xx, 401 and 403 as its own error): refused by the
//     policy, or by the per-IP ceiling, which limits the client's address;
//     with Retry-After, the RateLimit fields and a problem;
//   - 503 with Retry-After: Tollgate cannot decide for this tenant now (a
//     ceiling that holds back the whole tenant, unpaid billing, its data out
//     of reach), so that the proxy's own fail mode decides, as a client's
//     FailMode decides on those;
//   - 401 for a key Tollgate does not know, 400 for what the proxy's
//     configuration got wrong (the policy, a query parameter): faults to
//     fix, which docs/gateways.md's recipes never show end users as theirs.
//
// A body is never read: the connection closes after the answer instead.

// forwardAuthRoute is the route's name for the gate: its per-IP ceiling is
// a bucket of its own, since the address is the end user's here, not the
// tenant's server's as on /v1/check.
const forwardAuthRoute = "forward-auth"

// forwardQuery is what a proxy's configuration says in the query.
type forwardQuery struct {
	subjectHeader string
	cost          int64
	refusalStatus int
}

// parseForwardQuery reads the query of a forward-auth request; every fault
// is the configuration's and names its parameter.
func parseForwardQuery(c echo.Context) (forwardQuery, error) {
	q := forwardQuery{cost: 1, refusalStatus: http.StatusTooManyRequests}
	values := c.QueryParams()
	if h := values.Get("subject_header"); h != "" {
		if !httpguts.ValidHeaderFieldName(h) {
			return q, &badRequest{field: "subject_header", reason: "is not a header name"}
		}
		q.subjectHeader = http.CanonicalHeaderKey(h)
	}
	if s := values.Get("cost"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > gate.MaxCost {
			return q, &badRequest{field: "cost", reason: fmt.Sprintf("must be an integer from 1 to %d", gate.MaxCost)}
		}
		q.cost = n
	}
	switch s := values.Get("refusal_status"); s {
	case "", "429":
	case "403":
		q.refusalStatus = http.StatusForbidden
	default:
		return q, &badRequest{field: "refusal_status", reason: "must be 429 or 403"}
	}
	return q, nil
}

// forwardSubject is the subject a forward-auth request is counted by: the
// value of q's header when it has one, else the client's address as the
// per-IP layers resolve it (TOLLGATE_TRUSTED_PROXIES), an IPv6 client's
// network cut to its prefix. A value that cannot be a subject (longer than
// gate.MaxSubjectLen, not UTF-8) is counted by its SHA-256, never refused:
// a refusal would be the proxy's error, which a proxy that fails open waves
// through, and a client would choose it at will.
func forwardSubject(c echo.Context, q forwardQuery) (string, error) {
	if q.subjectHeader != "" {
		if v := c.Request().Header.Get(q.subjectHeader); v != "" {
			if len(v) > gate.MaxSubjectLen || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				sum := sha256.Sum256([]byte(v))
				return "sha256:" + hex.EncodeToString(sum[:]), nil
			}
			return v, nil
		}
	}
	if ip := c.RealIP(); ip != "" {
		return ip, nil
	}
	// Only a trusted proxy that sent no usable address in the configured
	// header gets here: the configuration's fault, on every request.
	return "", &badRequest{field: "client address", reason: "a trusted proxy sent no usable client address (TOLLGATE_CLIENT_IP_HEADER)"}
}

// forwardKey is the API key of a forward-auth request: a bearer token, or
// the password of Basic credentials, which is how a proxy that cannot add a
// header to its auth request (Traefik) sends it: its auth address carries
// the key (http://tollgate:KEY@host/…), and Go's HTTP client turns that into
// Basic credentials.
func forwardKey(c echo.Context) string {
	if key := bearer(c); key != "" {
		return key
	}
	if _, password, ok := c.Request().BasicAuth(); ok {
		return password
	}
	return ""
}

// forwardAuth answers GET (or any method) /v1/forward-auth/{policy}.
func (a *api) forwardAuth(c echo.Context) error {
	if hasBody(c.Request()) {
		closeUnread(c)
	}
	req, held, done, err := a.openWith(c, forwardAuthRoute, forwardKey(c), 0)
	if done {
		return a.forwardError(c, err)
	}
	defer held.give()
	ctx := c.Request().Context()
	q, perr := parseForwardQuery(c)
	var subject string
	if perr == nil {
		subject, perr = forwardSubject(c, q)
	}
	name, nerr := pathParam(c, "policy")
	if perr == nil {
		perr = nerr
	}
	if perr != nil {
		// As /v1/check: a malformed request costs the caller a request too.
		v, err := a.gate.Admit(ctx, req)
		if err != nil {
			return a.forwardError(c, err)
		}
		if v.Refusal != nil {
			return a.writeForwardCeiling(c, v, q)
		}
		return perr
	}
	req.Check = &gate.Check{Mode: gate.Consume, Items: []gate.Item{{Policy: name, Subject: subject, Cost: q.cost}}}
	v, err := a.gate.Admit(ctx, req)
	if err != nil {
		return a.forwardError(c, err)
	}
	if v.Refusal != nil {
		return a.writeForwardCeiling(c, v, q)
	}
	h := c.Response().Header()
	if v.Degraded {
		h.Set("X-Tollgate-Degraded", "true")
	}
	setCheckRateLimit(c, v)
	if v.Allowed {
		return c.NoContent(http.StatusOK)
	}
	it := &v.Items[0]
	retry := gate.RetrySeconds(it.RetryAfter)
	return sendForwardProblem(c, refusalProblem{
		Type: problemBase + "rate-limited", Title: "Too many requests", Status: q.refusalStatus,
		Detail: fmt.Sprintf("The policy %q allows %d in its window; retry in %d s.", it.Policy, it.Limit, retry),
		Layer:  admission.LayerPolicy, Limit: it.Limit, Remaining: it.Remaining, RetryAfterSeconds: retry,
		ViolatedPolicies: []string{it.Policy}, Degraded: it.Degraded,
	})
}

// writeForwardCeiling answers a ceiling's refusal of a forward-auth
// request: the per-IP ceiling limits the client's address, a refusal like
// the policy's; every other ceiling (and unpaid billing) holds back the
// whole tenant, which is 503 so that the proxy's fail mode decides. No
// billing link is given: the answer may reach the tenant's users.
func (a *api) writeForwardCeiling(c echo.Context, v gate.Verdict, q forwardQuery) error {
	h := c.Response().Header()
	setRefusalHeaders(h, v)
	if v.Refusal.Degraded || v.Degraded {
		h.Set("X-Tollgate-Degraded", "true")
	}
	p := a.refusalProblem(v)
	p.Type, p.Title, p.Code, p.BillingURL = problemBase+"quota-exceeded", "Too many requests", "", ""
	p.Status = http.StatusServiceUnavailable
	if v.Refusal.Layer == admission.LayerIP {
		p.Status = q.refusalStatus
	}
	if v.Refusal.PaymentRequired {
		p.Detail = "The tenant's plan allows no more checks now; its operator must update its billing."
	}
	return sendForwardProblem(c, p)
}

// forwardError is err as a forward-auth answer: the tenant's own work in
// progress at its bound is the tenant held back (503, as writeForwardCeiling
// says), and every other error is answered as on every route.
func (a *api) forwardError(c echo.Context, err error) error {
	if errors.Is(err, gate.ErrBusy) {
		return fmt.Errorf("%w: %w", errTenantHeldBack, err)
	}
	var fe *policy.FieldError
	if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "items[0].") {
		// The gate speaks of a check's items; here the item is the path's
		// policy and the request's subject.
		return &policy.FieldError{Field: strings.TrimPrefix(fe.Field, "items[0]."), Reason: fe.Reason}
	}
	return err
}

// errTenantHeldBack wraps gate.ErrBusy on the forward-auth route, which
// answers it 503: the proxy's fail mode decides.
var errTenantHeldBack = errors.New("tenant held back")

// sendForwardProblem writes p, with no body for a HEAD request.
func sendForwardProblem(c echo.Context, p refusalProblem) error {
	if c.Request().Method == http.MethodHead {
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		return c.NoContent(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return c.Blob(p.Status, "application/problem+json", body)
}
