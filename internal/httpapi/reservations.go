package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// maxReservationBody bounds a reservation's or a settlement's body: a
// policy name, a 512-byte subject, an amount and a ttl fit many times over.
const maxReservationBody = 4 << 10

// idempotencyHeader names the header that makes a reservation safe to
// send again (gate.Reservation.IdempotencyKey).
const idempotencyHeader = "Idempotency-Key"

// registerReservations adds the reservation routes to v1. Reserving is
// admitted like a check (the allotment counts it); settling and releasing
// pass the ceilings without the allotment, as the lease routes do, and
// test keys may use them all: a test key's reservations are its sandbox's.
// The batches of either (reservebatch.go) admit each entry as its own
// route admits it.
func registerReservations(v1 *echo.Group, a *api) {
	h := reservationHandlers{api: a}
	v1.POST("/reservations", h.reserve)
	v1.POST("/reservations/:id/settle", h.settle, a.admit("reservations"))
	v1.DELETE("/reservations/:id", h.release, a.admit("reservations"))
	v1.POST("/reservations/batch", h.reserveBatch)
	v1.POST("/reservations/settle", h.settleBatch)
}

type reservationHandlers struct {
	*api
}

// reservationBody is the body of POST /v1/reservations.
type reservationBody struct {
	Policy  string  `json:"policy"`
	Subject string  `json:"subject"`
	Amount  *int64  `json:"amount"`
	TTL     *string `json:"ttl"`
}

// reservationAnswer is the answer to POST /v1/reservations:
// reservation_id when allowed; expires_at, remaining and reset_at unless
// it repeats a reservation made before (repeat) that the store could not
// read.
type reservationAnswer struct {
	Allowed       bool    `json:"allowed"`
	ReservationID string  `json:"reservation_id,omitempty"`
	Amount        int64   `json:"amount"`
	ExpiresAt     string  `json:"expires_at,omitempty"`
	Remaining     *int64  `json:"remaining,omitempty"`
	Limit         int64   `json:"limit"`
	ResetAt       *string `json:"reset_at,omitempty"`
	RetryAfterMS  int64   `json:"retry_after_ms"`
	// Overdrawn is set on a refusal by the budget: how far past its limit
	// the budget is (0 when it is not).
	Overdrawn *int64 `json:"overdrawn,omitempty"`
	Unit      string `json:"unit"`
	Degraded  bool   `json:"degraded"`
	// TenantFull is set on a refusal because the tenant holds its bound of
	// live reservations (gate.Config.TenantMaxReservations).
	TenantFull bool `json:"tenant_full,omitempty"`
	Repeat     bool `json:"repeat,omitempty"`
}

// settleAnswer is the answer to a settlement and to a release.
type settleAnswer struct {
	ReservationID string `json:"reservation_id"`
	Amount        int64  `json:"amount"`
	Used          int64  `json:"used"`
	Returned      int64  `json:"returned"`
	Excess        int64  `json:"excess"`
	Remaining     int64  `json:"remaining"`
	Limit         int64  `json:"limit"`
	ResetAt       string `json:"reset_at"`
	Overdrawn     int64  `json:"overdrawn"`
	Unit          string `json:"unit"`
	Repeat        bool   `json:"repeat"`
}

// idempotencyKey reads the Idempotency-Key header: "" when absent.
func idempotencyKey(c echo.Context) (string, error) {
	vals := c.Request().Header.Values(idempotencyHeader)
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1 || !gate.ValidIdempotencyKey(vals[0]):
		return "", &badRequest{field: idempotencyHeader, reason: fmt.Sprintf("must be one header of 1 to %d bytes of printable ASCII", gate.MaxIdempotencyKeyLen)}
	}
	return vals[0], nil
}

// parseReservation reads a POST /v1/reservations body and its
// Idempotency-Key; every fault is the client's and names its field.
func parseReservation(c echo.Context) (*gate.Reservation, error) {
	var b reservationBody
	if err := decodeJSON(c, maxReservationBody, &b); err != nil {
		return nil, err
	}
	r, err := b.reservation("")
	if err != nil {
		return nil, err
	}
	if r.IdempotencyKey, err = idempotencyKey(c); err != nil {
		return nil, err
	}
	return r, nil
}

// reservation checks b, a reservation's body or a batch's entry, and
// returns it with its idempotency key; every fault is the client's and
// names its field.
func (b reservationBody) reservation(key string) (*gate.Reservation, error) {
	if b.Policy == "" {
		return nil, &badRequest{field: "policy", reason: "is required"}
	}
	if len(b.Subject) > gate.MaxSubjectLen {
		return nil, &badRequest{field: "subject", reason: fmt.Sprintf("at most %d bytes", gate.MaxSubjectLen)}
	}
	if b.Amount == nil || *b.Amount < 1 || *b.Amount > gate.MaxCost {
		return nil, &badRequest{field: "amount", reason: fmt.Sprintf("is required: an integer from 1 to %d", gate.MaxCost)}
	}
	ttl := gate.DefaultReserveTTL
	if b.TTL != nil {
		d, err := time.ParseDuration(*b.TTL)
		if err != nil || d < gate.MinReserveTTL || d > gate.MaxReserveTTL {
			return nil, &badRequest{field: "ttl", reason: fmt.Sprintf(`must be a duration from %q to %q, such as "30s" or "10m"`, gate.MinReserveTTL.String(), gate.MaxReserveTTL.String())}
		}
		ttl = d
	}
	return &gate.Reservation{Policy: b.Policy, Subject: b.Subject, Amount: *b.Amount, TTL: ttl, IdempotencyKey: key}, nil
}

// reserve answers POST /v1/reservations. A malformed request still passes
// the ceilings and authentication first, as a malformed check does.
func (h reservationHandlers) reserve(c echo.Context) error {
	req, held, done, err := h.open(c, "reservations", maxReservationBody+1)
	if done {
		return err
	}
	defer held.give()
	r, perr := parseReservation(c)
	if perr != nil {
		return h.malformed(c, req, perr)
	}
	v, err := h.gate.Reserve(c.Request().Context(), req, *r)
	if err != nil {
		return err
	}
	if v.Refusal != nil {
		return h.writeRefusal(c, v)
	}
	writeRateLimit(c.Response().Header(), v.Tightest.RateLimit())
	if v.Degraded {
		c.Response().Header().Set("X-RateLimit-Degraded", "true")
	}
	h.budgetLevel(c, v.Tenant.ID, v.Reservation.Level)
	return c.JSON(http.StatusOK, reservationAnswerOf(v.Reservation))
}

// reservationAnswerOf is the body that answers a reservation no ceiling
// refused.
func reservationAnswerOf(rv *gate.ReservationVerdict) reservationAnswer {
	out := reservationAnswer{Allowed: rv.Allowed, Amount: rv.Amount, Limit: rv.Limit, Unit: rv.Unit, Degraded: rv.Degraded,
		RetryAfterMS: ceilDiv(rv.RetryAfter, time.Millisecond), TenantFull: rv.TenantFull, Repeat: rv.Repeat}
	if rv.Allowed {
		out.ReservationID = rv.ID
	}
	// A repeat the store could not tell of (no expiry) says only that the
	// reservation was made.
	if !rv.Repeat || !rv.ExpiresAt.IsZero() {
		reset := ceilSecond(rv.ResetAt).Format(time.RFC3339)
		out.Remaining, out.ResetAt = &rv.Remaining, &reset
	}
	switch {
	case rv.Allowed && !rv.ExpiresAt.IsZero():
		out.ExpiresAt = expiresAt(rv.ExpiresAt)
	case !rv.Allowed:
		out.Overdrawn = &rv.Overdrawn
	}
	return out
}

// settle answers POST /v1/reservations/{id}/settle with {"used": N}: 200
// once settled (or when it was settled before with the same used,
// "repeat": true), 404 when no such reservation is held, 409 when it was
// settled with another used.
func (h reservationHandlers) settle(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	var b struct {
		Used *int64 `json:"used"`
	}
	if err := decodeJSON(c, maxReservationBody, &b); err != nil {
		return err
	}
	if err := checkUsed(b.Used); err != nil {
		return err
	}
	return h.finish(c, id, *b.Used)
}

// checkUsed checks a settlement's used: present, 0 to gate.MaxCost.
func checkUsed(used *int64) error {
	if used == nil || *used < 0 || *used > gate.MaxCost {
		return &badRequest{field: "used", reason: fmt.Sprintf("is required: an integer from 0 to %d", gate.MaxCost)}
	}
	return nil
}

// release answers DELETE /v1/reservations/{id}: a settlement with used 0,
// answered as one.
func (h reservationHandlers) release(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	return h.finish(c, id, 0)
}

// finish settles the reservation id of the request's tenant with used.
// An Idempotency-Key is checked for its form only: the store answers a
// settlement sent again as the first one, whatever the key.
func (h reservationHandlers) finish(c echo.Context, id string, used int64) error {
	if _, err := idempotencyKey(c); err != nil {
		return err
	}
	k := apiKey(c)
	s, err := h.gate.Settle(c.Request().Context(), tenantID(c), k.Test, id, used)
	if err != nil {
		return err
	}
	h.budgetLevel(c, tenantID(c), s.Level)
	return c.JSON(http.StatusOK, settleAnswerOf(s))
}

// settleAnswerOf is the body that answers a settlement or a release.
func settleAnswerOf(s gate.Settled) settleAnswer {
	return settleAnswer{
		ReservationID: s.ID, Amount: s.Amount, Used: s.Used, Returned: s.Returned, Excess: s.Excess,
		Remaining: s.Remaining, Limit: s.Limit, ResetAt: ceilSecond(s.ResetAt).Format(time.RFC3339), Overdrawn: s.Overdrawn,
		Unit: s.Unit, Repeat: s.Repeat,
	}
}

// budgetLevel hands the level a reservation or a settlement left its
// budget at (nil: none to report) to the webhooks, which write
// budget.threshold for the percents it reaches the first time. A failure
// to write is logged and the answer sent all the same: the next level
// reported tries again.
func (h reservationHandlers) budgetLevel(c echo.Context, tenantID string, l *gate.BudgetLevel) {
	if l == nil || h.cfg.Webhooks == nil {
		return
	}
	ctx := c.Request().Context()
	err := h.cfg.Webhooks.BudgetLevel(ctx, webhooks.BudgetLevel{
		TenantID: tenantID, Policy: l.Policy, SubjectDigest: l.Subject, Unit: l.Unit, Limit: l.Limit, Taken: l.Taken,
		WindowStart: l.WindowStart, WindowEnd: l.WindowEnd,
	})
	if err != nil {
		h.cfg.Logger.WarnContext(ctx, "budget threshold webhook not written", "tenant_id", tenantID, "policy", l.Policy, "err", err)
	}
}
