// Package billing is Tollgate's billing state machine, free of Stripe's SDK
// and wire format: what a Stripe event does to a tenant's plan and billing
// status, in which order and exactly once (Service.HandleEvent, Apply); the
// Checkout and Customer Portal links a tenant asks for (Service.Checkout,
// Service.Portal); and the hourly report of each paid tenant's live checks to
// its metered subscription item (Reporter).
//
// It speaks Stripe's concepts (customers, subscriptions, prices, events) as
// plain values. internal/billing/stripeapi, the only importer of stripe-go,
// verifies and parses webhooks into Events and implements Payments and
// Meter; pgstore implements Store, UsageCursors and EventPruner. billing
// imports tenant, audit and usage, and no driver.
package billing

import (
	"errors"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/tenant"
)

// Sentinels; adapters translate their own errors into these.
var (
	// ErrNotFound is a tenant, Stripe customer or recorded event the store
	// does not know.
	ErrNotFound = errors.New("not found")
	// ErrConflict is a Stripe customer already linked to another tenant.
	ErrConflict = errors.New("customer already linked to another tenant")
	// ErrNotConfigured means Stripe is not set up on this instance: no API
	// key for Checkout, the portal and usage, or no webhook signing secret.
	ErrNotConfigured = errors.New("billing is not configured")
	// ErrNoCustomer is a portal asked for by a tenant that has never
	// checked out, so Stripe has no customer for it.
	ErrNoCustomer = errors.New("no Stripe customer for the tenant")
	// ErrProvider is Stripe failing or refusing a call; the detail is
	// logged, never shown.
	ErrProvider = errors.New("payment provider failed")
	// ErrRejected wraps ErrProvider for a refusal that retrying cannot fix
	// (Stripe's invalid_request_error): a usage report it answers is
	// recorded as rejected rather than retried.
	ErrRejected = errors.New("rejected by the payment provider")
	// ErrBadWebhook is a webhook whose signature is missing, wrong or too
	// old, or whose body is not a Stripe event.
	ErrBadWebhook = errors.New("invalid Stripe webhook")
)

// Event types Tollgate acts on; others are recorded and ignored.
const (
	EventCheckoutCompleted    = "checkout.session.completed"
	EventSubscriptionCreated  = "customer.subscription.created"
	EventSubscriptionUpdated  = "customer.subscription.updated"
	EventSubscriptionDeleted  = "customer.subscription.deleted"
	EventInvoicePaid          = "invoice.paid"
	EventInvoicePaymentFailed = "invoice.payment_failed"
)

// Audit entries: a change of plan or billing status is written as kind
// AuditKind by actor AuditActor, with detail event_id, event_type, before and
// after (each plan, billing_status, effective_plan).
const (
	AuditKind  = "billing_changed"
	AuditActor = "stripe"
	// AuditKindCustomerLinked is an operator linking a Stripe customer to a
	// tenant (Service.LinkCustomer); detail before and after hold
	// customer_id.
	AuditKindCustomerLinked = "billing_customer_linked"
)

// maxNote bounds a Result's note, in bytes.
const maxNote = 500

// checkoutModeSubscription is the Checkout Session mode of a subscription.
const checkoutModeSubscription = "subscription"

// MetadataTenantID is the metadata key under which Checkout sessions and the
// subscriptions they create carry the tenant id, so that a subscription event
// finds its tenant even before checkout.session.completed has linked the
// customer.
const MetadataTenantID = "tollgate_tenant_id"

// Event is what Tollgate reads of a Stripe event: the envelope and, for the
// types it acts on, the few fields of the object it needs. It is stored as
// JSON with the event, and applied again from there when the event waited
// for its customer to be linked.
type Event struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	Created  time.Time `json:"created"`
	Livemode bool      `json:"livemode"`
	// CustomerID is the Stripe customer the object belongs to; empty when
	// it names none.
	CustomerID   string        `json:"customer_id,omitempty"`
	Checkout     *Checkout     `json:"checkout,omitempty"`
	Subscription *Subscription `json:"subscription,omitempty"`
	Invoice      *Invoice      `json:"invoice,omitempty"`
	// Payload is the body as received, kept for operators (bounded by the
	// store); it is not part of the stored JSON.
	Payload []byte `json:"-"`
}

// Checkout is a completed Checkout Session.
type Checkout struct {
	SessionID string `json:"session_id"`
	Mode      string `json:"mode"`
	// ClientReferenceID is the tenant id Tollgate set when it created the
	// session.
	ClientReferenceID string `json:"client_reference_id,omitempty"`
	SubscriptionID    string `json:"subscription_id,omitempty"`
}

// Subscription is a subscription as a customer.subscription.* event shows it.
type Subscription struct {
	ID string `json:"id"`
	// Status is Stripe's subscription status (tenant.Status*).
	Status string `json:"status"`
	Items  []Item `json:"items"`
	// TenantID is the subscription's MetadataTenantID, when set.
	TenantID string `json:"tenant_id,omitempty"`
	// Anchor is the subscription's billing_cycle_anchor: its billing
	// periods start at this day of the month and time of day. Zero when the
	// event does not say.
	Anchor time.Time `json:"anchor,omitzero"`
}

// Item is one item of a subscription.
type Item struct {
	ID      string `json:"id"`
	PriceID string `json:"price_id"`
	// Metered is a price whose usage is reported (recurring.usage_type
	// "metered").
	Metered bool `json:"metered"`
}

// Invoice is an invoice.paid or invoice.payment_failed object.
type Invoice struct {
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id,omitempty"`
}

// Outcome is what became of a delivered event.
type Outcome string

// Outcomes, as the store records them (stripe_events.outcome) and the
// webhook answers them. OutcomeReplay is only ever an answer: the stored
// outcome of a replayed event stays what its first processing decided, and
// its deliveries count goes up.
const (
	// OutcomeApplied: the event was for a known tenant and was applied
	// (which may have changed nothing, see the note).
	OutcomeApplied Outcome = "applied"
	// OutcomeReplay: the event was processed before; nothing changed.
	OutcomeReplay Outcome = "replay"
	// OutcomeStale: older than the tenant's last billing change; ignored.
	OutcomeStale Outcome = "stale"
	// OutcomeUnknownCustomer: no tenant has the event's customer. Kept for
	// an operator, and applied by itself when the customer gets linked.
	OutcomeUnknownCustomer Outcome = "unknown_customer"
	// OutcomeIgnored: a type Tollgate does not act on, or an object that is
	// not the tenant's current subscription.
	OutcomeIgnored Outcome = "ignored"
	// OutcomeCustomerConflict: a completed checkout named a tenant that
	// already has another Stripe customer. The tenant keeps its customer
	// and subscription; the event is kept for an operator, and logged.
	OutcomeCustomerConflict Outcome = "customer_conflict"
	// OutcomeFailed: processing failed; the webhook answered 500 and
	// Stripe will deliver the event again.
	OutcomeFailed Outcome = "failed"
)

// Result is the outcome of one delivery.
type Result struct {
	Outcome Outcome
	// TenantID is the tenant the event concerned, when one was found.
	TenantID string
	// Note says why, in a sentence for operators.
	Note string
}

// Account is a tenant's billing state: what events change.
type Account struct {
	TenantID       string
	Plan           string
	Status         string
	CustomerID     string
	SubscriptionID string
	// UsageItemID is the subscription's metered item, to which usage is
	// reported; empty when it has none.
	UsageItemID string
	// UpdatedAt is the created time of the newest event applied to the
	// billing status (tenants.billing_updated_at); PlanUpdatedAt that of
	// the newest subscription event applied to the plan, subscription and
	// metered item. Zero when none has been.
	UpdatedAt     time.Time
	PlanUpdatedAt time.Time
	// Anchor is the subscription's billing cycle anchor, from which a
	// policy of window "billing" counts its periods (limit.Window.Anchored;
	// tenants.billing_anchor); zero, the calendar month, when the tenant
	// has no subscription or its subscription has ended. It follows the
	// plan's clock.
	Anchor time.Time
}

// Prices maps Stripe price ids to plan names (plans.stripe_price_id).
type Prices map[string]string

// knownStatus reports whether s is a billing status Tollgate stores.
func knownStatus(s string) bool {
	switch s {
	case tenant.StatusActive, tenant.StatusTrialing, tenant.StatusPastDue, tenant.StatusUnpaid,
		tenant.StatusCanceled, tenant.StatusIncomplete, tenant.StatusIncompleteExpired, tenant.StatusPaused:
		return true
	}
	return false
}

// ended reports whether a subscription in status s is over for good: Stripe
// never moves a canceled or incomplete_expired subscription again.
func ended(s string) bool {
	return s == tenant.StatusCanceled || s == tenant.StatusIncompleteExpired
}

// note bounds a note's length, cutting between characters.
func note(s string) string {
	if len(s) <= maxNote {
		return s
	}
	n := maxNote
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
