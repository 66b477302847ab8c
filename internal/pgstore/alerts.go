package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// CountRefusals implements audit.Store in one transaction, applying
// audit.PlanCounts: claim the flush id (a flush applied before does
// nothing), lock the (tenant, day) rows that hold the watch budgets, then
// count in one statement (see sql/alerts.sql).
func (s *Audit) CountRefusals(ctx context.Context, flushID string, budget int, cs []audit.RefusalCount) ([]audit.Watch, error) {
	id, ok := uuidOf(flushID)
	if !ok {
		return nil, fmt.Errorf("count refusals: flush id %q is not a UUID", flushID)
	}
	plan := audit.PlanCounts(budget, ofTenants(cs, func(c *audit.RefusalCount) *string { return &c.TenantID }))
	p := sqlcgen.CountRefusalsParams{}
	for _, c := range plan.Counts {
		p.TenantIds = append(p.TenantIds, uuidOrNull(c.TenantID))
		p.Policies = append(p.Policies, c.Policy)
		p.SubjectKeys = append(p.SubjectKeys, c.Key)
		p.Hours = append(p.Hours, ts(c.Hour))
		p.Days = append(p.Days, ts(audit.DayOf(c.Hour)))
		p.Refusals = append(p.Refusals, c.Count)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, dbErr(err, auditErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if n, err := q.ClaimBatch(ctx, id); err != nil {
		return nil, dbErr(err, auditErrors)
	} else if n == 0 || len(p.TenantIds) == 0 {
		// Applied before, or nothing to count: the claim commits alone.
		if err := tx.Commit(ctx); err != nil {
			return nil, dbErr(err, auditErrors)
		}
		return nil, nil
	}
	locked, err := q.LockAlertDays(ctx, lockDays(plan.Days))
	if err != nil {
		return nil, dbErr(err, auditErrors)
	}
	for _, l := range locked {
		p.RoomTenantIds = append(p.RoomTenantIds, l.TenantID)
		p.RoomDays = append(p.RoomDays, ts(l.Day.Time))
		p.Rooms = append(p.Rooms, plan.Room(lockedDayOf(l)))
	}
	rows, err := q.CountRefusals(ctx, p)
	if err != nil {
		return nil, dbErr(err, auditErrors)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, dbErr(err, auditErrors)
	}
	ws := make([]audit.Watch, len(rows))
	for i, r := range rows {
		ws[i] = audit.Watch{TenantID: r.TenantID.String(), Policy: r.Policy, Key: r.SubjectKey, Day: timeOf(r.Day).UTC(), Watched: r.Watched}
	}
	return ws, nil
}

// lockDays lists days, which the plan gives in lock order, for LockAlertDays.
func lockDays(days []audit.Day) sqlcgen.LockAlertDaysParams {
	lock := sqlcgen.LockAlertDaysParams{TenantIds: make([]pgtype.UUID, len(days)), Days: make([]pgtype.Date, len(days))}
	for i, d := range days {
		lock.TenantIds[i], lock.Days[i] = uuidOrNull(d.TenantID), pgtype.Date{Time: d.Start, Valid: true}
	}
	return lock
}

// lockedDayOf turns a locked alert_days row into an audit.LockedDay.
func lockedDayOf(r sqlcgen.AlertDay) audit.LockedDay {
	return audit.LockedDay{
		Day:    audit.Day{TenantID: r.TenantID.String(), Start: r.Day.Time},
		Raised: int64(r.Raised), Watched: int64(r.Watched),
	}
}

// RaiseAlerts implements audit.Store in one transaction, applying
// audit.PlanAlerts, which must start after the CountRefusals it depends on
// has committed (the pool runs each in a transaction of its own): lock the
// (tenant, day) rows that hold the budgets, then raise, update and
// aggregate in one statement (see sql/alerts.sql), whose snapshot, taken
// once the locks are held, sees the alerts of every flush that spent the
// budget before.
func (s *Audit) RaiseAlerts(ctx context.Context, budget int, cs []audit.AlertCheck) (int64, error) {
	plan := audit.PlanAlerts(budget, ofTenants(cs, func(c *audit.AlertCheck) *string { return &c.TenantID }))
	if len(plan.Days) == 0 {
		return 0, nil
	}
	p := sqlcgen.RaiseAlertsParams{}
	for _, c := range plan.Checks {
		p.TenantIds = append(p.TenantIds, uuidOrNull(c.TenantID))
		p.Policies = append(p.Policies, c.Policy)
		p.SubjectKeys = append(p.SubjectKeys, c.Key)
		p.AlertAfter = append(p.AlertAfter, c.AlertAfter)
		p.Ats = append(p.Ats, ts(c.At))
		p.Days = append(p.Days, pgtype.Date{Time: audit.DayOf(c.At), Valid: true})
		p.Shadow = append(p.Shadow, c.Shadow)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	locked, err := q.LockAlertDays(ctx, lockDays(plan.Days))
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	for _, l := range locked {
		p.RoomTenantIds = append(p.RoomTenantIds, l.TenantID)
		p.RoomDays = append(p.RoomDays, l.Day)
		p.Rooms = append(p.Rooms, plan.Room(lockedDayOf(l)))
	}
	var n int64
	if len(p.TenantIds) > 0 {
		if n, err = q.RaiseAlerts(ctx, p); err != nil {
			return 0, dbErr(err, auditErrors)
		}
	}
	// After the aggregates RaiseAlerts made, so that one statement does
	// not both make and update a row.
	if _, err := q.SetUnwatchedAlerts(ctx, unwatchedParams(plan.Unwatched)); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	return n, nil
}

// unwatchedParams lists the policies' days of a plan for SetUnwatchedAlerts.
func unwatchedParams(us []audit.Unwatched) sqlcgen.SetUnwatchedAlertsParams {
	set := sqlcgen.SetUnwatchedAlertsParams{}
	for _, u := range us {
		set.TenantIds = append(set.TenantIds, uuidOrNull(u.TenantID))
		set.Policies = append(set.Policies, u.Policy)
		set.Days = append(set.Days, ts(u.Start))
		set.FirstAts = append(set.FirstAts, ts(u.FirstAt))
		set.LastAts = append(set.LastAts, ts(u.LastAt))
		set.AlertAfter = append(set.AlertAfter, u.AlertAfter)
		set.Shadow = append(set.Shadow, u.Shadow)
	}
	return set
}

// ListAlerts implements audit.Store. A tenant id that is not a UUID has no
// alerts.
func (s *Audit) ListAlerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]alert.Alert, error) {
	id, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.ListAlerts(ctx, sqlcgen.ListAlertsParams{
		TenantID: id,
		Since:    pgtype.Timestamptz{Time: since, Valid: true},
		MaxRows:  int32(min(limit, 1<<30)),
	})
	if err != nil {
		return nil, dbErr(err, auditErrors)
	}
	out := make([]alert.Alert, len(rows))
	for i, r := range rows {
		out[i] = alert.Alert{
			Policy:     r.Policy,
			SubjectKey: r.SubjectKey,
			Count:      r.Count,
			AlertAfter: r.AlertAfter,
			FirstAt:    timeOf(r.FirstAt),
			LastAt:     timeOf(r.LastAt),
			Shadow:     r.Shadow,
			Subjects:   r.Subjects,
			Unwatched:  r.Unwatched,
		}
	}
	return out, nil
}

// PruneAlerts implements audit.Store, at most pruneRows rows a statement so
// that no statement holds many locks.
func (s *Audit) PruneAlerts(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.q.PruneAlerts(ctx, sqlcgen.PruneAlertsParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneRows,
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("alerts: %w", dbErr(err, auditErrors))
		}
		if n < pruneRows {
			return total, nil
		}
	}
}
