package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/usage"
)

// Usage keeps per-minute usage counts (table usage_minutes) for
// usage.Recorder. It is safe for concurrent use.
type Usage struct {
	q *sqlcgen.Queries
}

var _ usage.Store = (*Usage)(nil)

// NewUsage returns the usage store on pool, a database migrated to at least
// 000005.
func NewUsage(pool *pgxpool.Pool) *Usage {
	return &Usage{q: sqlcgen.New(pool)}
}

// AddUsage implements usage.Store in one statement. Rows whose tenant id is
// not a UUID name no tenant and are dropped, like those of deleted tenants.
func (s *Usage) AddUsage(ctx context.Context, flushID string, rows []usage.Row) error {
	id, ok := uuidOf(flushID)
	if !ok {
		return fmt.Errorf("add usage: flush id %q is not a UUID", flushID)
	}
	p := sqlcgen.AddUsageParams{
		BatchID:   id,
		TenantIds: make([]pgtype.UUID, 0, len(rows)),
		Minutes:   make([]pgtype.Timestamptz, 0, len(rows)),
		Live:      make([]bool, 0, len(rows)),
		Checked:   make([]bool, 0, len(rows)),
		Outcomes:  make([]string, 0, len(rows)),
		Checks:    make([]int64, 0, len(rows)),
	}
	for _, r := range rows {
		id, ok := uuidOf(r.TenantID)
		if !ok {
			continue
		}
		p.TenantIds = append(p.TenantIds, id)
		p.Minutes = append(p.Minutes, pgtype.Timestamptz{Time: r.Minute, Valid: true})
		p.Live = append(p.Live, r.Live)
		p.Checked = append(p.Checked, r.Checked)
		p.Outcomes = append(p.Outcomes, r.Outcome)
		p.Checks = append(p.Checks, r.Count)
	}
	if err := s.q.AddUsage(ctx, p); err != nil {
		return fmt.Errorf("add %d usage rows: %w", len(p.TenantIds), dbErr(err, auditErrors))
	}
	return nil
}

// UsageTotals implements usage.Store.
func (s *Usage) UsageTotals(ctx context.Context, tenantID string, from, until time.Time) ([]usage.Total, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.UsageTotals(ctx, sqlcgen.UsageTotalsParams{
		TenantID:    id,
		FromMinute:  pgtype.Timestamptz{Time: from, Valid: true},
		UntilMinute: pgtype.Timestamptz{Time: until, Valid: true},
	})
	if err != nil {
		return nil, fmt.Errorf("usage totals: %w", dbErr(err, auditErrors))
	}
	out := make([]usage.Total, len(rows))
	for i, r := range rows {
		out[i] = usage.Total{Live: r.Live, Checked: r.Checked, Outcome: r.Outcome, Count: r.Checks}
	}
	return out, nil
}

// FlushApplied implements usage.Store.
func (s *Usage) FlushApplied(ctx context.Context, flushID string) (bool, error) {
	id, ok := uuidOf(flushID)
	if !ok {
		return false, nil
	}
	applied, err := s.q.BatchApplied(ctx, id)
	if err != nil {
		return false, fmt.Errorf("flush %s applied: %w", flushID, dbErr(err, auditErrors))
	}
	return applied, nil
}

// PruneFlushes implements usage.Store.
func (s *Usage) PruneFlushes(ctx context.Context, before time.Time) error {
	return pruneFlushes(ctx, s.q, before)
}

// pruneFlushes deletes the ids of flushes applied before before, at most
// pruneRows rows a statement so that no statement holds many locks.
func pruneFlushes(ctx context.Context, q *sqlcgen.Queries, before time.Time) error {
	for {
		n, err := q.PruneAppliedBatches(ctx, sqlcgen.PruneAppliedBatchesParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneRows,
		})
		if err != nil {
			return fmt.Errorf("prune applied flush ids: %w", dbErr(err, auditErrors))
		}
		if n < pruneRows {
			return nil
		}
	}
}
