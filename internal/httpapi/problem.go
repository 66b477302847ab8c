package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// problemBase is the prefix of Tollgate's problem type URIs.
const problemBase = "https://tollgate.dev/problems/"

// problemKind is one row of the table from sentinel to HTTP status.
type problemKind struct {
	sentinel error
	status   int
	slug     string // problemBase + slug is the problem's type
	title    string
}

// problemKinds maps the domain packages' sentinels to statuses: the one place
// where an error becomes a status. The first row whose sentinel the error
// wraps wins; an error no row matches is a 500 whose cause is logged and
// never shown.
var problemKinds = []problemKind{
	{tenant.ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Invalid API key"},
	// A valid key of a tenant an operator disabled: not a 401, the key is
	// right; not a 429, waiting does not help.
	{tenant.ErrDisabled, http.StatusForbidden, "tenant-disabled", "This workspace is disabled by the operator: every key of it is refused until it is enabled again. Contact the operator of this Tollgate"},
	{tenant.ErrTestKey, http.StatusForbidden, "test-key-read-only", "Test keys may read but not change the tenant's configuration: use a live key"},
	{tenant.ErrInvalid, http.StatusBadRequest, "invalid-request", "Invalid request"},
	// A configuration file Parse refuses (envoy.go): before policy's
	// ErrInvalid, which it wraps too.
	{envoyconf.ErrInvalid, http.StatusBadRequest, "invalid-configuration", "Invalid configuration"},
	{policy.ErrInvalid, http.StatusBadRequest, "invalid-request", "Invalid request"},
	{policy.ErrNotFound, http.StatusNotFound, "not-found", "Not found"},
	{policy.ErrConflict, http.StatusConflict, "conflict", "Conflict"},
	// The HTTP layer's own reading of a request (badRequest).
	{errBadRequest, http.StatusBadRequest, "invalid-request", "Invalid request"},
	// Leases (leases.go).
	{gate.ErrNoLease, http.StatusNotFound, "lease-not-found", "No such lease: it was released, it expired, or it never was"},
	// Reservations (reservations.go).
	{gate.ErrNoReservation, http.StatusNotFound, "reservation-not-found", "No such reservation: it expired unsettled, its settlement is no longer kept, or it never was"},
	{gate.ErrSettled, http.StatusConflict, "reservation-settled", "The reservation was settled already with another used amount; a settlement happens once"},
	// Forward auth (forwardauth.go): the tenant held back is the proxy's
	// fail mode's to decide, so not a 429 its users would see as theirs.
	{errTenantHeldBack, http.StatusServiceUnavailable, "tenant-busy", "Too many of this tenant's requests are in progress on this instance; retry after a second"},
	{gate.ErrBusy, http.StatusTooManyRequests, "tenant-busy", "Too many of this tenant's requests are in progress on this instance; retry after a second"},
	{gate.ErrStoreUnavailable, http.StatusServiceUnavailable, "store-unavailable", "The counter store is unavailable; retry"},
	{policy.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "Tollgate cannot reach its database right now; retry"},
	{gate.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "Tollgate cannot read this key's tenant, plan or policies from its database right now; retry"},
	// Billing (billing.go, webhooks.go).
	{billing.ErrBadWebhook, http.StatusBadRequest, "invalid-webhook", "Invalid Stripe webhook signature or body"},
	{billing.ErrNotConfigured, http.StatusServiceUnavailable, "billing-not-configured", "Billing with Stripe is not configured on this server"},
	{billing.ErrNoCustomer, http.StatusConflict, "no-billing-account", "No billing account yet: buy a plan with POST /v1/billing/checkout"},
	{billing.ErrProvider, http.StatusBadGateway, "payment-provider-error", "The payment provider failed; try again"},
	// Outbound webhooks (tenanthooks.go).
	{webhooks.ErrNotFound, http.StatusNotFound, "not-found", "Not found"},
	{webhooks.ErrInvalid, http.StatusBadRequest, "invalid-request", "Invalid request"},
	{webhooks.ErrTooMany, http.StatusConflict, "too-many-webhooks", "A tenant may have at most 5 webhook endpoints: delete one first"},
	{webhooks.ErrConflict, http.StatusConflict, "delivery-in-progress", "This delivery is waiting or being sent; it can be sent again once it is delivered or failed"},
	{errTestsLimited, http.StatusTooManyRequests, "webhook-tests-limited", "This tenant sent as many test events as it may this minute"},
	{webhooks.ErrOutboxFull, http.StatusTooManyRequests, "webhook-outbox-full", "This endpoint has 1,000 deliveries waiting; nothing more is queued for it until some are delivered or given up (see its delivery log)"},
	{webhooks.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "Tollgate cannot reach its database right now; retry"},
}

// clientError is an error whose words were chosen for the client that
// caused it, where the fault was found: the field at fault (empty for the
// request as a whole) and the reason. The domain's errors implement it
// (policy.FieldError, policy.NotFoundError, tenant.FieldError), and so does
// badRequest, the HTTP layer's own.
type clientError interface {
	error
	ClientFault() (field, reason string)
}

// errBadRequest is what every badRequest wraps.
var errBadRequest = errors.New("bad request")

// badRequest is a request the HTTP layer cannot read (a body that is not
// JSON, a path parameter that is not escaped): the field at fault, or none
// for the body as a whole, and why, in words for the client.
type badRequest struct{ field, reason string }

func (e *badRequest) Error() string {
	if e.field == "" {
		return e.reason
	}
	return e.field + ": " + e.reason
}

// Unwrap returns errBadRequest.
func (e *badRequest) Unwrap() error { return errBadRequest }

// ClientFault implements clientError.
func (e *badRequest) ClientFault() (field, reason string) { return e.field, e.reason }

// internalProblem is all a client learns of a fault of ours.
var internalProblem = problem{Problem: Problem{
	Type: problemBase + "internal-error", Title: "Internal error", Status: http.StatusInternalServerError,
}}

// problem is a Problem with the extension members of Tollgate's 4xx
// answers.
type problem struct {
	Problem
	// Field names the JSON member or path parameter at fault in an
	// invalid request; empty when the body as a whole is.
	Field string `json:"field,omitempty"`
	// Errors are the faults of an invalid configuration file, each with
	// its line (omitted when the file as a whole is at fault). Parse stops
	// at the first, so there is one; a list so that more may come.
	Errors []fileFault `json:"errors,omitempty"`
}

// fileFault is one fault of a configuration file.
type fileFault struct {
	Line   int    `json:"line,omitempty"`
	Reason string `json:"reason"`
}

// problemFor returns the problem that answers err, and whether err is one the
// table (or Echo, for routing and its own 4xx) accounts for; when it is not,
// the problem is internalProblem and the caller logs err.
//
// Only text chosen for clients reaches them: a clientError's field and
// reason, an echo.HTTPError's 4xx message. Wrapping clauses added on the way
// up are never shown.
func problemFor(err error) (problem, bool) {
	for _, k := range problemKinds {
		if !errors.Is(err, k.sentinel) {
			continue
		}
		p := problem{Problem: Problem{Type: problemBase + k.slug, Title: k.title, Status: k.status}}
		if ce, ok := errors.AsType[clientError](err); ok {
			p.Field, p.Detail = ce.ClientFault()
		}
		if fe, ok := errors.AsType[*envoyconf.Error](err); ok {
			p.Errors = []fileFault{{Line: fe.Line, Reason: fe.Reason}}
		}
		return p, true
	}
	var he *echo.HTTPError
	if errors.As(err, &he) && he.Code < http.StatusInternalServerError {
		p := problem{Problem: Problem{Type: "about:blank", Title: http.StatusText(he.Code), Status: he.Code}}
		for _, k := range problemKinds {
			if k.status == he.Code {
				p.Type, p.Title = problemBase+k.slug, k.title
				break
			}
		}
		if msg, ok := he.Message.(string); ok && msg != http.StatusText(he.Code) {
			p.Detail = msg
		}
		return p, true
	}
	return internalProblem, false
}

// sendProblem writes p as application/problem+json.
func sendProblem(c echo.Context, p problem) {
	if c.Request().Method == http.MethodHead {
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		_ = c.NoContent(p.Status)
		return
	}
	body, _ := json.Marshal(p)
	_ = c.Blob(p.Status, "application/problem+json", body)
}
