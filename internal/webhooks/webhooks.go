// Package webhooks tells tenants what happened to them: it keeps the HTTP
// endpoints a tenant registers, signs events per the Standard Webhooks
// specification and delivers them from a PostgreSQL outbox, at least once,
// with retries, from any instance.
//
// Events are written to the outbox by the store in the transaction of the
// change that caused them (a key revoked, an alert raised, a plan changed),
// or with an idempotency key for those decided by a periodic sweep
// (allotment thresholds, alerts resolved) or by a reservation's answer
// (budget thresholds, BudgetLevel). Nothing here runs on the check
// path. It imports the standard library only: the store (pgstore) is
// given to it.
package webhooks

import (
	"context"
	"errors"
	"time"
)

// The event types an endpoint may listen to.
const (
	EventAlertTriggered     = "alert.triggered"
	EventAlertResolved      = "alert.resolved"
	EventAllotmentThreshold = "allotment.threshold"
	EventBudgetThreshold    = "budget.threshold"
	EventPlanChanged        = "plan.changed"
	EventKeyRevoked         = "key.revoked"
	// EventTestPing is sent to one endpoint by its "send test event" call;
	// it is not listened to.
	EventTestPing = "test.ping"
)

// EventTypes lists the types an endpoint may listen to, in documentation
// order.
var EventTypes = []string{EventAlertTriggered, EventAlertResolved, EventAllotmentThreshold, EventBudgetThreshold, EventPlanChanged, EventKeyRevoked}

// MaxEndpoints is how many endpoints one tenant may have.
const MaxEndpoints = 5

// MaxPending bounds the deliveries not settled of one endpoint, so those
// of a tenant to MaxEndpoints × MaxPending (5,000): whatever its receivers
// do and however many events it has, a tenant cannot grow the outbox
// without bound, and one endpoint of a tenant that fails does not take
// the room of its others. A delivery of an event past it is kept in the
// endpoint's log as dropped, never sent (the tenant may resend it once
// there is room); a test send or a resend past it is refused
// (ErrOutboxFull).
const MaxPending = 1000

// MaxURLLength bounds an endpoint's URL, in bytes.
const MaxURLLength = 2048

// AllotmentPercents are the shares of the monthly allotment that send
// allotment.threshold, once each per tenant and month.
var AllotmentPercents = []int{50, 80, 100}

// TestSendGroup is the counter group of the tenants' test sends' limit,
// DefaultTestSendsPerMinute of them a tenant a minute unless configured
// otherwise (TOLLGATE_WEBHOOK_TEST_SENDS). The API and the console count
// in it both, so that they share one limit.
const (
	TestSendGroup             = "webhook-tests"
	DefaultTestSendsPerMinute = 10
)

var (
	// ErrNotFound is an endpoint or delivery the tenant does not have.
	ErrNotFound = errors.New("webhook not found")
	// ErrInvalid is an endpoint the tenant may not register; it comes
	// wrapped in a *FieldError.
	ErrInvalid = errors.New("invalid webhook endpoint")
	// ErrTooMany is one endpoint past MaxEndpoints.
	ErrTooMany = errors.New("too many webhook endpoints")
	// ErrConflict is a delivery that cannot be sent again now: it is
	// waiting or being sent already.
	ErrConflict = errors.New("webhook delivery in progress")
	// ErrOutboxFull is a test send or a resend to an endpoint with
	// MaxPending deliveries not settled.
	ErrOutboxFull = errors.New("webhook endpoint has too many deliveries waiting")
	// ErrUnavailable is a store that could not be reached.
	ErrUnavailable = errors.New("webhooks unavailable")
)

// FieldError is input refused, with the field at fault and a reason safe
// to show to whoever sent it. It unwraps to ErrInvalid.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ClientFault returns the field and reason, for the HTTP layer.
func (e *FieldError) ClientFault() (field, reason string) { return e.Field, e.Reason }

// Endpoint is a tenant's receiver of events. Its secret is never part of
// it: only Create and Rotate return one, once.
type Endpoint struct {
	ID       string   `json:"id"`
	TenantID string   `json:"tenant_id"`
	URL      string   `json:"url"`
	Events   []string `json:"events"`
	Enabled  bool     `json:"enabled"`
	// DisabledReason says who or what disabled it; empty while enabled.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// FailingSince is the first failed delivery since the last one that
	// succeeded; after DisableAfter of failures the endpoint is disabled.
	FailingSince *time.Time `json:"failing_since,omitempty"`
	// PreviousSecretExpiresAt is when the secret replaced by the last
	// rotation stops signing.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
	CreatedAt               time.Time  `json:"created_at"`
}

// Delivery is one event sent, or to be sent, to one endpoint.
type Delivery struct {
	ID        string `json:"id"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	// Status is pending, sending, retrying, delivered, failed (given up
	// after DisableAfter) or dropped (not queued: its endpoint had
	// MaxPending waiting).
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	// NextAttemptAt is set while the delivery waits or is being sent.
	NextAttemptAt   *time.Time `json:"next_attempt_at"`
	LastAttemptAt   *time.Time `json:"last_attempt_at"`
	LastStatusCode  *int       `json:"last_status_code"`
	LastLatencyMS   *int       `json:"last_latency_ms"`
	LastError       string     `json:"last_error,omitempty"`
	ResponseExcerpt string     `json:"response_excerpt,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	DeliveredAt     *time.Time `json:"delivered_at"`
}

// Job is a claimed delivery: what the worker needs to send it. The
// secrets are sealed.
type Job struct {
	DeliveryID string
	Attempt    int
	TenantID   string
	EventID    string
	Type       string
	Data       []byte
	EventAt    time.Time
	EndpointID string
	URL        string
	Secret     []byte
	// PreviousSecret signs beside Secret until PreviousUntil.
	PreviousSecret []byte
	PreviousUntil  time.Time
}

// ClaimRequest is what a worker asks of Store.Claim.
type ClaimRequest struct {
	// Until is when the claim runs out: past it, the deliveries are due
	// again (their instance died).
	Until time.Time
	// Max bounds the deliveries claimed: as many as may start on this
	// instance.
	Max int
	// PerEndpoint bounds the deliveries in flight to one endpoint across
	// every instance, those claimed included.
	PerEndpoint int
	// PerTenant bounds one tenant's deliveries in flight on this
	// instance, those in InFlight and those claimed.
	PerTenant int
	// InFlight holds the tenant of each delivery in flight on this
	// instance.
	InFlight []string
	// KeyID is this instance's Sealer.KeyID.
	KeyID []byte
}

// Outcome is what one attempt of a delivery came to.
type Outcome struct {
	StatusCode      int // 0 when no answer came
	Latency         time.Duration
	Error           string // why it failed, in a few words; empty on success
	ResponseExcerpt string // at most MaxExcerpt bytes of the answer
}

// MaxExcerpt bounds what is kept of a receiver's answer, in bytes.
const MaxExcerpt = 256

// DisableAfter is how long an endpoint fails before it is disabled, and
// how long a delivery is retried.
const DisableAfter = 72 * time.Hour

// DisabledForFailures is the reason given to an endpoint disabled after
// failing for DisableAfter.
const DisabledForFailures = "disabled by Tollgate: every delivery failed for 3 days; fix the receiver and enable the endpoint again"

// Store keeps endpoints, events and deliveries (pgstore.Webhooks). Every
// method takes the tenant it acts for, and an endpoint or delivery of
// another tenant is ErrNotFound. Errors wrap this package's sentinels.
type Store interface {
	// CreateEndpoint adds an endpoint with a sealed secret unless the
	// tenant has max already (ErrTooMany).
	CreateEndpoint(ctx context.Context, tenantID, url string, events []string, secret Sealed, max int) (Endpoint, error)
	Endpoints(ctx context.Context, tenantID string) ([]Endpoint, error)
	Endpoint(ctx context.Context, tenantID, id string) (Endpoint, error)
	DeleteEndpoint(ctx context.Context, tenantID, id string) error
	// RotateSecret puts secret in place; the one before signs until
	// previousUntil.
	RotateSecret(ctx context.Context, tenantID, id string, secret Sealed, previousUntil time.Time) (Endpoint, error)
	// SetEnabled enables an endpoint, or disables it with reason.
	SetEnabled(ctx context.Context, tenantID, id string, enabled bool, reason string) (Endpoint, error)
	// Ping writes a test.ping event addressed to the endpoint alone;
	// ErrOutboxFull when it has MaxPending deliveries waiting.
	Ping(ctx context.Context, tenantID, endpointID string) (Delivery, error)
	// Deliveries is the endpoint's delivery log, newest first.
	Deliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]Delivery, error)
	// Resend makes a settled delivery due now (ErrConflict for one that
	// is not settled, ErrOutboxFull when its endpoint has MaxPending
	// waiting).
	Resend(ctx context.Context, tenantID, endpointID, deliveryID string) error

	// Claim claims due deliveries as r says, oldest due first but the
	// tenants with fewest in flight on this instance first, of endpoints
	// whose secret was sealed under r.KeyID only.
	Claim(ctx context.Context, r ClaimRequest) ([]Job, error)
	// Delivered settles a delivery.
	Delivered(ctx context.Context, deliveryID string, o Outcome) error
	// Failed records a failed attempt: the delivery is due again at next,
	// or given up when next is zero; its endpoint, failing for longer than
	// DisableAfter, is disabled with DisabledForFailures.
	Failed(ctx context.Context, deliveryID string, o Outcome, next time.Time) error
	// Sweep writes the events decided by looking (allotment thresholds,
	// alerts resolved) once each, and prunes settled events made before
	// pruneBefore. It returns the number of events written.
	Sweep(ctx context.Context, now, pruneBefore time.Time) (int64, error)
	// EmitBudgetThreshold writes budget.threshold for l at percent, once
	// per tenant, budget, window and percent (BudgetLevel.Key): it
	// reports whether this call wrote it.
	EmitBudgetThreshold(ctx context.Context, l BudgetLevel, percent int) (bool, error)
	// Outbox counts the deliveries not settled, of every instance, and
	// the endpoints whose due deliveries an instance with keyID does not
	// claim.
	Outbox(ctx context.Context, keyID []byte) (Outbox, error)
	// LabelSecrets gives the secrets sealed before their key had an id
	// keyID when opens says they open under it, and returns how many it
	// labelled.
	LabelSecrets(ctx context.Context, keyID []byte, opens func(sealed []byte) bool) (int, error)
}

// Outbox is what Store.Outbox counts.
type Outbox struct {
	// Unsettled counts the deliveries not settled: waiting, being sent,
	// or waiting to be tried again.
	Unsettled int64
	// Dropped counts the deliveries dropped for want of room (MaxPending)
	// as kept in the outbox, and LastDroppedTenant is the tenant of the
	// last of them.
	Dropped           int64
	LastDroppedTenant string
	// OtherKey counts the enabled endpoints with deliveries due whose
	// secret was sealed under another key (another TOLLGATE_PEPPER), or
	// before keys had ids and not yet labelled.
	OtherKey int64
}
