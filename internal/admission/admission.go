// Package admission is the vocabulary of an admission decision that the gate
// and its observers (usage, audit, traffic) share: the Event an observer is
// told, the Refusals it carries and the layers that refuse. It imports only
// the standard library, so the stores of the observers — pgstore among them —
// never compile the admission pipeline (internal/gate) to learn what it
// decided.
package admission

import (
	"context"
	"time"
)

// Layers, as named in X-RateLimit-Layer and in usage outcomes.
const (
	LayerInstance  = "instance"
	LayerIP        = "ip"
	LayerQuota     = "quota"
	LayerAllotment = "allotment"
	LayerSandbox   = "sandbox"
	LayerPolicy    = "policy"
	// LayerInflight refuses a request beyond its tenant's work in progress
	// on the instance (gate.Config.TenantInflight).
	LayerInflight = "inflight"
)

// OutcomeAllowed is Event.Outcome for an admitted request.
const OutcomeAllowed = "allowed"

// Observer learns what the pipeline decided, for usage, audit and alerts. It
// is called on the request's goroutine and must not block.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Event is one admission, as observers see it. It holds no raw subject or
// IP: only counter keys, which are HMAC digests.
type Event struct {
	At       time.Time
	TenantID string
	KeyID    string
	Live     bool
	Route    string
	// Checked is true for /v1/check calls and lease acquires, the ones
	// allotments count.
	Checked bool
	// Outcome is OutcomeAllowed, or the layer that refused.
	Outcome  string
	Degraded bool
	// Refusals lists the ceiling or the policy items that refused (shadow
	// policies included: they report what they would have decided).
	Refusals []Refusal
	// Policies names the tenant's policies a check's items or a lease
	// named, in item order (a name twice when two items name it), once
	// every name was found among the tenant's policies: a name that is
	// not one is answered 4xx and never observed. The rules of an Envoy
	// domain's configuration are left out (their names are not policies').
	// A check a ceiling refused carries them too, though no policy decided
	// it. Observers read it and must not keep or change it.
	Policies []string
}

// Refusal describes a refusal by a ceiling or by one policy item.
type Refusal struct {
	Layer string
	// Scope is "minute" or "hour" for quota refusals.
	Scope string
	// Policy names the policy for policy refusals.
	Policy     string
	Limit      int64
	Window     time.Duration
	RetryAfter time.Duration
	// ResetAt is the end of the refusing counter's window: refusals of one
	// Key with one ResetAt are in the same window.
	ResetAt time.Time
	// PaymentRequired is set when a paid tenant held to starter by its billing
	// status ran out of the starter allotment: the answer is 402, not 429.
	PaymentRequired bool
	Plan            string
	Degraded        bool
	// Key is the counter key (a digest) that refused.
	Key string
	// Shadow is set for a shadow policy, which refuses nothing.
	Shadow bool
	// AlertAfter is the refusing policy's alert_after (0: no alerts).
	AlertAfter int64
}

// Observers calls each of its observers in order.
type Observers []Observer

// Observe implements Observer.
func (o Observers) Observe(ctx context.Context, e Event) {
	for _, ob := range o {
		ob.Observe(ctx, e)
	}
}
