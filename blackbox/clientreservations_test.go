package blackbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestClientReservations: Reserve holds an amount of a budget and a
// refusal is an answer; Settle gives back what was not used, answers a
// second settlement with the same used as a repeat and another used as
// ErrSettledOtherwise; ReleaseReservation gives it all back; an excess
// overdraws the budget; an Idempotency-Key reserves once; an unknown
// reservation is ErrReservationGone.
func TestClientReservations(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: in, key: nt.LiveKey}
	u.putPolicy("llm-tokens", map[string]any{"limit": 10000, "window": "1h", "algorithm": "fixed_window", "unit": "tokens"})
	tg := newClient(t, in.base, nt.LiveKey)
	ctx := context.Background()

	t.Run("reserve, settle, release", func(t *testing.T) {
		r, err := tg.Reserve(ctx, "llm-tokens", "user-1", 4000, client.ReserveTTL(10*time.Minute))
		if err != nil || !r.Allowed || !strings.HasPrefix(r.ID, "rs_") || r.Amount != 4000 || r.Remaining != 6000 ||
			r.Limit != 10000 || r.Unit != "tokens" || r.Degraded || r.Repeat || r.ResetAt.IsZero() ||
			r.ExpiresAt.Before(time.Now().Add(9*time.Minute)) || r.ExpiresAt.After(time.Now().Add(11*time.Minute)) {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
		s, err := tg.Settle(ctx, r, 2750)
		want := client.Settlement{ID: r.ID, Amount: 4000, Used: 2750, Returned: 1250, Remaining: 7250, Limit: 10000, ResetAt: s.ResetAt, Unit: "tokens"}
		if err != nil || s != want {
			t.Fatalf("settle: got %+v, %v, want %+v", s, err, want)
		}
		// A settlement sent again (after a lost answer) is answered as the first.
		want.Repeat = true
		if s, err := tg.Settle(ctx, r, 2750); err != nil || s != want {
			t.Fatalf("settle again: got %+v, %v, want %+v", s, err, want)
		}
		var ae *client.APIError
		if _, err := tg.Settle(ctx, r, 100); !errors.Is(err, client.ErrSettledOtherwise) || !errors.As(err, &ae) || ae.Status != 409 {
			t.Fatalf("settle with another used: %v", err)
		}
		// A refusal by the budget counts nothing and is no error.
		r, err = tg.Reserve(ctx, "llm-tokens", "user-1", 8000)
		if err != nil || r.Allowed || r.ID != "" || r.Remaining != 7250 || r.RetryAfter <= 0 || r.Degraded || r.TenantFull {
			t.Fatalf("reserve past the budget: %+v, %v", r, err)
		}
		r, err = tg.Reserve(ctx, "llm-tokens", "user-1", 7000)
		if err != nil || !r.Allowed || r.Remaining != 250 {
			t.Fatalf("reserve the rest: %+v, %v", r, err)
		}
		s, err = tg.ReleaseReservation(ctx, r)
		if err != nil || s.Used != 0 || s.Returned != 7000 || s.Remaining != 7250 {
			t.Fatalf("release: %+v, %v", s, err)
		}
	})

	t.Run("excess overdraws", func(t *testing.T) {
		r, err := tg.Reserve(ctx, "llm-tokens", "user-2", 100)
		if err != nil || !r.Allowed {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
		s, err := tg.Settle(ctx, r, 10500)
		if err != nil || s.Excess != 10400 || s.Overdrawn != 500 || s.Remaining != 0 {
			t.Fatalf("settle past the limit: %+v, %v", s, err)
		}
		if r, err := tg.Reserve(ctx, "llm-tokens", "user-2", 1); err != nil || r.Allowed {
			t.Fatalf("reserve of an overdrawn budget: %+v, %v", r, err)
		}
	})

	t.Run("idempotency key", func(t *testing.T) {
		first, err := tg.Reserve(ctx, "llm-tokens", "user-3", 1000, client.IdempotencyKey("call-1"))
		if err != nil || !first.Allowed || first.Repeat {
			t.Fatalf("first: %+v, %v", first, err)
		}
		again, err := tg.Reserve(ctx, "llm-tokens", "user-3", 1000, client.IdempotencyKey("call-1"))
		if err != nil || !again.Allowed || !again.Repeat || again.ID != first.ID || !again.ExpiresAt.Equal(first.ExpiresAt) || again.Amount != first.Amount {
			t.Fatalf("again: %+v, %v", again, err)
		}
		// Without a key each Reserve is a reservation of its own.
		other, err := tg.Reserve(ctx, "llm-tokens", "user-3", 1000)
		if err != nil || !other.Allowed || other.Repeat || other.ID == first.ID || other.Remaining != 8000 {
			t.Fatalf("without a key: %+v, %v", other, err)
		}
	})

	t.Run("gone", func(t *testing.T) {
		var ae *client.APIError
		gone := client.Reservation{Allowed: true, ID: "rs_" + strings.Repeat("0", 32)}
		if _, err := tg.Settle(ctx, gone, 1); !errors.Is(err, client.ErrReservationGone) || !errors.As(err, &ae) || ae.Status != 404 {
			t.Fatalf("settle an unknown reservation: %v", err)
		}
		if _, err := tg.ReleaseReservation(ctx, gone); !errors.Is(err, client.ErrReservationGone) {
			t.Fatalf("release an unknown reservation: %v", err)
		}
		// A concurrency policy has no budget: a fault, whatever the fail mode.
		u.putPolicy("exports", map[string]any{"limit": 3, "algorithm": "concurrency"})
		if r, err := tg.Reserve(ctx, "exports", "s", 1); !errors.As(err, &ae) || ae.Status != 400 || r.Allowed {
			t.Fatalf("reserve of a concurrency policy: %+v, %v", r, err)
		}
	})
}

// TestClientSpend: Spend settles with what its function reports, releases
// the reservation when the function fails or panics (returning its error,
// or panicking on), does not run the function when the budget refuses,
// and under the fail modes runs it (open, nothing settled) or not
// (closed).
func TestClientSpend(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: in, key: nt.LiveKey}
	u.putPolicy("llm-tokens", map[string]any{"limit": 10000, "window": "1h", "algorithm": "fixed_window", "unit": "tokens"})
	tg := newClient(t, in.base, nt.LiveKey)
	ctx := context.Background()
	remaining := func(subject string) int64 {
		t.Helper()
		d, err := tg.Peek(ctx, client.Item{Policy: "llm-tokens", Subject: subject})
		if err != nil || len(d.Items) != 1 {
			t.Fatalf("peek: %+v, %v", d, err)
		}
		return d.Items[0].Remaining
	}

	t.Run("settles what was used", func(t *testing.T) {
		r, s, err := tg.Spend(ctx, "llm-tokens", "user-1", 4000, func(ctx context.Context) (int64, error) {
			return 2750, nil
		})
		if err != nil || !r.Allowed || s.ID != r.ID || s.Used != 2750 || s.Returned != 1250 || s.Remaining != 7250 {
			t.Fatalf("spend: %+v, %+v, %v", r, s, err)
		}
		if got := remaining("user-1"); got != 7250 {
			t.Errorf("remaining after spending 2750: got %d, want 7250", got)
		}
	})

	t.Run("released on error", func(t *testing.T) {
		failed := errors.New("model unavailable")
		ran := false
		r, s, err := tg.Spend(ctx, "llm-tokens", "user-2", 4000, func(ctx context.Context) (int64, error) {
			ran = true
			if got := remaining("user-2"); got != 6000 {
				t.Errorf("remaining while reserved: got %d, want 6000", got)
			}
			return 0, failed
		})
		if !ran || err != failed || !r.Allowed || s != (client.Settlement{}) {
			t.Fatalf("spend failing: %+v, %+v, %v", r, s, err)
		}
		if got := remaining("user-2"); got != 10000 {
			t.Errorf("remaining after a failed spend: got %d, want 10000", got)
		}
	})

	t.Run("released on panic", func(t *testing.T) {
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("recovered %v, want the function's panic", p)
				}
			}()
			_, _, _ = tg.Spend(ctx, "llm-tokens", "user-3", 4000, func(ctx context.Context) (int64, error) {
				panic("boom")
			})
		}()
		if got := remaining("user-3"); got != 10000 {
			t.Errorf("remaining after a panicking spend: got %d, want 10000", got)
		}
	})

	t.Run("refused", func(t *testing.T) {
		r, s, err := tg.Spend(ctx, "llm-tokens", "user-4", 20000, func(ctx context.Context) (int64, error) {
			t.Error("the function ran though the budget refused")
			return 0, nil
		})
		if err != nil || r.Allowed || r.RetryAfter <= 0 || s != (client.Settlement{}) {
			t.Fatalf("spend past the budget: %+v, %+v, %v", r, s, err)
		}
	})

	t.Run("fail modes", func(t *testing.T) {
		down := "http://" + bintest.FreePort(t)
		open := newClient(t, down, nt.LiveKey)
		ran := false
		r, s, err := open.Spend(ctx, "llm-tokens", "user-5", 4000, func(ctx context.Context) (int64, error) {
			ran = true
			return 2750, nil
		})
		if err != nil || !ran || !r.Allowed || !r.Degraded || r.ID != "" || s != (client.Settlement{}) {
			t.Fatalf("spend failing open: ran %v, %+v, %+v, %v", ran, r, s, err)
		}
		closed := newClient(t, down, nt.LiveKey, client.WithFailMode(client.FailClosed))
		r, _, err = closed.Spend(ctx, "llm-tokens", "user-5", 4000, func(ctx context.Context) (int64, error) {
			t.Error("the function ran though failing closed")
			return 0, nil
		})
		if !errors.Is(err, client.ErrUnavailable) || r.Allowed || !r.Degraded {
			t.Fatalf("spend failing closed: %+v, %v", r, err)
		}
		// The fail mode's reservation holds nothing: settling it sends nothing.
		if s, err := open.Settle(ctx, client.Reservation{Allowed: true, Degraded: true}, 10); err != nil || s != (client.Settlement{}) {
			t.Fatalf("settle a degraded reservation: %+v, %v", s, err)
		}
	})
}

// TestClientReservationBatches: ReserveBatch answers each reservation as
// Reserve would alone (held, refused by the budget, an *APIError for an
// unknown policy), keys each so that the same batch sent again reserves
// nothing more; SettleBatch answers each settlement as Settle would
// (settled, ErrReservationGone, a repeat, ErrSettledOtherwise) and sends
// nothing for a Reservation that holds nothing; a batch Tollgate cannot
// read is an *APIError naming the entry, and no Tollgate is the FailMode's.
func TestClientReservationBatches(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: in, key: nt.LiveKey}
	u.putPolicy("llm-tokens", map[string]any{"limit": 10000, "window": "1h", "algorithm": "fixed_window", "unit": "tokens"})
	tg := newClient(t, in.base, nt.LiveKey)
	ctx := context.Background()

	batch := []client.BatchReservation{
		{Policy: "llm-tokens", Subject: "user-1", Amount: 4000, TTL: 10 * time.Minute, IdempotencyKey: "call-1"},
		{Policy: "llm-tokens", Subject: "user-2", Amount: 20000},
		{Policy: "nope", Subject: "user-3", Amount: 1},
	}
	rs, err := tg.ReserveBatch(ctx, batch)
	var ae *client.APIError
	if err != nil || len(rs) != 3 {
		t.Fatalf("reserve batch: %+v, %v", rs, err)
	}
	if r := rs[0].Reservation; rs[0].Err != nil || !r.Allowed || !strings.HasPrefix(r.ID, "rs_") || r.Remaining != 6000 || r.Unit != "tokens" ||
		r.ExpiresAt.Before(time.Now().Add(9*time.Minute)) || r.ExpiresAt.After(time.Now().Add(11*time.Minute)) {
		t.Errorf("held: %+v", rs[0])
	}
	if r := rs[1].Reservation; rs[1].Err != nil || r.Allowed || r.ID != "" || r.Remaining != 10000 || r.RetryAfter <= 0 {
		t.Errorf("refused by the budget: %+v", rs[1])
	}
	if !errors.As(rs[2].Err, &ae) || ae.Status != 400 || ae.Field != "policy" || rs[2].Reservation.Allowed {
		t.Errorf("unknown policy: %+v", rs[2])
	}
	// Sent again: the keyed entry is a repeat, the others their own again.
	again, err := tg.ReserveBatch(ctx, batch[:1])
	if err != nil || !again[0].Reservation.Repeat || again[0].Reservation.ID != rs[0].Reservation.ID || again[0].Reservation.Remaining != 6000 {
		t.Fatalf("the same batch again: %+v, %v", again, err)
	}
	// The same key as Reserve's.
	if r, err := tg.Reserve(ctx, "llm-tokens", "user-1", 4000, client.IdempotencyKey("call-1")); err != nil || !r.Repeat || r.ID != rs[0].Reservation.ID {
		t.Fatalf("Reserve with the batch's key: %+v, %v", r, err)
	}

	held := rs[0].Reservation
	gone := client.Reservation{Allowed: true, ID: "rs_" + strings.Repeat("0", 32)}
	ss, err := tg.SettleBatch(ctx, []client.BatchSettlement{{Reservation: held, Used: 2750}, {Reservation: gone, Used: 1}, {Reservation: rs[1].Reservation, Used: 5}})
	if err != nil || len(ss) != 3 {
		t.Fatalf("settle batch: %+v, %v", ss, err)
	}
	if s := ss[0].Settlement; ss[0].Err != nil || s.ID != held.ID || s.Used != 2750 || s.Returned != 1250 || s.Remaining != 7250 || s.Repeat {
		t.Errorf("settled: %+v", ss[0])
	}
	if !errors.Is(ss[1].Err, client.ErrReservationGone) || !errors.As(ss[1].Err, &ae) || ae.Status != 404 {
		t.Errorf("unknown reservation: %+v", ss[1])
	}
	if ss[2] != (client.SettleResult{}) {
		t.Errorf("a refused reservation, settled: %+v", ss[2])
	}
	ss, err = tg.SettleBatch(ctx, []client.BatchSettlement{{Reservation: held, Used: 2750}, {Reservation: held, Used: 100}})
	if err != nil || !ss[0].Settlement.Repeat || ss[0].Err != nil || !errors.Is(ss[1].Err, client.ErrSettledOtherwise) {
		t.Fatalf("settle batch again: %+v, %v", ss, err)
	}

	// A batch Tollgate cannot read reserves nothing.
	rs, err = tg.ReserveBatch(ctx, []client.BatchReservation{{Policy: "llm-tokens", Subject: "user-4", Amount: 1}, {Policy: "llm-tokens", Subject: "user-4", Amount: 0}})
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "reservations[1].amount" || len(rs) != 2 || rs[0].Err != err || rs[0].Reservation.Allowed {
		t.Fatalf("a batch with an amount of 0: %+v, %v", rs, err)
	}
	if r, err := tg.Reserve(ctx, "llm-tokens", "user-4", 10000); err != nil || !r.Allowed {
		t.Fatalf("user-4's budget after the refused batch: %+v, %v", r, err)
	}

	// No Tollgate: the FailMode decides every reservation.
	down := newClient(t, "http://"+bintest.FreePort(t), nt.LiveKey, client.WithFailMode(client.FailOpen))
	rs, err = down.ReserveBatch(ctx, batch[:2])
	if !errors.Is(err, client.ErrUnavailable) || len(rs) != 2 || !rs[0].Reservation.Allowed || !rs[0].Reservation.Degraded || rs[1].Reservation.Amount != 20000 {
		t.Fatalf("no Tollgate, fail open: %+v, %v", rs, err)
	}
}

// TestClientCharge: Charge counts usage past the limit against the real
// binary, is allowed whatever is left, and the next Check is refused; while
// Tollgate is away it is an error, not the fail mode's answer.
func TestClientCharge(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: in, key: nt.LiveKey}
	u.putPolicy("llm-tokens", map[string]any{"limit": 1000, "window": "1h", "unit": "tokens"})
	tg := newClient(t, in.base, nt.LiveKey)
	ctx := context.Background()
	item := client.Item{Policy: "llm-tokens", Subject: "user-1", Cost: 1200}
	d, err := tg.Charge(ctx, item)
	if err != nil || !d.Allowed || len(d.Items) != 1 || d.Items[0].Allowed || d.Items[0].Remaining != 0 || d.Items[0].Limit != 1000 {
		t.Fatalf("charge 1,200 of 1,000: %+v, %v", d, err)
	}
	item.Cost = 1
	if d, err := tg.Check(ctx, item); err != nil || d.Allowed {
		t.Fatalf("check on the overdrawn budget: %+v, %v", d, err)
	}
	away := newClient(t, "http://127.0.0.1:1", nt.LiveKey)
	if d, err := away.Charge(ctx, item); !errors.Is(err, client.ErrUnavailable) || d.Allowed {
		t.Fatalf("charge with Tollgate away: %+v, %v", d, err)
	}
}
