package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrUnavailable is wrapped by the error of every call that had no answer
// from Tollgate: it could not be reached, it did not answer within the
// per-call timeout or the caller's context, it answered 5xx or 408, or
// what answered was not Tollgate. An answer is not Tollgate's unless its
// status, Content-Type and members are those Tollgate writes: a 200 of
// another service's JSON, a captive portal's HTML page, a truncated body,
// a decision without its members or with an item too few, a web server's
// 404 page at a wrong base URL, a redirect (the error names where it
// points: the URL to set). The error also wraps the cause
// (context.DeadlineExceeded for a timeout, the network error, …) or says
// how the answer was not Tollgate's.
var ErrUnavailable = errors.New("tollgate unavailable")

// ErrTenantDisabled is matched (errors.Is) by the *APIError of a call
// Tollgate refused with 403 because an operator disabled the tenant whose
// key the client holds: every call fails with it, whatever the FailMode
// (a Decision that allows nothing), until the operator enables the
// tenant again. It is not ErrUnavailable: waiting for Tollgate does not help.
var ErrTenantDisabled = errors.New("the tenant is disabled by Tollgate's operator")

// tenantDisabledType is the problem type of a disabled tenant's 403.
const tenantDisabledType = "https://tollgate.dev/problems/tenant-disabled"

// RateLimitedError is a refusal by one of Tollgate's own ceilings (HTTP
// 429): the tenant (the app, not its user) asked Tollgate too much. It
// counted nothing; the same call succeeds after RetryAfter.
type RateLimitedError struct {
	// Layer is the ceiling that refused: "instance", "ip", "quota",
	// "allotment", "sandbox" or "inflight".
	Layer string
	// Scope is the quota's window that refused ("minute" or "hour") for
	// the quota layer; empty otherwise.
	Scope string
	// Limit is the limit that refused, the one actually applied.
	Limit int64
	// RetryAfter is Tollgate's Retry-After, in whole seconds.
	RetryAfter time.Duration
	// Detail is Tollgate's explanation, for the app's logs.
	Detail string
	// Degraded is set when the ceiling decided without Tollgate's shared
	// counter store.
	Degraded bool
}

// Error names the ceiling, its limit and when to retry.
func (e *RateLimitedError) Error() string {
	s := fmt.Sprintf("refused by Tollgate's %s ceiling (limit %d); retry after %s", e.Layer, e.Limit, e.RetryAfter)
	if e.Scope != "" {
		s = fmt.Sprintf("refused by Tollgate's %s ceiling per %s (limit %d); retry after %s", e.Layer, e.Scope, e.Limit, e.RetryAfter)
	}
	return s
}

// PaymentRequiredError is Tollgate's 402: a paid tenant whose billing
// lapsed is held to the starter plan and has used its allotment. Waiting
// does not help; paying does, at BillingURL.
type PaymentRequiredError struct {
	// BillingURL is where the tenant updates its payment method.
	BillingURL string
	// Detail is Tollgate's explanation, for the app's logs.
	Detail string
}

// Error says where to pay.
func (e *PaymentRequiredError) Error() string {
	return "Tollgate requires payment: update the payment method at " + e.BillingURL
}

// APIError is any other refusal of a call by Tollgate, a 4xx problem of
// its own (application/problem+json): 400 for an invalid call (Field names
// the member at fault), 401 for an API key Tollgate does not know, 403 for
// a change made with a test key, 404 for a policy or lease that does not
// exist, 403 matching ErrTenantDisabled for any call with a key of a tenant
// the operator disabled. It is a fault to fix, never answered by the
// FailMode. A 4xx that
// is not Tollgate's problem, such as a web server's 404 page, is
// ErrUnavailable, as a redirect is.
type APIError struct {
	// Status is the HTTP status.
	Status int
	// Type is the problem's type URI, such as
	// "https://tollgate.dev/problems/invalid-request".
	Type string
	// Title and Detail are Tollgate's explanation.
	Title, Detail string
	// Field names the JSON member or path parameter at fault in a 400;
	// empty when the call as a whole is.
	Field string
}

// Error gives the status, Tollgate's title, the field at fault and the
// detail.
func (e *APIError) Error() string {
	s := fmt.Sprintf("Tollgate answered %d %s", e.Status, http.StatusText(e.Status))
	if e.Title != "" {
		s += ": " + e.Title
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrTenantDisabled) hold for the 403 of a
// disabled tenant.
func (e *APIError) Is(target error) bool {
	return target == ErrTenantDisabled && e.Status == http.StatusForbidden && e.Type == tenantDisabledType
}
