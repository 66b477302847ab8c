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

var _ usage.PolicyStore = (*Usage)(nil)

// AddPolicyHours implements usage.PolicyStore in one statement. Rows whose
// tenant id is not a UUID name no tenant and are dropped, like those of
// deleted policies.
func (s *Usage) AddPolicyHours(ctx context.Context, flushID string, rows []usage.PolicyHour) error {
	id, ok := uuidOf(flushID)
	if !ok {
		return fmt.Errorf("add policy hours: flush id %q is not a UUID", flushID)
	}
	p := sqlcgen.AddPolicyHoursParams{
		BatchID:   id,
		TenantIds: make([]pgtype.UUID, 0, len(rows)),
		Policies:  make([]string, 0, len(rows)),
		Hours:     make([]pgtype.Timestamptz, 0, len(rows)),
		Checks:    make([]int64, 0, len(rows)),
		Refusals:  make([]int64, 0, len(rows)),
	}
	for _, r := range rows {
		id, ok := uuidOf(r.TenantID)
		if !ok {
			continue
		}
		p.TenantIds = append(p.TenantIds, id)
		p.Policies = append(p.Policies, r.Policy)
		p.Hours = append(p.Hours, pgtype.Timestamptz{Time: r.At, Valid: true})
		p.Checks = append(p.Checks, r.Checks)
		p.Refusals = append(p.Refusals, r.Refusals)
	}
	if err := s.q.AddPolicyHours(ctx, p); err != nil {
		return fmt.Errorf("add %d policy hours: %w", len(p.TenantIds), dbErr(err, auditErrors))
	}
	return nil
}

// PrunePolicyHours implements usage.PolicyStore, at most pruneRows rows a
// statement.
func (s *Usage) PrunePolicyHours(ctx context.Context, before time.Time) error {
	for {
		n, err := s.q.PrunePolicyHours(ctx, sqlcgen.PrunePolicyHoursParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneRows,
		})
		if err != nil {
			return fmt.Errorf("prune policy hours: %w", dbErr(err, auditErrors))
		}
		if n < pruneRows {
			return nil
		}
	}
}

// PolicyHours implements usage.PolicyStore.
func (s *Usage) PolicyHours(ctx context.Context, tenantID string, from, until time.Time) ([]usage.PolicyHour, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.PolicyHours(ctx, sqlcgen.PolicyHoursParams{
		TenantID: id, FromHour: pgtype.Timestamptz{Time: from, Valid: true}, UntilHour: pgtype.Timestamptz{Time: until, Valid: true},
	})
	if err != nil {
		return nil, fmt.Errorf("policy hours of tenant %s: %w", tenantID, dbErr(err, auditErrors))
	}
	out := make([]usage.PolicyHour, len(rows))
	for i, r := range rows {
		out[i] = usage.PolicyHour{TenantID: tenantID, Policy: r.Policy, At: r.Hour.Time.UTC(), Checks: r.Checks, Refusals: r.Refusals}
	}
	return out, nil
}

// PolicyDays implements usage.PolicyStore.
func (s *Usage) PolicyDays(ctx context.Context, tenantID string, from, until time.Time) ([]usage.PolicyHour, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.PolicyDays(ctx, sqlcgen.PolicyDaysParams{
		TenantID: id, FromHour: pgtype.Timestamptz{Time: from, Valid: true}, UntilHour: pgtype.Timestamptz{Time: until, Valid: true},
	})
	if err != nil {
		return nil, fmt.Errorf("policy days of tenant %s: %w", tenantID, dbErr(err, auditErrors))
	}
	out := make([]usage.PolicyHour, len(rows))
	for i, r := range rows {
		out[i] = usage.PolicyHour{TenantID: tenantID, Policy: r.Policy, At: r.Day.Time.UTC(), Checks: r.Checks, Refusals: r.Refusals}
	}
	return out, nil
}
