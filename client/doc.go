// Package client is the Go client of Tollgate, the multi-tenant rate-limit
// and quota service: Check, Peek, Acquire and Release, Reset and Usage over
// Tollgate's REST API, and a net/http middleware that limits an app's own
// requests with one of its Tollgate policies (package echomw has the same
// for Echo).
//
// Every call runs under a per-call timeout (100 ms unless WithTimeout says
// otherwise). When Tollgate cannot give a decision (it cannot be reached, it
// does not answer in time, it answers 5xx, or it refuses the call), the
// decision-making calls (Check, Peek, Acquire) answer with the client's
// FailMode (FailOpen allows, FailClosed refuses, both marked Degraded)
// together with an error that says why: one wrapping ErrUnavailable, a
// *RateLimitedError for Tollgate's own ceilings, a *PaymentRequiredError, or
// an *APIError. A caller may act on the Decision alone and log the error.
//
// A Client is safe for concurrent use and should be shared: it keeps its
// connections to Tollgate open between calls.
//
// The package is public: it imports the standard library only (the
// import rule is a test in internal/archtest), so that an app that uses
// net/http pulls in nothing else.
package client
