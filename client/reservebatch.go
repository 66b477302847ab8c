package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// MaxReservationBatch is the most reservations or settlements Tollgate
// takes in one batch (ReserveBatch, SettleBatch).
const MaxReservationBatch = 100

// BatchReservation is one reservation of ReserveBatch: what Reserve takes.
type BatchReservation struct {
	Policy, Subject string
	Amount          int64
	// TTL is how long the reservation waits for its settlement (1 ms to
	// 24 h; Tollgate's default, 5 minutes, when 0).
	TTL time.Duration
	// IdempotencyKey names the reservation as the IdempotencyKey option
	// names Reserve's, in the same space; empty, the entry gets a key of
	// its own, the same on the client's retries of the batch.
	IdempotencyKey string
}

// ReserveResult is one reservation's outcome in a batch: what Reserve
// would have returned for it alone.
type ReserveResult struct {
	Reservation Reservation
	Err         error
}

// SettleResult is one settlement's outcome in a batch: what Settle would
// have returned for it alone.
type SettleResult struct {
	Settlement Settlement
	Err        error
}

// BatchSettlement is one settlement of SettleBatch: the reservation, and
// what was used (0 releases it).
type BatchSettlement struct {
	Reservation Reservation
	Used        int64
}

// batchReserveIn is one entry of POST /v1/reservations/batch.
type batchReserveIn struct {
	Policy         string  `json:"policy"`
	Subject        string  `json:"subject,omitempty"`
	Amount         int64   `json:"amount"`
	TTL            *string `json:"ttl,omitempty"`
	IdempotencyKey string  `json:"idempotency_key"`
}

// batchSettleIn is one entry of POST /v1/reservations/settle.
type batchSettleIn struct {
	ReservationID string `json:"reservation_id"`
	Used          int64  `json:"used"`
}

// batchOut is the answer to a batch: each result's JSON, read by its
// entry.
type batchOut struct {
	results []json.RawMessage
}

func (out *batchOut) readAnswer(b []byte) error {
	var v struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := readJSON(b, &v, "results"); err != nil {
		return err
	}
	out.results = v.Results
	return nil
}

// ReserveBatch reserves up to MaxReservationBatch amounts in one request:
// results[i] is what Reserve would have returned for rs[i] alone (its
// Reservation, allowed or refused by the budget, or its error: an
// *APIError for an unknown policy, a *RateLimitedError for a refusal by
// Tollgate's ceilings with the FailMode's Reservation). The reservations
// are independent: each is held or refused on its own, in no set order
// among them. Each without an IdempotencyKey gets one of its own, so the
// client's retry of the batch (after a 429 refusing it whole) holds
// nothing twice.
//
// err is the batch's as a whole, set in every result too: Tollgate
// unavailable or its ceilings refusing the batch (each Reservation the
// FailMode's), or an *APIError for a batch Tollgate cannot read (its Field
// names the entry, "reservations[3].amount", nothing was reserved, and
// each Reservation is zero).
func (c *Client) ReserveBatch(ctx context.Context, rs []BatchReservation) ([]ReserveResult, error) {
	in := make([]batchReserveIn, len(rs))
	for i, r := range rs {
		in[i] = batchReserveIn{Policy: r.Policy, Subject: subjectOf(r.Subject), Amount: r.Amount, IdempotencyKey: r.IdempotencyKey}
		if r.TTL > 0 {
			s := r.TTL.String()
			in[i].TTL = &s
		}
		if in[i].IdempotencyKey == "" {
			in[i].IdempotencyKey = rand.Text()
		}
	}
	const path = "/v1/reservations/batch"
	var out batchOut
	err := c.do(ctx, "POST", path, map[string]any{"reservations": in}, &out)
	if err == nil && len(out.results) != len(rs) {
		err = unavailable("POST", path, fmt.Errorf("%d results for %d reservations", len(out.results), len(rs)))
	}
	results := make([]ReserveResult, len(rs))
	if err != nil {
		for i, r := range rs {
			results[i].Err = err
			if failModeDecides(err) {
				results[i].Reservation = Reservation{Allowed: c.failMode == FailOpen, Amount: r.Amount, Degraded: true}
			}
		}
		return results, err
	}
	for i, raw := range out.results {
		var o reserveOut
		if rerr := o.readAnswer(raw); rerr == nil {
			results[i].Reservation = o.reservation()
			continue
		}
		results[i].Err = entryError(path, raw)
		if failModeDecides(results[i].Err) {
			results[i].Reservation = Reservation{Allowed: c.failMode == FailOpen, Amount: rs[i].Amount, Degraded: true}
		}
	}
	return results, nil
}

// SettleBatch settles up to MaxReservationBatch reservations in one
// request: results[i] is what Settle would have returned for ss[i] alone
// (a Used of 0 is ReleaseReservation's): its Settlement, or an error
// wrapping ErrReservationGone, ErrSettledOtherwise or ErrUnavailable, or a
// *RateLimitedError. A Reservation without an ID or Degraded holds
// nothing: it is not sent, and its result is a zero Settlement. The
// settlements are independent, and each is idempotent as Settle's is, so
// the batch is safe to send again after an error.
//
// err is the batch's as a whole, set in the result of every reservation
// sent too: Tollgate unavailable, or refusing the batch.
func (c *Client) SettleBatch(ctx context.Context, ss []BatchSettlement) ([]SettleResult, error) {
	results := make([]SettleResult, len(ss))
	var in []batchSettleIn
	var sent []int
	for i, s := range ss {
		if s.Reservation.ID == "" || s.Reservation.Degraded {
			continue
		}
		in = append(in, batchSettleIn{ReservationID: s.Reservation.ID, Used: s.Used})
		sent = append(sent, i)
	}
	if len(in) == 0 {
		return results, nil
	}
	const path = "/v1/reservations/settle"
	var out batchOut
	err := c.do(ctx, "POST", path, map[string]any{"settlements": in}, &out)
	if err == nil && len(out.results) != len(in) {
		err = unavailable("POST", path, fmt.Errorf("%d results for %d settlements", len(out.results), len(in)))
	}
	for j, i := range sent {
		if err != nil {
			results[i].Err = err
			continue
		}
		var o settleOut
		if rerr := o.readAnswer(out.results[j]); rerr == nil {
			results[i].Settlement = o.settlement()
			continue
		}
		results[i].Err = settleError(entryError(path, out.results[j]))
	}
	return results, err
}

// entryError is the error of a batch's result raw that is not its
// route's answer: the problem Tollgate wrote for that entry alone, as an
// error as the client's call of that route would return it.
func entryError(path string, raw []byte) error {
	var p problemBody
	_ = json.Unmarshal(raw, &p)
	switch s := p.Status; {
	case s == http.StatusTooManyRequests:
		return fmt.Errorf("POST %s: %w", path, rateLimited(http.Header{}, raw))
	case s == http.StatusPaymentRequired:
		return fmt.Errorf("POST %s: %w", path, &PaymentRequiredError{BillingURL: p.BillingURL, Detail: p.Detail})
	case s >= 400 && s < 500 && s != http.StatusRequestTimeout && p.Type != "":
		return fmt.Errorf("POST %s: %w", path, &APIError{Status: s, Type: p.Type, Title: p.Title, Detail: p.Detail, Field: p.Field})
	case s >= 500 || s == http.StatusRequestTimeout:
		return unavailable("POST", path, fmt.Errorf("a result of status %d", s))
	}
	return unavailable("POST", path, errors.New("a result is not Tollgate's"))
}

// settleError wraps err, a settlement's, with the sentinel of its status,
// as Settle does.
func settleError(err error) error {
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrReservationGone, err)
	case errors.As(err, &ae) && ae.Status == http.StatusConflict:
		return fmt.Errorf("%w: %w", ErrSettledOtherwise, err)
	}
	return err
}
