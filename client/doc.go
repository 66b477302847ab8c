// Package client is the Go client of Tollgate, the multi-tenant rate-limit
// and quota service: Check, Peek, Acquire and Release, Reset and Usage over
// Tollgate's REST API, and a net/http middleware that limits an app's own
// requests with one of its Tollgate policies (package echomw has the same
// for Echo).
//
// Budgets whose cost is known only after the work (LLM tokens, compute
// seconds, cents) are reservations: Reserve holds an estimate of a
// policy's budget, Settle charges what was really used (giving back the
// rest, or overdrawing the budget by the excess), ReleaseReservation gives
// it all back, and Spend wraps a function call in the three: reserve, run,
// settle with what the function reports, release when it fails or panics.
// Each Reserve sends an Idempotency-Key of its own (or the caller's), the
// same on the client's retries, so that a retry never holds the amount
// twice; a settlement is idempotent by itself. ReserveBatch and
// SettleBatch reserve and settle up to 100 at once, in one request, each
// answered as Reserve or Settle would answer it alone.
//
// Every call runs under a per-call timeout (100 ms unless WithTimeout says
// otherwise).
//
// # Fail modes are for unavailability only
//
// When Tollgate cannot give a decision for now (it cannot be reached, it
// does not answer in time, it answers 5xx or 408, what answers is not
// Tollgate, or its own ceilings or billing refuse the tenant with 429 or
// 402), the decision-making calls (Check, Peek, Acquire, Reserve) answer
// with the client's FailMode (FailOpen allows, FailClosed refuses, both
// marked Degraded) together with an error that says why: one wrapping
// ErrUnavailable, a *RateLimitedError or a *PaymentRequiredError. Any
// other refusal of the call is a fault to fix, not an outage to ride out:
// a key Tollgate does not know or has revoked (401), a key of a tenant
// Tollgate's operator disabled (403, matching ErrTenantDisabled), a policy
// that does not exist (400 or 404), any other 4xx problem of Tollgate's. Those
// return an *APIError with a Decision, Lease or Reservation that allows
// nothing, whatever the FailMode, so that a mistyped policy never turns
// limiting off in silence. Verify asks Tollgate about the key and
// policies when an app starts; Middleware does so when it is built, and
// answers 500 to every request while such a fault lasts.
//
// # Answers that are not Tollgate's
//
// Every answer is checked before it is believed, in one place for every
// call, /v1/check and its batches alike: its status (200 with a body, 204
// without, a 4xx problem), its Content-Type (application/json, or
// application/problem+json for a problem) and the members Tollgate always
// writes (a decision's allowed, degraded and items, one item for each item
// asked, each with its policy, allowed, limit, remaining, reset_at,
// retry_after_ms and shadow). Anything else at Tollgate's URL, such as
// another service's JSON, a captive portal's page, a truncated body, a
// web server's HTML 404 at a wrong base URL, is Tollgate unavailable: an
// error wrapping ErrUnavailable that says how the answer was not
// Tollgate's, and the FailMode's decision, never a zero Decision (which
// would refuse as if a policy had, and not be marked Degraded).
//
// The client follows no redirect: it would carry the API key to wherever
// it points. A 3xx (a load balancer's 301 from http:// to https://, a 307
// to another host) is Tollgate unavailable too, with an error that says
// "redirected to <Location>, set the URL to where it points", and the base
// URL to give New instead.
//
// # Subjects
//
// Tollgate takes subjects of up to 512 bytes of UTF-8. The client sends
// any other subject (longer, not valid UTF-8, or with a control
// character), and any that starts with "sha256:", as "sha256:" and the hex
// SHA-256 of its bytes: the same digest every time and in every call
// (Check, Peek, Acquire, Reset), so that a subject an app's own clients
// control (a header, a user name) is always limited, and distinct subjects
// never share a counter. An override of such a subject names its digest.
//
// A Client is safe for concurrent use and should be shared: it keeps its
// connections to Tollgate open between calls.
//
// The package is public: it imports the standard library only (the
// import rule is a test in internal/archtest), so that an app that uses
// net/http pulls in nothing else. Like the rest of Tollgate, it is
// released under the Apache License 2.0 (the LICENSE file at the
// repository's root).
package client
