package client

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"time"
)

// Reservation is an amount held of a policy's budget (tokens, cents,
// seconds: the policy's Unit) until it is settled with what was really
// used, released, or expires at ExpiresAt (then it stays charged at its
// full amount, or is given back with the policy's on_expiry "release").
type Reservation struct {
	// Allowed is true when the amount is held; false when the budget
	// cannot cover it (nothing was charged; RetryAfter says when it may)
	// or the tenant holds its bound of live reservations (TenantFull).
	Allowed bool
	// ID names the reservation for Settle and ReleaseReservation; empty
	// when not allowed or when the client's FailMode allowed it.
	ID string
	// Amount is what was asked for.
	Amount int64
	// ExpiresAt is when an unsettled reservation settles by itself; zero
	// when not allowed.
	ExpiresAt time.Time
	// Remaining is what is left of the budget after this reservation (or
	// now, when refused or Repeat), Limit the policy's limit, ResetAt when
	// the window rolls.
	Remaining, Limit int64
	ResetAt          time.Time
	// Unit is the policy's unit ("tokens", "cents"; may be empty).
	Unit string
	// RetryAfter is how long until the budget may cover the amount, when
	// not allowed.
	RetryAfter time.Duration
	// Degraded is true when no store holds the reservation: Tollgate's
	// counter store was unreachable and the policy's fail_mode decided, or
	// Tollgate gave no decision and the client's FailMode did. Settle and
	// ReleaseReservation send nothing for it.
	Degraded bool
	// TenantFull is true on a refusal because the tenant holds its bound
	// of live reservations.
	TenantFull bool
	// Repeat is true when the Idempotency-Key named a reservation made
	// before: nothing more was reserved, and ID, Amount and ExpiresAt are
	// that reservation's.
	Repeat bool
}

// Settlement is Tollgate's answer to a settlement or a release.
type Settlement struct {
	// ID is the reservation's; Amount what it held, Used what was charged
	// in its place.
	ID           string
	Amount, Used int64
	// Returned is what went back to the budget (Amount - Used, when the
	// window it was charged in still counts); Excess what was charged past
	// the amount (Used - Amount).
	Returned, Excess int64
	// Remaining, Limit and ResetAt are the budget after the settlement.
	Remaining, Limit int64
	ResetAt          time.Time
	// Overdrawn is how many units past its limit the budget is: until that
	// much has rolled out, reservations and checks of it are refused.
	Overdrawn int64
	Unit      string
	// Repeat is true when the reservation had been settled before with the
	// same Used: this answer is that settlement's.
	Repeat bool
}

// ErrReservationGone is wrapped by the error of Settle and
// ReleaseReservation (with an *APIError of Status 404) when Tollgate holds
// no such reservation: it expired unsettled (and settled by itself), its
// settlement is no longer kept, or it never was.
var ErrReservationGone = errors.New("reservation gone")

// ErrSettledOtherwise is wrapped by the error of Settle and
// ReleaseReservation (with an *APIError of Status 409) when the
// reservation was settled before with another used: a settlement happens
// once.
var ErrSettledOtherwise = errors.New("reservation settled with another used")

// ReserveOption configures one Reserve or Spend.
type ReserveOption func(*reserveIn)

// ReserveTTL makes the reservation wait d for its settlement (1 ms to 24
// h; Tollgate's default, 5 minutes, when 0).
func ReserveTTL(d time.Duration) ReserveOption {
	return func(in *reserveIn) {
		if d > 0 {
			s := d.String()
			in.TTL = &s
		}
	}
}

// IdempotencyKey names the reservation (1 to 255 bytes of printable ASCII):
// a Reserve with a key used before answers the reservation made then, with
// Repeat, on any instance, as long as Tollgate keeps it. Without one, each
// Reserve makes a key of its own, which the client's own retries reuse.
func IdempotencyKey(key string) ReserveOption {
	return func(in *reserveIn) { in.key = key }
}

type reserveIn struct {
	Policy  string  `json:"policy"`
	Subject string  `json:"subject,omitempty"`
	Amount  int64   `json:"amount"`
	TTL     *string `json:"ttl,omitempty"`
	key     string
}

type reserveOut struct {
	Allowed       bool      `json:"allowed"`
	ReservationID string    `json:"reservation_id"`
	Amount        int64     `json:"amount"`
	ExpiresAt     time.Time `json:"expires_at"`
	Remaining     int64     `json:"remaining"`
	Limit         int64     `json:"limit"`
	ResetAt       time.Time `json:"reset_at"`
	RetryAfterMS  int64     `json:"retry_after_ms"`
	Unit          string    `json:"unit"`
	Degraded      bool      `json:"degraded"`
	TenantFull    bool      `json:"tenant_full"`
	Repeat        bool      `json:"repeat"`
}

// readAnswer reads the answer to POST /v1/reservations, with the members
// ReservationResponse requires: a zero Reservation is a refusal, not an
// outage.
func (out *reserveOut) readAnswer(b []byte) error {
	return readJSON(b, out, "allowed", "amount", "limit", "retry_after_ms", "unit", "degraded")
}

type settleIn struct {
	Used int64 `json:"used"`
}

type settleOut struct {
	ReservationID string    `json:"reservation_id"`
	Amount        int64     `json:"amount"`
	Used          int64     `json:"used"`
	Returned      int64     `json:"returned"`
	Excess        int64     `json:"excess"`
	Remaining     int64     `json:"remaining"`
	Limit         int64     `json:"limit"`
	ResetAt       time.Time `json:"reset_at"`
	Overdrawn     int64     `json:"overdrawn"`
	Unit          string    `json:"unit"`
	Repeat        bool      `json:"repeat"`
}

func (out *settleOut) readAnswer(b []byte) error {
	return readJSON(b, out, "reservation_id", "amount", "used", "returned", "excess", "remaining", "limit", "reset_at", "overdrawn", "unit", "repeat")
}

// Reserve holds amount of a budget policy for subject until Settle,
// ReleaseReservation or its TTL. A budget that cannot cover the amount is a
// Reservation with Allowed false and a nil error, and nothing is charged.
//
// Unavailability is answered as Acquire answers it: the FailMode's
// Reservation (Allowed under FailOpen, Degraded, with no ID) and an error;
// a call Tollgate refuses as wrong (an unknown key or policy, a concurrency
// policy, an amount out of range) is an *APIError and a zero Reservation.
// The subject is sent as Check sends it.
func (c *Client) Reserve(ctx context.Context, policy, subject string, amount int64, opts ...ReserveOption) (Reservation, error) {
	in := reserveIn{Policy: policy, Subject: subjectOf(subject), Amount: amount}
	for _, o := range opts {
		o(&in)
	}
	if in.key == "" {
		// A key of the call's own, so that a retry of the client's (after
		// a 429 of Tollgate's ceilings) never holds the amount twice.
		in.key = rand.Text()
	}
	var out reserveOut
	if err := c.doKeyed(ctx, "POST", "/v1/reservations", in.key, in, &out); err != nil {
		if failModeDecides(err) {
			return Reservation{Allowed: c.failMode == FailOpen, Amount: amount, Degraded: true}, err
		}
		return Reservation{}, err
	}
	return out.reservation(), nil
}

// reservation is the Reservation out answers.
func (out *reserveOut) reservation() Reservation {
	return Reservation{
		Allowed: out.Allowed, ID: out.ReservationID, Amount: out.Amount, ExpiresAt: out.ExpiresAt,
		Remaining: out.Remaining, Limit: out.Limit, ResetAt: out.ResetAt, Unit: out.Unit,
		RetryAfter: time.Duration(out.RetryAfterMS) * time.Millisecond,
		Degraded:   out.Degraded, TenantFull: out.TenantFull, Repeat: out.Repeat,
	}
}

// Settle charges used in place of the reservation's amount: less gives the
// rest back, more charges the excess even past the limit (Overdrawn). It
// is idempotent: settling again with the same used answers the first
// settlement with Repeat, so it is safe to send again after an error;
// another used is an error wrapping ErrSettledOtherwise, a reservation
// Tollgate no longer holds one wrapping ErrReservationGone. Tollgate
// unavailable is an error wrapping ErrUnavailable: the reservation then
// stays held until settled or expired. A Reservation without an ID or
// Degraded holds nothing, and settling it sends nothing and returns a zero
// Settlement.
func (c *Client) Settle(ctx context.Context, r Reservation, used int64) (Settlement, error) {
	return c.settle(ctx, r, "POST", "/settle", settleIn{Used: used})
}

// ReleaseReservation gives the reservation's whole amount back unused: a
// settlement with used 0, answered and failing as Settle's.
func (c *Client) ReleaseReservation(ctx context.Context, r Reservation) (Settlement, error) {
	return c.settle(ctx, r, "DELETE", "", nil)
}

func (c *Client) settle(ctx context.Context, r Reservation, method, suffix string, in any) (Settlement, error) {
	if r.ID == "" || r.Degraded {
		return Settlement{}, nil
	}
	var out settleOut
	if err := c.do(ctx, method, "/v1/reservations/"+url.PathEscape(r.ID)+suffix, in, &out); err != nil {
		return Settlement{}, settleError(err)
	}
	return out.settlement(), nil
}

// settlement is the Settlement out answers.
func (out *settleOut) settlement() Settlement {
	return Settlement{
		ID: out.ReservationID, Amount: out.Amount, Used: out.Used, Returned: out.Returned, Excess: out.Excess,
		Remaining: out.Remaining, Limit: out.Limit, ResetAt: out.ResetAt, Overdrawn: out.Overdrawn,
		Unit: out.Unit, Repeat: out.Repeat,
	}
}

// Spend runs fn within a reservation of amount: it reserves, runs fn
// unless refused, and settles with what fn reports it used; when fn
// returns an error (or panics) the reservation is released instead, and
// fn's error returned (the panic goes on). A refusal by the budget returns
// the Reservation with Allowed false and a nil error, without running fn.
//
// When Tollgate is unavailable, the FailMode decides as in Reserve: under
// FailOpen fn runs, nothing is settled, and the Reservation is Degraded;
// under FailClosed fn does not run and Reserve's error is returned. When fn
// succeeded but the settlement failed, the error is the settlement's: fn
// ran, and the reservation settles by itself at its expiry. Settling and
// releasing go on when ctx is cancelled, each under the client's timeout:
// what fn used is charged even when the caller has gone.
func (c *Client) Spend(ctx context.Context, policy, subject string, amount int64, fn func(context.Context) (used int64, err error), opts ...ReserveOption) (Reservation, Settlement, error) {
	r, err := c.Reserve(ctx, policy, subject, amount, opts...)
	if !r.Allowed {
		return r, Settlement{}, err
	}
	done := false
	defer func() {
		// fn failed or panicked: whatever it used is not charged.
		if !done {
			_, _ = c.ReleaseReservation(context.WithoutCancel(ctx), r)
		}
	}()
	used, err := fn(ctx)
	if err != nil {
		return r, Settlement{}, err
	}
	done = true
	s, err := c.Settle(context.WithoutCancel(ctx), r, used)
	return r, s, err
}
