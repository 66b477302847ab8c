package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Gate is the admission pipeline (gate.Gate): Identify from a request's
// headers, then one door for each kind of request with its body. Errors:
// tenant.ErrUnauthorized for a bad key, *policy.FieldError and
// *policy.NotFoundError for the client's mistakes, gate.ErrNoLease for a
// lease that is gone, gate.ErrStoreUnavailable, gate.ErrBusy.
type Gate interface {
	Identify(ctx context.Context, req gate.Request) (gate.Identity, gate.Verdict, error)
	// Admit admits a check (req.Check), or any other /v1 request that
	// takes no new place.
	Admit(ctx context.Context, req gate.Request) (gate.Verdict, error)
	// AdmitBatch admits POST /v1/check/batch.
	AdmitBatch(ctx context.Context, req gate.Request, checks []gate.Check) (gate.BatchVerdict, error)
	// Acquire admits POST /v1/leases as Admit does a check, and Reserve
	// POST /v1/reservations.
	Acquire(ctx context.Context, req gate.Request, l gate.Lease) (gate.Verdict, error)
	Reserve(ctx context.Context, req gate.Request, r gate.Reservation) (gate.Verdict, error)
	// Release, Renew and Reset serve the routes of those names, which
	// Admit has admitted.
	Release(ctx context.Context, tenantID string, test bool, id string) error
	Renew(ctx context.Context, tenantID string, test bool, id string, ttl time.Duration) (time.Time, error)
	Reset(ctx context.Context, tenantID string, test bool, policy, subject string) (string, error)
	// Settle serves the settlement and the release of a reservation,
	// which Admit has admitted.
	Settle(ctx context.Context, tenantID string, test bool, id string, used int64) (gate.Settled, error)
	// Budgets serves the budgets of /v1/usage, which Admit has admitted.
	Budgets(ctx context.Context, tenantID string, policies []string, subject string) ([]gate.Budget, error)
}

// maxCheckBody bounds a /v1/check body: 32 items of 512-byte subjects fit.
const maxCheckBody = 64 << 10

type checkBody struct {
	Mode  string `json:"mode"`
	Items []struct {
		Policy  string `json:"policy"`
		Subject string `json:"subject"`
		Cost    *int64 `json:"cost"`
	} `json:"items"`
}

// decodeJSON reads a bounded, strict JSON body into v; every fault is the
// client's and says what it was.
func decodeJSON(c echo.Context, limitBytes int64, v any) error {
	buf := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(buf)
	body, err := readInto(c, limitBytes, buf)
	if err != nil {
		return err
	}
	return unmarshalStrict(body, v)
}

// bodyBufs holds buffers request bodies are read into and decoded from
// (decoding copies what it keeps), so that reading a body allocates
// nothing once the pool is warm.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// readInto reads a request body of at most limitBytes into *buf, growing
// it as needed, and returns the bytes read: valid until *buf goes back to
// bodyBufs.
func readInto(c echo.Context, limitBytes int64, buf *[]byte) ([]byte, error) {
	b := (*buf)[:0]
	r := c.Request().Body
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limitBytes {
			return nil, &badRequest{field: "body", reason: fmt.Sprintf("larger than %d bytes", limitBytes)}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &badRequest{field: "body", reason: "could not be read"}
		}
	}
	if cap(b) <= 64<<10 {
		*buf = b
	}
	return b, nil
}

// jsonKind names the JSON a Go type decodes from, in the words of a client
// who never saw the Go type.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// unmarshalStrict decodes one JSON value of body into v: text (checkText),
// no unknown members, no trailing data, and every fault named.
func unmarshalStrict(body []byte, v any) error {
	if err := checkText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return &badRequest{field: te.Field, reason: "has the wrong type, want " + jsonKind(te.Type)}
		}
		return &badRequest{field: "body", reason: "not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return &badRequest{field: "body", reason: "trailing data after the JSON object"}
	}
	return nil
}

// checkText refuses a JSON body whose strings encoding/json would read as
// other text than they hold: bytes that are not UTF-8, and \u escapes of
// half a UTF-16 surrogate pair without the other half. encoding/json reads
// each as U+FFFD, so subjects that differ would be counted as one. Only a
// body with a backslash is looked at for escapes; the hand-written
// decoders of a check and a batch leave every escape to encoding/json, and
// so to this.
func checkText(body []byte) error {
	if !utf8.Valid(body) {
		return &badRequest{field: "body", reason: "is not UTF-8 text (JSON must be)"}
	}
	if loneSurrogate(body) {
		return &badRequest{field: "body", reason: `has a \u escape of half a UTF-16 surrogate pair (\ud800 to \udfff) without the other half, which is not text`}
	}
	return nil
}

// loneSurrogate reports whether the JSON text b holds a \u escape of a
// high surrogate not followed by the escape of a low one, or of a low
// surrogate not after a high one. An escape that is malformed is left to
// the decoder to refuse.
func loneSurrogate(b []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return false
		}
		i += j
		r, ok := uEscape(b[i:])
		if !ok {
			// Any other escape is two bytes: a backslash and the one it
			// escapes, a backslash included.
			i += 2
			if i >= len(b) {
				return false
			}
			continue
		}
		i += 6
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			if lo, ok := uEscape(b[i:]); !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 6
		}
	}
}

// uEscape reads the \uXXXX escape b begins with.
func uEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func (a *api) check(c echo.Context) error {
	req, held, done, err := a.open(c, "check", maxCheckBody+1)
	if done {
		return err
	}
	defer held.give()
	chk, err := parseCheck(c)
	if err != nil {
		// A malformed check still passes the ceilings: bad bodies cost
		// the caller like good ones.
		v, aerr := a.gate.Admit(c.Request().Context(), req)
		if aerr != nil {
			return aerr
		}
		if v.Refusal != nil {
			return a.writeRefusal(c, v)
		}
		return err
	}
	req.Check = chk
	v, err := a.gate.Admit(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if v.Refusal != nil {
		return a.writeRefusal(c, v)
	}
	setCheckRateLimit(c, v)
	if v.Degraded {
		c.Response().Header().Set("X-RateLimit-Degraded", "true")
	}
	return writeCheckAnswer(c, v)
}

// parseCheck reads a /v1/check body; every fault is the client's and names
// its field.
func parseCheck(c echo.Context) (*gate.Check, error) {
	buf := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(buf)
	body, err := readInto(c, maxCheckBody, buf)
	if err != nil {
		return nil, err
	}
	return parseCheckBody(body)
}

// parseCheckBody decodes one check, a /v1/check body or one of a batch's
// checks; every fault names its field.
func parseCheckBody(body []byte) (*gate.Check, error) {
	if chk, ok := decodeCheckFast(body); ok {
		return chk, nil
	}
	var b checkBody
	if err := unmarshalStrict(body, &b); err != nil {
		return nil, err
	}
	chk := &gate.Check{}
	switch b.Mode {
	case "", "consume":
		chk.Mode = gate.Consume
	case "peek":
		chk.Mode = gate.Peek
	case "charge":
		chk.Mode = gate.Charge
	default:
		return nil, &badRequest{field: "mode", reason: `want "consume", "peek" or "charge"`}
	}
	chk.Items = make([]gate.Item, len(b.Items))
	for i, it := range b.Items {
		chk.Items[i] = gate.Item{Policy: it.Policy, Subject: it.Subject, Cost: 1}
		if it.Cost != nil {
			if *it.Cost < 1 {
				return nil, &badRequest{field: fmt.Sprintf("items[%d].cost", i), reason: "must be at least 1"}
			}
			chk.Items[i].Cost = *it.Cost
		}
	}
	return chk, nil
}

// bearer returns the API key of an "Authorization: Bearer …" header.
func bearer(c echo.Context) string {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// open identifies a /v1 request from its headers (gate.Identify: the
// instance ceiling, the pre-authentication bucket, the key) and reserves
// what its handler may read of its body, bound at most, in its tenant's
// share. A request that is refused, or whose key does not authenticate,
// is answered (done) without a byte of its body read: a client without a
// key can hold nothing of what tenants need. Otherwise the caller gives
// held back when its handler is done, and admits req, which carries the
// Identity.
func (a *api) open(c echo.Context, route string, bound int64) (req gate.Request, held bodyHold, done bool, err error) {
	return a.openWith(c, route, bearer(c), bound)
}

// openWith is open for a request whose API key is key.
func (a *api) openWith(c echo.Context, route, key string, bound int64) (req gate.Request, held bodyHold, done bool, err error) {
	req = gate.Request{Route: route, ClientIP: clientIP(c), Bearer: key}
	id, v, err := a.gate.Identify(c.Request().Context(), req)
	if err != nil || v.Refusal != nil {
		if hasBody(c.Request()) {
			closeUnread(c)
		}
		if err != nil {
			return req, bodyHold{}, true, err
		}
		return req, bodyHold{}, true, a.writeRefusal(c, v)
	}
	req.Identity = id
	if !keyed(c.Request().Context(), id.Tenant().ID) {
		// The tenant holds its share of connections: this one goes after
		// its answer.
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
	held, refused := a.bodies.forTenant(c, id.Tenant().ID, bound)
	return req, held, refused, nil
}

// admit is the middleware of the /v1 routes other than the checks and
// acquiring a lease: the key and the body's reservation (open), the
// ceilings (no allotment), then the handler with the tenant in the
// context.
func (a *api) admit(route string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req, held, done, err := a.open(c, route, maxOtherBody)
			if done {
				return err
			}
			defer held.give()
			v, err := a.gate.Admit(c.Request().Context(), req)
			if err != nil {
				return err
			}
			if v.Refusal != nil {
				return a.writeRefusal(c, v)
			}
			writeRateLimit(c.Response().Header(), v.Tightest.RateLimit())
			if v.Key.Test && changes(route, c.Request().Method) {
				return fmt.Errorf("%s %s: %w", c.Request().Method, c.Path(), tenant.ErrTestKey)
			}
			setTenantID(c, v.Tenant.ID)
			setAPIKey(c, v.Key)
			return next(c)
		}
	}
}

// changes reports whether a request to route with method may change the
// tenant's configuration or billing, which test keys may not
// (tenant.ErrTestKey): every billing call, and every write elsewhere.
func changes(route, method string) bool {
	switch route {
	case "billing":
		return true
	case "leases", "reset", "reservations":
		// A test key's own leases, reservations and sandbox counters
		// (leases.go, reservations.go).
		return false
	}
	return method != http.MethodGet && method != http.MethodHead
}

// refusalProblem is the RFC 9457 body of a 429 or 402.
type refusalProblem struct {
	Type              string   `json:"type"`
	Title             string   `json:"title"`
	Status            int      `json:"status"`
	Detail            string   `json:"detail"`
	Code              string   `json:"code,omitempty"`
	BillingURL        string   `json:"billing_url,omitempty"`
	Layer             string   `json:"layer"`
	Scope             string   `json:"scope,omitempty"`
	Limit             int64    `json:"limit"`
	Remaining         int64    `json:"remaining"`
	RetryAfterSeconds int64    `json:"retry_after_seconds"`
	ViolatedPolicies  []string `json:"violated-policies"`
	Degraded          bool     `json:"degraded,omitempty"`
}

// malformed answers a request whose body perr says is malformed: as with
// /v1/check, it still passes the ceilings and costs the caller a request,
// so that a stream of bad bodies is limited as good ones are.
func (a *api) malformed(c echo.Context, req gate.Request, perr error) error {
	v, err := a.gate.Admit(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if v.Refusal != nil {
		return a.writeRefusal(c, v)
	}
	return perr
}

// writeRefusal answers a ceiling's refusal: 429 with every header a client
// needs to back off, or 402 for a tenant that must pay.
func (a *api) writeRefusal(c echo.Context, v gate.Verdict) error {
	h := c.Response().Header()
	setRefusalHeaders(h, v)
	if v.Refusal.Degraded || v.Degraded {
		h.Set("X-RateLimit-Degraded", "true")
	}
	p := a.refusalProblem(v)
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return c.Blob(p.Status, "application/problem+json", body)
}

// setRefusalHeaders writes the headers of v's refusal by a ceiling: its
// limit, layer and scope, and the RateLimit fields and Retry-After naming
// it (the rule in gate/ratelimit.go).
func setRefusalHeaders(h http.Header, v gate.Verdict) {
	r := v.Refusal
	h.Set("X-RateLimit-Limit", strconv.FormatInt(r.Limit, 10))
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Layer", r.Layer)
	if r.Scope != "" {
		h.Set("X-RateLimit-Scope", r.Scope)
	}
	writeRateLimit(h, v.RateLimit())
}

// refusalProblem is the problem that answers v's refusal by a ceiling.
func (a *api) refusalProblem(v gate.Verdict) refusalProblem {
	r := v.Refusal
	retry := gate.RetrySeconds(r.RetryAfter)
	name := r.Layer
	p := refusalProblem{
		Type:   "https://tollgate.dev/problems/quota-exceeded",
		Title:  "Too many requests",
		Status: http.StatusTooManyRequests,
		Layer:  r.Layer, Scope: r.Scope, Limit: r.Limit, RetryAfterSeconds: retry,
		ViolatedPolicies: []string{name},
		Degraded:         r.Degraded,
	}
	switch r.Layer {
	case admission.LayerInstance:
		p.Detail = fmt.Sprintf("This Tollgate instance is at its ceiling of %d requests a second; retry in %d s.", r.Limit, retry)
	case admission.LayerIP:
		p.Detail = fmt.Sprintf("Too many requests from this address: the limit is %d a minute; retry in %d s.", r.Limit, retry)
	case admission.LayerQuota:
		p.Detail = fmt.Sprintf("The tenant's quota of %d requests per %s is used up; retry in %d s.", r.Limit, r.Scope, retry)
	case admission.LayerAllotment:
		p.Detail = fmt.Sprintf("The %s plan's allotment of %d checks this month is used up. Upgrade the plan, or wait until %s.", r.Plan, r.Limit, r.ResetAt.UTC().Format(time.RFC3339))
	case admission.LayerSandbox:
		p.Detail = fmt.Sprintf("Test keys share %d checks per rolling 30 days and they are used up; use a live key or retry in %d s.", r.Limit, retry)
	case admission.LayerInflight:
		p.Detail = fmt.Sprintf("The tenant has as much work in progress on this Tollgate instance as it may (%d check items at once); retry in %d s, or send fewer items in parallel.", r.Limit, retry)
	}
	if r.PaymentRequired {
		p.Type = "https://tollgate.dev/problems/payment-required"
		p.Title = "Payment required"
		p.Status = http.StatusPaymentRequired
		p.Code = "payment_required"
		p.BillingURL = a.billingURL(v.Tenant.ID)
		p.Detail = fmt.Sprintf("The subscription is %s, so the tenant is held to the starter plan, whose %d checks this month are used up. Update the payment method: billing_url leads to the workspace's billing page in the console (to the Stripe billing portal for a tenant without console members).", v.Tenant.BillingStatus, r.Limit)
	}
	return p
}

// billingURL is the address that sends a tenant's people to their
// console's billing page, or a tenant without console members to a fresh
// Stripe portal session, for BillingLinkLifetime (see portalLink). It carries an HMAC of
// the tenant id and the expiry so that nobody can open another tenant's
// portal by guessing, or keep a link open for ever.
func (a *api) billingURL(tenantID string) string {
	return strings.TrimRight(a.cfg.PublicURL, "/") + "/billing/portal/" + signPortalToken(a.cfg.BillingKey, tenantID, time.Now().Add(BillingLinkLifetime))
}

// ceilDiv is d/unit rounded up.
func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}

func ceilSecond(t time.Time) time.Time {
	if t.Truncate(time.Second).Equal(t) {
		return t.UTC()
	}
	return t.Truncate(time.Second).Add(time.Second).UTC()
}
