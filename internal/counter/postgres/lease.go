package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres/sqlcgen"
)

// Leases live in the leases table, one row per lease (migrations/
// 000012_leases.up.sql), and are decided by tollgate_lease_ops
// (migrations/000016_lease_ops.up.sql), coalesced (leaseops.go), under a
// transaction-scoped advisory lock per key, so that acquires and renewals
// of one key are applied one at a time, by any number of instances.

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

// Held implements counter.Store.
func (s *Store) Held(ctx context.Context, group string, tallies []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateHeld(group, tallies, now); err != nil {
		return nil, fmt.Errorf("held leases: %w", err)
	}
	ts := make([][]byte, len(tallies))
	for i, t := range tallies {
		ts[i] = []byte(t)
	}
	var rows []sqlcgen.HeldLeasesRow
	err := s.direct(ctx, group, "held leases", func(ctx context.Context) (err error) {
		rows, err = s.q.HeldLeases(ctx, sqlcgen.HeldLeasesParams{Grp: group, Tallies: ts, Now: micros(now)})
		return err
	})
	if err != nil {
		return nil, err
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
	return s.direct(ctx, group, "reset counter", func(ctx context.Context) error {
		return s.q.ResetKey(ctx, sqlcgen.ResetKeyParams{Grp: group, Key: []byte(key), CounterKey: string(appendRowKey(nil, group, key))})
	})
}
