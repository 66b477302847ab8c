package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/gate"
)

// Reservations and settlements in batches (issue 40): an AI gateway
// reserves and settles many model calls at once. Each entry is decided
// exactly as its own route decides it alone, through the same gate calls
// (Reserve; Admit then Settle), so it counts against the per-IP limit, the
// quotas and (a reservation) the allotment as that request would, takes
// the tenant's work in progress and passes the tenant's circuit breaker.
// The entries are independent: one's refusal or fault is its result, and
// the others are decided all the same.

// maxReservationBatch is the most entries a batch of reservations or of
// settlements holds.
const maxReservationBatch = 100

// maxReservationBatchBody bounds a batch's body: 100 reservations with
// 512-byte subjects and 255-byte idempotency keys fit, 100 settlements
// many times over.
const maxReservationBatchBody = 256 << 10

// batchWorkers is how many of a batch's entries are decided at once: a
// batch of 100 holds at most 8 of its tenant's work in progress and 8
// store connections, not 100, and runs no faster than 8 clients would.
const batchWorkers = 8

// reservationBatchBody is the body of POST /v1/reservations/batch.
type reservationBatchBody struct {
	Reservations []json.RawMessage `json:"reservations"`
}

// reservationEntry is one entry of a batch of reservations: a
// reservation's body with its Idempotency-Key. (Not reservationBody
// embedded: encoding/json would name a member's fault after the embedded
// type, "reservationBody.amount".)
type reservationEntry struct {
	Policy         string  `json:"policy"`
	Subject        string  `json:"subject"`
	Amount         *int64  `json:"amount"`
	TTL            *string `json:"ttl"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// settlementEntry is one entry of POST /v1/reservations/settle.
type settlementEntry struct {
	ReservationID *string `json:"reservation_id"`
	Used          *int64  `json:"used"`
}

// batchAnswer is the answer to a batch: results[i] answers entry i, a
// route's answer or a problem.
type batchAnswer struct {
	Results []any `json:"results"`
}

// batchSize checks that the batch's array name holds 1 to
// maxReservationBatch entries (n).
func batchSize(name string, n int) error {
	if n < 1 || n > maxReservationBatch {
		return &badRequest{field: name, reason: fmt.Sprintf("is required: an array of 1 to %d entries", maxReservationBatch)}
	}
	return nil
}

// inEntry names err's field within entry i of the batch's array name
// ("reservations[3].amount"); err is a *badRequest or passed on.
func inEntry(name string, i int, err error) error {
	br, ok := errors.AsType[*badRequest](err)
	if !ok {
		return err
	}
	field := fmt.Sprintf("%s[%d]", name, i)
	if br.field != "" && br.field != "body" {
		field += "." + strings.TrimPrefix(br.field, "body.")
	}
	return &badRequest{field: field, reason: br.reason}
}

// parseReservationBatch reads a POST /v1/reservations/batch body; every
// fault names its entry and field.
func parseReservationBatch(c echo.Context) ([]gate.Reservation, error) {
	if len(c.Request().Header.Values(idempotencyHeader)) > 0 {
		return nil, &badRequest{field: idempotencyHeader, reason: "is not taken by a batch: give each reservation its idempotency_key"}
	}
	buf := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(buf)
	body, err := readInto(c, maxReservationBatchBody, buf)
	if err != nil {
		return nil, err
	}
	var b reservationBatchBody
	if err := unmarshalStrict(body, &b); err != nil {
		return nil, err
	}
	if err := batchSize("reservations", len(b.Reservations)); err != nil {
		return nil, err
	}
	out := make([]gate.Reservation, len(b.Reservations))
	for i, r := range b.Reservations {
		var e reservationEntry
		if err := unmarshalStrict(r, &e); err != nil {
			return nil, inEntry("reservations", i, err)
		}
		key := ""
		if e.IdempotencyKey != nil {
			if key = *e.IdempotencyKey; !gate.ValidIdempotencyKey(key) {
				return nil, inEntry("reservations", i, &badRequest{field: "idempotency_key", reason: fmt.Sprintf("must be 1 to %d bytes of printable ASCII", gate.MaxIdempotencyKeyLen)})
			}
		}
		res, err := reservationBody{Policy: e.Policy, Subject: e.Subject, Amount: e.Amount, TTL: e.TTL}.reservation(key)
		if err != nil {
			return nil, inEntry("reservations", i, err)
		}
		out[i] = *res
	}
	return out, nil
}

// settlement is one entry of a batch of settlements, read.
type settlement struct {
	id   string
	used int64
}

// parseSettleBatch reads a POST /v1/reservations/settle body; every fault
// names its entry and field. An Idempotency-Key is checked for its form
// only, as the single settlement's is.
func parseSettleBatch(c echo.Context) ([]settlement, error) {
	if _, err := idempotencyKey(c); err != nil {
		return nil, err
	}
	buf := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(buf)
	body, err := readInto(c, maxReservationBatchBody, buf)
	if err != nil {
		return nil, err
	}
	var b struct {
		Settlements []json.RawMessage `json:"settlements"`
	}
	if err := unmarshalStrict(body, &b); err != nil {
		return nil, err
	}
	if err := batchSize("settlements", len(b.Settlements)); err != nil {
		return nil, err
	}
	out := make([]settlement, len(b.Settlements))
	for i, r := range b.Settlements {
		var e settlementEntry
		if err := unmarshalStrict(r, &e); err != nil {
			return nil, inEntry("settlements", i, err)
		}
		if e.ReservationID == nil || !gate.ValidReservationID(*e.ReservationID) {
			return nil, inEntry("settlements", i, &badRequest{field: "reservation_id", reason: `is required: "rs_" and 32 hex digits, as POST /v1/reservations answered`})
		}
		if err := checkUsed(e.Used); err != nil {
			return nil, inEntry("settlements", i, err)
		}
		out[i] = settlement{id: *e.ReservationID, used: *e.Used}
	}
	return out, nil
}

// forEach calls fn(i) for every i below n, at most batchWorkers at once,
// and returns when every call has.
func forEach(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, batchWorkers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// reserveBatch answers POST /v1/reservations/batch: {"reservations":[…]}
// in, {"results":[…]} out, results[i] the body POST /v1/reservations
// answers reservations[i] alone: its answer, or the problem of a ceiling's
// refusal or of the client's fault, with its status. A body that cannot
// be read whole is a 400 naming the entry and field, and reserves nothing;
// a refusal of the request as a whole, before its body is read, is
// answered as the single route's.
func (h reservationHandlers) reserveBatch(c echo.Context) error {
	req, held, done, err := h.open(c, "reservations", maxReservationBatchBody+1)
	if done {
		return err
	}
	defer held.give()
	rs, perr := parseReservationBatch(c)
	if perr != nil {
		return h.malformed(c, req, perr)
	}
	ctx := c.Request().Context()
	results := make([]any, len(rs))
	forEach(len(rs), func(i int) {
		v, err := h.gate.Reserve(ctx, req, rs[i])
		switch {
		case err != nil:
			results[i] = h.entryProblem(c, err)
		case v.Refusal != nil:
			results[i] = h.refusalProblem(v)
		default:
			h.budgetLevel(c, v.Tenant.ID, v.Reservation.Level)
			results[i] = reservationAnswerOf(v.Reservation)
		}
	})
	if clientGone(c) {
		return ctx.Err()
	}
	return c.JSON(http.StatusOK, batchAnswer{Results: results})
}

// settleBatch answers POST /v1/reservations/settle: {"settlements":[…]}
// in, {"results":[…]} out, results[i] what POST
// /v1/reservations/{id}/settle answers settlements[i] alone: each passes
// the ceilings as that request would (no allotment), then is settled; a
// ceiling's refusal, an unknown reservation (404), another used (409) or
// the store away (503) is its problem, with its status.
func (h reservationHandlers) settleBatch(c echo.Context) error {
	req, held, done, err := h.open(c, "reservations", maxReservationBatchBody+1)
	if done {
		return err
	}
	defer held.give()
	ss, perr := parseSettleBatch(c)
	if perr != nil {
		return h.malformed(c, req, perr)
	}
	ctx := c.Request().Context()
	results := make([]any, len(ss))
	forEach(len(ss), func(i int) {
		v, err := h.gate.Admit(ctx, req)
		switch {
		case err != nil:
			results[i] = h.entryProblem(c, err)
			return
		case v.Refusal != nil:
			results[i] = h.refusalProblem(v)
			return
		}
		s, err := h.gate.Settle(ctx, v.Tenant.ID, v.Key.Test, ss[i].id, ss[i].used)
		if err != nil {
			results[i] = h.entryProblem(c, err)
			return
		}
		h.budgetLevel(c, v.Tenant.ID, s.Level)
		results[i] = settleAnswerOf(s)
	})
	if clientGone(c) {
		return ctx.Err()
	}
	return c.JSON(http.StatusOK, batchAnswer{Results: results})
}

// entryProblem is the problem that answers one entry's error err, as the
// error handler would answer it alone; an error it does not account for
// is logged and answered as an internal error, as alone.
func (h reservationHandlers) entryProblem(c echo.Context, err error) problem {
	p, known := problemFor(err)
	if !known && !clientGone(c) {
		h.cfg.Logger.ErrorContext(c.Request().Context(), "batch entry failed", "method", c.Request().Method, "path", c.Path(), "err", err)
	}
	return p
}
