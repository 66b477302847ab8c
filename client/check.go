package client

import (
	"context"
	"net/url"
	"time"
)

// Item is one question of a check: may Subject spend Cost of Policy now?
type Item struct {
	// Policy is the name of one of the tenant's policies.
	Policy string
	// Subject is whom the policy counts (a client address, an account, …);
	// Tollgate stores only an HMAC digest of it. A global policy takes
	// none. Any length: one Tollgate would refuse (over 512 bytes, not
	// UTF-8) is sent as its SHA-256 digest (see the package doc).
	Subject string
	// Cost is what the item spends; 0 means 1.
	Cost int64
}

// Decision is Tollgate's answer to a check.
type Decision struct {
	// Allowed is true when every enforced item allowed; in a consume
	// check, all of them were then counted, and none otherwise.
	Allowed bool
	// Degraded is true when the decision was made without an exact count:
	// Tollgate's counter store was unreachable and a policy's fail_mode
	// decided, or Tollgate itself could not give a decision and the
	// client's FailMode did (Items is then empty).
	Degraded bool
	// Items holds one answer per item, in the order asked.
	Items []ItemDecision
}

// ItemDecision is the answer for one Item.
type ItemDecision struct {
	Policy string
	// Allowed is the item's verdict; for a shadow policy, what it would
	// have decided (a shadow policy never refuses the check).
	Allowed bool
	// Limit is the limit applied, after overrides; Remaining what is left
	// of it in the current window.
	Limit, Remaining int64
	// Window is the length of the policy's window (a calendar month's is
	// that month's); 0 from a Tollgate that does not say.
	Window time.Duration
	// ResetAt is when the window resets, to the second (Tollgate's clock).
	ResetAt time.Time
	// RetryAfter is how long until the same check would be allowed; 0 when
	// allowed.
	RetryAfter time.Duration
	// Shadow marks a policy in shadow mode.
	Shadow bool
	// Degraded marks an item decided by its policy's fail_mode.
	Degraded bool
}

// RetryAfter is how long until a refused check would be allowed: the
// longest RetryAfter among its refused enforced items; 0 when allowed.
func (d Decision) RetryAfter() time.Duration {
	var r time.Duration
	for _, it := range d.Items {
		if !it.Allowed && !it.Shadow {
			r = max(r, it.RetryAfter)
		}
	}
	return r
}

type checkItemIn struct {
	Policy  string `json:"policy"`
	Subject string `json:"subject,omitempty"`
	Cost    int64  `json:"cost,omitempty"`
}

type checkIn struct {
	Mode  string        `json:"mode"`
	Items []checkItemIn `json:"items"`
}

// checkOut is a check's answer as encoding/json reads it: a member that is
// absent or null is nil.
type checkOut struct {
	Allowed  *bool `json:"allowed"`
	Degraded *bool `json:"degraded"`
	Items    []struct {
		Policy       *string    `json:"policy"`
		Allowed      *bool      `json:"allowed"`
		Limit        *int64     `json:"limit"`
		Remaining    *int64     `json:"remaining"`
		WindowS      int64      `json:"window_seconds"`
		ResetAt      *time.Time `json:"reset_at"`
		RetryAfterMS *int64     `json:"retry_after_ms"`
		Shadow       *bool      `json:"shadow"`
		Degraded     bool       `json:"degraded"`
	} `json:"items"`
}

// Check asks whether every item may act now and, when all allow, counts
// them all (nothing is counted otherwise). A refusal of the tenant's own
// policies is a Decision with Allowed false and a nil error.
//
// When Tollgate is unavailable or its own ceilings or billing refuse the
// tenant, Check returns the FailMode's Decision (Degraded, no Items) and
// an error: one wrapping ErrUnavailable, a *RateLimitedError or a
// *PaymentRequiredError. When Tollgate refuses the call as wrong (an
// unknown key or policy, an invalid item), it returns an *APIError and a
// zero Decision, which allows nothing, whatever the FailMode.
func (c *Client) Check(ctx context.Context, items ...Item) (Decision, error) {
	return c.check(ctx, "consume", items)
}

// Peek is Check without counting: it answers what a Check would (its
// errors too), and
// changes nothing of the tenant's policies (Tollgate's own ceilings count
// it like any call). "Check before trying, count on failure" is a Peek,
// then a Check when the attempt failed.
func (c *Client) Peek(ctx context.Context, items ...Item) (Decision, error) {
	return c.check(ctx, "peek", items)
}

// Charge counts usage that happened already (a response's tokens, known
// once it is done): each item's Cost is added to its counter whatever is
// left, past its limit if need be, and is never refused by the tenant's
// policies. The Decision is Allowed; each item says whether its counter is
// still within its limit (Remaining 0 when it is overdrawn, and Checks of
// it are refused until that much has rolled out). A charge is never
// batched, and no FailMode decides it: when Tollgate is unavailable, Charge
// returns an error wrapping ErrUnavailable and a zero Decision, and the
// same charge may be sent again.
func (c *Client) Charge(ctx context.Context, items ...Item) (Decision, error) {
	in := checkIn{Mode: "charge", Items: make([]checkItemIn, len(items))}
	for i, it := range items {
		in.Items[i] = checkItemIn{Policy: it.Policy, Subject: subjectOf(it.Subject), Cost: it.Cost}
	}
	out := decisionOut{asked: in.Items}
	if err := c.do(ctx, "POST", "/v1/check", &in, &out); err != nil {
		return Decision{}, err
	}
	return out.d, nil
}

func (c *Client) check(ctx context.Context, mode string, items []Item) (Decision, error) {
	in := checkIn{Mode: mode, Items: make([]checkItemIn, len(items))}
	for i, it := range items {
		in.Items[i] = checkItemIn{Policy: it.Policy, Subject: subjectOf(it.Subject), Cost: it.Cost}
	}
	if c.batcher != nil {
		return c.batcher.check(ctx, in)
	}
	return c.checkOne(ctx, in)
}

// checkOne sends in to /v1/check. (A function of its own, so that in
// escapes to the heap only on this path, not on the batcher's.)
func (c *Client) checkOne(ctx context.Context, in checkIn) (Decision, error) {
	out := decisionOut{asked: in.Items}
	if err := c.do(ctx, "POST", "/v1/check", &in, &out); err != nil {
		return c.checkFailed(err)
	}
	return out.d, nil
}

// checkFailed is the answer of a check that err failed: the FailMode's
// decision when it decides, else a zero Decision.
func (c *Client) checkFailed(err error) (Decision, error) {
	if failModeDecides(err) {
		return c.failDecision(), err
	}
	return Decision{}, err
}

// decision is the Decision out says, and the members it had.
func (out *checkOut) decision() (Decision, members) {
	d := Decision{Allowed: deref(out.Allowed), Degraded: deref(out.Degraded), Items: make([]ItemDecision, len(out.Items))}
	m := members{answer: has(out.Allowed, hasAllowed) | has(out.Degraded, hasDegraded), items: ^uint16(0)}
	if out.Items != nil {
		m.answer |= hasItems
	}
	for i, it := range out.Items {
		d.Items[i] = ItemDecision{
			Policy: deref(it.Policy), Allowed: deref(it.Allowed), Limit: deref(it.Limit), Remaining: deref(it.Remaining),
			Window:  time.Duration(it.WindowS) * time.Second,
			ResetAt: deref(it.ResetAt), RetryAfter: time.Duration(deref(it.RetryAfterMS)) * time.Millisecond,
			Shadow: deref(it.Shadow), Degraded: it.Degraded,
		}
		m.items &= has(it.Policy, hasPolicy) | has(it.Allowed, hasAllowed) | has(it.Limit, hasLimit) | has(it.Remaining, hasRemaining) |
			has(it.ResetAt, hasResetAt) | has(it.RetryAfterMS, hasRetryAfter) | has(it.Shadow, hasShadow)
	}
	return d, m
}

// deref is *p, or the zero value when p is nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// has is bit when p is not nil, else 0.
func has[T any](p *T, bit uint16) uint16 {
	if p == nil {
		return 0
	}
	return bit
}

// failDecision is the FailMode's answer.
func (c *Client) failDecision() Decision {
	return Decision{Allowed: c.failMode == FailOpen, Degraded: true}
}

// Reset forgets what a subject has spent of a policy: its next check starts
// afresh (for a sign-in limit, after a successful sign-in); for a
// concurrency policy, the subject's leases are dropped. Tollgate audits
// every reset. A test key resets its sandbox's counters, never the live
// ones. An unknown policy is an *APIError with Status 404; a global
// policy, which counts no subject, one with Status 400. Reset never
// answers with the FailMode: its errors are the caller's to handle. The
// subject is sent as Check sends it, digest and all.
func (c *Client) Reset(ctx context.Context, policy, subject string) error {
	return c.do(ctx, "DELETE", "/v1/policies/"+url.PathEscape(policy)+"/subjects/"+url.PathEscape(subjectOf(subject)), nil, nil)
}
