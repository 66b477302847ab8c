package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// Leases live in the leases table, one row per lease, and are decided by
// tollgate_acquire and tollgate_renew (migrations/000012_leases.up.sql)
// under a transaction-scoped advisory lock per key, so that acquires and
// renewals of one key are applied one at a time, by any number of
// instances. An acquire is one statement, its ceilings included, and is not
// coalesced with Checks: it holds its key's lock until it commits.

var _ counter.Leaser = (*Store)(nil)

// sqlstateLeaseInUse is what tollgate_acquire raises for an id in use.
const sqlstateLeaseInUse = "22023"

// micros returns a Now for the store protocol: nil for the database clock.
func micros(now time.Time) *int64 {
	if now.IsZero() {
		return nil
	}
	us := now.UnixMicro()
	return &us
}

// Acquire implements counter.Leaser in one round trip. It returns within
// about cfg.Timeout (or ctx's deadline); errors wrap counter.ErrUnavailable,
// or counter.ErrInvalid for a malformed request or an id in use.
func (s *Store) Acquire(ctx context.Context, a counter.Acquire) (counter.Acquired, error) {
	if err := counter.ValidateAcquire(a); err != nil {
		return counter.Acquired{}, fmt.Errorf("acquire lease: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	creq := a.CeilingRequest()
	reqs := []counter.Request{creq}
	keys, order := rowKeys(reqs, len(a.Ceilings))
	cp := checkParams(reqs, len(a.Ceilings), keys, order)
	rows, err := s.q.AcquireLease(ctx, sqlcgen.AcquireLeaseParams{
		Keys: cp.Keys, Slots: cp.Slots, Algorithms: cp.Algorithms, Limits: cp.Limits, Windows: cp.Windows,
		Costs: cp.Costs, Advisory: cp.Advisory,
		Grp: a.Group, Key: []byte(a.Key), Tally: []byte(a.Tally), ID: []byte(a.ID),
		Max: a.Limit, TtlUs: a.TTL.Microseconds(), Now: micros(a.Now),
	})
	if err == nil && len(rows) != len(a.Ceilings)+1 {
		err = fmt.Errorf("%d rows for %d ceilings and a lease", len(rows), len(a.Ceilings))
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == sqlstateLeaseInUse {
			return counter.Acquired{}, fmt.Errorf("acquire lease: id in use: %w", counter.ErrInvalid)
		}
		return counter.Acquired{}, s.failed(ctx, "acquire lease", err)
	}
	last := rows[len(rows)-1]
	now := time.UnixMicro(last.NowUs).UTC()
	res := counter.Acquired{Allowed: last.Allowed, InFlight: last.InFlight, Now: now}
	if last.ExpiresUs != 0 {
		res.ExpiresAt = time.UnixMicro(last.ExpiresUs).UTC()
	}
	if len(a.Ceilings) == 0 {
		res.Ceilings = counter.Result{Allowed: true, Now: now}
		return res, nil
	}
	seen := make([]counter.Seen, len(a.Ceilings))
	for i, r := range rows[:len(seen)] {
		seen[i] = counter.Seen{
			State:   limit.State{Start: r.SeenStart, Count: r.SeenCount, Prev: r.SeenPrev, TAT: r.SeenTat},
			Allowed: r.Allowed,
		}
	}
	res.Ceilings = counter.Answer(creq, seen, time.UnixMicro(rows[0].NowUs).UTC())
	return res, nil
}

// Renew implements counter.Leaser.
func (s *Store) Renew(ctx context.Context, ref counter.LeaseRef) (time.Time, error) {
	if err := counter.ValidateRef(ref, true); err != nil {
		return time.Time{}, fmt.Errorf("renew lease: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	exp, err := s.q.RenewLease(ctx, sqlcgen.RenewLeaseParams{Grp: ref.Group, ID: []byte(ref.ID), TtlUs: ref.TTL.Microseconds(), Now: micros(ref.Now)})
	if err != nil {
		return time.Time{}, s.failed(ctx, "renew lease", err)
	}
	if exp == 0 {
		return time.Time{}, fmt.Errorf("renew lease: %w", counter.ErrNoLease)
	}
	return time.UnixMicro(exp).UTC(), nil
}

// Release implements counter.Leaser.
func (s *Store) Release(ctx context.Context, ref counter.LeaseRef) error {
	if err := counter.ValidateRef(ref, false); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	live, err := s.q.ReleaseLease(ctx, sqlcgen.ReleaseLeaseParams{Grp: ref.Group, ID: []byte(ref.ID), Now: micros(ref.Now)})
	if err != nil {
		return s.failed(ctx, "release lease", err)
	}
	if !live {
		return fmt.Errorf("release lease: %w", counter.ErrNoLease)
	}
	return nil
}

// Held implements counter.Leaser.
func (s *Store) Held(ctx context.Context, group string, tallies []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateHeld(group, tallies, now); err != nil {
		return nil, fmt.Errorf("held leases: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ts := make([][]byte, len(tallies))
	for i, t := range tallies {
		ts[i] = []byte(t)
	}
	rows, err := s.q.HeldLeases(ctx, sqlcgen.HeldLeasesParams{Grp: group, Tallies: ts, Now: micros(now)})
	if err != nil {
		return nil, s.failed(ctx, "held leases", err)
	}
	n := make(map[string]int64, len(rows))
	for _, r := range rows {
		n[string(r.Tally)] = r.Held
	}
	out := make([]int64, len(tallies))
	for i, t := range tallies {
		out[i] = n[t]
	}
	return out, nil
}

// Reset implements counter.Store: the counter's row and the key's leases,
// in one statement.
func (s *Store) Reset(ctx context.Context, group, key string) error {
	if err := counter.ValidateReset(group, key); err != nil {
		return fmt.Errorf("reset counter: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.q.ResetKey(ctx, sqlcgen.ResetKeyParams{Grp: group, Key: []byte(key), CounterKey: string(appendRowKey(nil, group, key))}); err != nil {
		return s.failed(ctx, "reset counter", err)
	}
	return nil
}
