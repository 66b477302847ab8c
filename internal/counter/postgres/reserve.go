package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres/sqlcgen"
	"github.com/tollgate/tollgate/internal/limit"
)

// Reservations live in the reservations table, one row per reservation
// with its charges in arrays (migrations/000027_reservations.up.sql). A
// reservation is one call of tollgate_reserve, which decides its request
// with tollgate_check and records it in the same transaction; a settlement
// one call of tollgate_settle. Both take a transaction-scoped advisory lock
// on the group first, so that one group's reservations and settlements,
// and the expiries they deal with, are applied one at a time by any number
// of instances, then the counter rows they touch in the order every batch
// of checks locks them. They run on the connections outside the lanes
// (direct), as Reset does: a flood of them queues behind itself, not in
// front of the checks.

// Statuses of a reservation, as tollgate_reserve answers them.
const (
	reserveHeld     = 1
	reserveGroupCap = 2
	reserveIDInUse  = 3
)

// Statuses of a settlement, as tollgate_settle answers them.
const (
	settleNone     = 0
	settleNow      = 1
	settleRepeat   = 2
	settleConflict = 3
)

// Reserve implements counter.Store in one statement. Errors wrap
// counter.ErrInvalid (a malformed request, an id in use) or
// counter.ErrUnavailable.
func (s *Store) Reserve(ctx context.Context, r counter.Reservation) (counter.Reserved, error) {
	if err := counter.ValidateReserve(r); err != nil {
		return counter.Reserved{}, fmt.Errorf("reserve: %w", err)
	}
	req := r.Request
	n := len(req.Items)
	keys, order := rowKeys([]counter.Request{req}, n)
	cp := checkParams([]counter.Request{req}, n, keys, order)
	p := sqlcgen.ReserveParams{
		Keys: cp.Keys, Slots: cp.Slots, Algorithms: cp.Algorithms, Limits: cp.Limits, Windows: cp.Windows,
		Costs: cp.Costs, Advisory: cp.Advisory, Ceilings: int32(req.Ceilings), ItemKeys: make([][]byte, n),
		Grp: req.Group, ID: []byte(r.ID), Ttl: r.TTL.Microseconds(), Release: r.OnExpiryRelease,
		GroupLimit: r.GroupLimit, Now: micros(req.Now),
	}
	for i, it := range req.Items {
		p.ItemKeys[i] = []byte(it.Key)
	}
	var rows []sqlcgen.ReserveRow
	err := s.direct(ctx, req.Group, "reserve", func(ctx context.Context) (err error) {
		rows, err = s.q.Reserve(ctx, p)
		return err
	})
	if err != nil {
		return counter.Reserved{}, err
	}
	if len(rows) == 1 && rows[0].Status == reserveIDInUse {
		return counter.Reserved{}, fmt.Errorf("reserve: %w", counter.ErrReservationExists)
	}
	if len(rows) != n+1 {
		return counter.Reserved{}, fmt.Errorf("reserve: %w: %d rows for %d items", counter.ErrUnavailable, len(rows), n)
	}
	seen := make([]counter.Seen, n)
	for i, c := range rows[:n] {
		seen[i] = counter.Seen{
			State:   limit.State{Start: c.SeenStart, Count: c.SeenCount, Prev: c.SeenPrev, TAT: c.SeenTat},
			Allowed: c.Allowed,
		}
	}
	last := rows[n]
	res := counter.Reserved{Allowed: last.Status == reserveHeld, GroupFull: last.Status == reserveGroupCap}
	if res.GroupFull {
		req.Mode = counter.Peek
	}
	now := time.UnixMicro(last.NowUs).UTC()
	res.Result, res.Overdrawn = counter.Answer(req, seen, now), counter.Overdrafts(req, seen, now)
	if res.Allowed {
		res.ExpiresAt = time.UnixMicro(last.ExpiresUs).UTC()
	}
	return res, nil
}

// Settle implements counter.Store in one statement.
func (s *Store) Settle(ctx context.Context, ref counter.SettleRef) (counter.Settlement, error) {
	if err := counter.ValidateSettle(ref); err != nil {
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w", err)
	}
	var row sqlcgen.SettleRow
	err := s.direct(ctx, ref.Group, "settle reservation", func(ctx context.Context) (err error) {
		row, err = s.q.Settle(ctx, sqlcgen.SettleParams{
			Grp: ref.Group, ID: []byte(ref.ID), Used: ref.Used, Kept: counter.SettledKept.Microseconds(), Kmax: ref.KeptLimit, Now: micros(ref.Now),
		})
		return err
	})
	if err != nil {
		return counter.Settlement{}, err
	}
	switch row.Status {
	case settleNone:
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w", counter.ErrNoReservation)
	case settleConflict:
		return counter.Settlement{}, fmt.Errorf("settle reservation with %d: settled with %d: %w", ref.Used, row.Used, counter.ErrSettled)
	}
	charges, ok := chargesOf(row.ItemKeys, row.Algs, row.Limits, row.Windows, row.Amounts, row.Charged)
	n := len(charges)
	if !ok || len(row.AStart) != n || len(row.ACount) != n || len(row.APrev) != n || len(row.ATat) != n {
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w: charges of unequal lengths", counter.ErrUnavailable)
	}
	at := time.UnixMicro(row.SettledUs).UTC()
	out := counter.Settlement{Items: make([]counter.SettledItem, n), Used: row.Used, Repeat: row.Status == settleRepeat, Now: at}
	for i, c := range charges {
		out.Items[i] = c.Settled(limit.State{Start: row.AStart[i], Count: row.ACount[i], Prev: row.APrev[i], TAT: row.ATat[i]}, at)
	}
	return out, nil
}

// Reservation implements counter.Store in one statement, which writes
// nothing.
func (s *Store) Reservation(ctx context.Context, group, id string, now time.Time) (counter.Held, error) {
	if err := counter.ValidateRead(group, id, now); err != nil {
		return counter.Held{}, fmt.Errorf("read reservation: %w", err)
	}
	var row sqlcgen.ReadReservationRow
	err := s.direct(ctx, group, "read reservation", func(ctx context.Context) (err error) {
		row, err = s.q.ReadReservation(ctx, sqlcgen.ReadReservationParams{Grp: group, ID: []byte(id), Now: micros(now)})
		return err
	})
	if err != nil {
		return counter.Held{}, err
	}
	// due_us is the expiry of a live reservation, the end of the time a
	// settled one's outcome is kept: either way it is gone from then on.
	if !row.Found || row.DueUs <= row.NowUs {
		return counter.Held{}, fmt.Errorf("read reservation: %w", counter.ErrNoReservation)
	}
	charges, ok := chargesOf(row.ItemKeys, row.Algs, row.Limits, row.Windows, row.Amounts, row.Charged)
	if !ok {
		return counter.Held{}, fmt.Errorf("read reservation: %w: charges of unequal lengths", counter.ErrUnavailable)
	}
	return counter.Held{Charges: charges, ExpiresAt: time.UnixMicro(row.ExpiresUs).UTC(), Settled: row.Settled, Used: row.Used}, nil
}

// chargesOf returns a reservation row's charges from its arrays, and
// false when their lengths differ.
func chargesOf(itemKeys [][]byte, algs []int16, limits, windows, amounts, charged []int64) ([]counter.Charge, bool) {
	n := len(itemKeys)
	if len(algs) != n || len(limits) != n || len(windows) != n || len(amounts) != n || len(charged) != n {
		return nil, false
	}
	out := make([]counter.Charge, n)
	for i := range n {
		out[i] = counter.Charge{
			Key: string(itemKeys[i]), Algorithm: limit.Algorithm(algs[i]), Limit: limits[i],
			Window: limit.WindowFromMicros(windows[i]), Amount: amounts[i], Charged: charged[i],
		}
	}
	return out, true
}

// ReservedSums implements counter.Store in one read-only statement, on the
// connections outside the lanes as Reserve's.
func (s *Store) ReservedSums(ctx context.Context, group string, keys []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateReservedSums(group, keys, now); err != nil {
		return nil, fmt.Errorf("reserved sums: %w", err)
	}
	p := sqlcgen.ReservedSumsParams{ItemKeys: make([][]byte, len(keys)), Grp: group, Now: micros(now)}
	for i, k := range keys {
		p.ItemKeys[i] = []byte(k)
	}
	var rows []sqlcgen.ReservedSumsRow
	err := s.direct(ctx, group, "reserved sums", func(ctx context.Context) (err error) {
		rows, err = s.q.ReservedSums(ctx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(rows) != len(keys) {
		return nil, fmt.Errorf("reserved sums: %w: %d rows for %d keys", counter.ErrUnavailable, len(rows), len(keys))
	}
	out := make([]int64, len(keys))
	for i, r := range rows {
		out[i] = r.Reserved
	}
	return out, nil
}

// Charge implements counter.Store in one statement (tollgate_charge).
func (s *Store) Charge(ctx context.Context, req counter.Request) (counter.Charged, error) {
	if err := counter.ValidateCharge(req); err != nil {
		return counter.Charged{}, err
	}
	n := len(req.Items)
	p := sqlcgen.ChargeParams{Keys: make([]string, n), Algs: make([]int16, n), Limits: make([]int64, n),
		Windows: make([]int64, n), Costs: make([]int64, n), Now: micros(req.Now)}
	for i, it := range req.Items {
		p.Keys[i] = string(appendRowKey(nil, req.Group, it.Key))
		p.Algs[i], p.Limits[i], p.Windows[i], p.Costs[i] = int16(it.Algorithm), it.Limit, it.Window.Micros(), it.Cost
	}
	var row sqlcgen.ChargeRow
	err := s.direct(ctx, req.Group, "charge", func(ctx context.Context) (err error) {
		row, err = s.q.Charge(ctx, p)
		return err
	})
	if err != nil {
		return counter.Charged{}, err
	}
	if len(row.AStart) != n || len(row.ACount) != n || len(row.APrev) != n || len(row.ATat) != n {
		return counter.Charged{}, fmt.Errorf("charge: %w: %d states for %d items", counter.ErrUnavailable, len(row.AStart), n)
	}
	after := make([]limit.State, n)
	for i := range after {
		after[i] = limit.State{Start: row.AStart[i], Count: row.ACount[i], Prev: row.APrev[i], TAT: row.ATat[i]}
	}
	return counter.ChargedOf(req, after, time.UnixMicro(row.NowUs).UTC()), nil
}
