package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// CountRefusals implements audit.Store in one statement.
func (s *Audit) CountRefusals(ctx context.Context, batchID string, cs []audit.RefusalCount) error {
	id, ok := auditUUID(batchID)
	if !ok {
		return fmt.Errorf("count refusals: batch id %q is not a UUID", batchID)
	}
	p := sqlcgen.CountRefusalsParams{
		BatchID:     id,
		TenantIds:   make([]pgtype.UUID, 0, len(cs)),
		Policies:    make([]string, 0, len(cs)),
		SubjectKeys: make([]string, 0, len(cs)),
		Hours:       make([]pgtype.Timestamptz, 0, len(cs)),
		Refusals:    make([]int64, 0, len(cs)),
	}
	for _, c := range cs {
		id, ok := auditUUID(c.TenantID)
		if !ok || c.Count <= 0 {
			continue
		}
		p.TenantIds = append(p.TenantIds, id)
		p.Policies = append(p.Policies, c.Policy)
		p.SubjectKeys = append(p.SubjectKeys, c.Key)
		p.Hours = append(p.Hours, pgtype.Timestamptz{Time: c.Hour, Valid: true})
		p.Refusals = append(p.Refusals, c.Count)
	}
	if err := s.q.CountRefusals(ctx, p); err != nil {
		return auditErr(err)
	}
	return nil
}

// RaiseAlerts implements audit.Store in one statement, which must run after
// the CountRefusals it depends on has committed: the pool runs each in a
// transaction of its own.
func (s *Audit) RaiseAlerts(ctx context.Context, cs []audit.AlertCheck) (int64, error) {
	p := sqlcgen.RaiseAlertsParams{
		TenantIds:   make([]pgtype.UUID, 0, len(cs)),
		Policies:    make([]string, 0, len(cs)),
		SubjectKeys: make([]string, 0, len(cs)),
		AlertAfter:  make([]int64, 0, len(cs)),
		Ats:         make([]pgtype.Timestamptz, 0, len(cs)),
		Days:        make([]pgtype.Date, 0, len(cs)),
		Shadow:      make([]bool, 0, len(cs)),
	}
	for _, c := range cs {
		id, ok := auditUUID(c.TenantID)
		if !ok || c.AlertAfter <= 0 {
			continue
		}
		at := c.At.UTC()
		p.TenantIds = append(p.TenantIds, id)
		p.Policies = append(p.Policies, c.Policy)
		p.SubjectKeys = append(p.SubjectKeys, c.Key)
		p.AlertAfter = append(p.AlertAfter, c.AlertAfter)
		p.Ats = append(p.Ats, pgtype.Timestamptz{Time: at, Valid: true})
		p.Days = append(p.Days, pgtype.Date{Time: time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC), Valid: true})
		p.Shadow = append(p.Shadow, c.Shadow)
	}
	if len(p.TenantIds) == 0 {
		return 0, nil
	}
	n, err := s.q.RaiseAlerts(ctx, p)
	if err != nil {
		return 0, auditErr(err)
	}
	return n, nil
}

// ListAlerts implements audit.Store. A tenant id that is not a UUID has no
// alerts.
func (s *Audit) ListAlerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]audit.Alert, error) {
	id, ok := auditUUID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.ListAlerts(ctx, sqlcgen.ListAlertsParams{
		TenantID: id,
		Since:    pgtype.Timestamptz{Time: since, Valid: true},
		MaxRows:  int32(min(limit, 1<<30)),
	})
	if err != nil {
		return nil, auditErr(err)
	}
	out := make([]audit.Alert, len(rows))
	for i, r := range rows {
		out[i] = audit.Alert{
			Policy:     r.Policy,
			SubjectKey: r.SubjectKey,
			Count:      r.Count,
			AlertAfter: r.AlertAfter,
			FirstAt:    r.FirstAt.Time.UTC(),
			LastAt:     r.LastAt.Time.UTC(),
			Shadow:     r.Shadow,
		}
	}
	return out, nil
}

// PruneAlerts implements audit.Store, a batch of rows per statement so that
// no statement holds many locks.
func (s *Audit) PruneAlerts(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.q.PruneAlerts(ctx, sqlcgen.PruneAlertsParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneBatch,
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("alerts: %w", auditErr(err))
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}
