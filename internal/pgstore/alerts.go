package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// CountRefusals implements audit.Store in one transaction: claim the batch
// id (a batch applied before does nothing), lock the (tenant, day) rows that
// hold the watch budgets, then count in one statement (see sql/alerts.sql).
func (s *Audit) CountRefusals(ctx context.Context, batchID string, budget int, cs []audit.RefusalCount) ([]audit.Watch, error) {
	id, ok := uuidOf(batchID)
	if !ok {
		return nil, fmt.Errorf("count refusals: batch id %q is not a UUID", batchID)
	}
	p := sqlcgen.CountRefusalsParams{
		TenantIds:   make([]pgtype.UUID, 0, len(cs)),
		Policies:    make([]string, 0, len(cs)),
		SubjectKeys: make([]string, 0, len(cs)),
		Hours:       make([]pgtype.Timestamptz, 0, len(cs)),
		Days:        make([]pgtype.Timestamptz, 0, len(cs)),
		Refusals:    make([]int64, 0, len(cs)),
	}
	days := map[dayKey]time.Time{}
	for _, c := range cs {
		id, ok := uuidOf(c.TenantID)
		if !ok || c.Count <= 0 {
			continue
		}
		day := utcDay(c.Hour)
		days[dayKey{id, day.Unix()}] = day
		p.TenantIds = append(p.TenantIds, id)
		p.Policies = append(p.Policies, c.Policy)
		p.SubjectKeys = append(p.SubjectKeys, c.Key)
		p.Hours = append(p.Hours, pgtype.Timestamptz{Time: c.Hour, Valid: true})
		p.Days = append(p.Days, pgtype.Timestamptz{Time: day, Valid: true})
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
	locked, err := q.LockAlertDays(ctx, lockDays(days))
	if err != nil {
		return nil, dbErr(err, auditErrors)
	}
	for _, l := range locked {
		p.RoomTenantIds = append(p.RoomTenantIds, l.TenantID)
		p.RoomDays = append(p.RoomDays, pgtype.Timestamptz{Time: l.Day.Time, Valid: true})
		p.Rooms = append(p.Rooms, max(int64(budget)-int64(l.Watched), 0))
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

// dayKey names a tenant's UTC day.
type dayKey struct {
	tenant pgtype.UUID
	day    int64 // Unix seconds of its midnight
}

// utcDay is the UTC midnight of t's day.
func utcDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// lockDays lists days in key order, the order in which LockAlertDays locks
// them, so that concurrent transactions cannot deadlock.
func lockDays(days map[dayKey]time.Time) sqlcgen.LockAlertDaysParams {
	keys := slices.SortedFunc(maps.Keys(days), func(a, b dayKey) int {
		return cmp.Or(bytes.Compare(a.tenant.Bytes[:], b.tenant.Bytes[:]), cmp.Compare(a.day, b.day))
	})
	lock := sqlcgen.LockAlertDaysParams{TenantIds: make([]pgtype.UUID, len(keys)), Days: make([]pgtype.Date, len(keys))}
	for i, k := range keys {
		lock.TenantIds[i], lock.Days[i] = k.tenant, pgtype.Date{Time: days[k], Valid: true}
	}
	return lock
}

// RaiseAlerts implements audit.Store in one transaction, which must start
// after the CountRefusals it depends on has committed (the pool runs each in
// a transaction of its own): lock the (tenant, day) rows that hold the
// budgets, then raise, update and aggregate in one statement (see
// sql/alerts.sql), whose snapshot, taken once the locks are held, sees the
// alerts of every flush that spent the budget before.
func (s *Audit) RaiseAlerts(ctx context.Context, budget int, cs []audit.AlertCheck) (int64, error) {
	p := sqlcgen.RaiseAlertsParams{
		TenantIds:   make([]pgtype.UUID, 0, len(cs)),
		Policies:    make([]string, 0, len(cs)),
		SubjectKeys: make([]string, 0, len(cs)),
		AlertAfter:  make([]int64, 0, len(cs)),
		Ats:         make([]pgtype.Timestamptz, 0, len(cs)),
		Days:        make([]pgtype.Date, 0, len(cs)),
		Shadow:      make([]bool, 0, len(cs)),
	}
	days := map[dayKey]time.Time{}
	// Each policy's day checked, for the unwatched refusals of its
	// aggregate alert.
	type policyDay struct {
		dayKey
		policy string
	}
	type span struct {
		first, last time.Time
		alertAfter  int64
		shadow      bool
	}
	unwatched := map[policyDay]span{}
	for _, c := range cs {
		id, ok := uuidOf(c.TenantID)
		if !ok || c.AlertAfter <= 0 {
			continue
		}
		at := c.At.UTC()
		day := utcDay(at)
		days[dayKey{id, day.Unix()}] = day
		pd := policyDay{dayKey{id, day.Unix()}, c.Policy}
		if sp, seen := unwatched[pd]; !seen {
			unwatched[pd] = span{first: at, last: at, alertAfter: c.AlertAfter, shadow: c.Shadow}
		} else {
			sp.first, sp.last = minTime(sp.first, at), maxTime(sp.last, at)
			unwatched[pd] = sp
		}
		if c.Key == audit.AggregateSubject {
			continue
		}
		p.TenantIds = append(p.TenantIds, id)
		p.Policies = append(p.Policies, c.Policy)
		p.SubjectKeys = append(p.SubjectKeys, c.Key)
		p.AlertAfter = append(p.AlertAfter, c.AlertAfter)
		p.Ats = append(p.Ats, pgtype.Timestamptz{Time: at, Valid: true})
		p.Days = append(p.Days, pgtype.Date{Time: day, Valid: true})
		p.Shadow = append(p.Shadow, c.Shadow)
	}
	if len(days) == 0 {
		return 0, nil
	}
	lock := lockDays(days)
	set := sqlcgen.SetUnwatchedAlertsParams{}
	for pd, sp := range unwatched {
		set.TenantIds = append(set.TenantIds, pd.tenant)
		set.Policies = append(set.Policies, pd.policy)
		set.Days = append(set.Days, pgtype.Timestamptz{Time: time.Unix(pd.day, 0).UTC(), Valid: true})
		set.FirstAts = append(set.FirstAts, pgtype.Timestamptz{Time: sp.first, Valid: true})
		set.LastAts = append(set.LastAts, pgtype.Timestamptz{Time: sp.last, Valid: true})
		set.AlertAfter = append(set.AlertAfter, sp.alertAfter)
		set.Shadow = append(set.Shadow, sp.shadow)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	locked, err := q.LockAlertDays(ctx, lock)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	for _, l := range locked {
		p.RoomTenantIds = append(p.RoomTenantIds, l.TenantID)
		p.RoomDays = append(p.RoomDays, l.Day)
		p.Rooms = append(p.Rooms, max(int64(budget)-int64(l.Raised), 0))
	}
	var n int64
	if len(p.TenantIds) > 0 {
		if n, err = q.RaiseAlerts(ctx, p); err != nil {
			return 0, dbErr(err, auditErrors)
		}
	}
	// After the aggregates RaiseAlerts made, so that one statement does
	// not both make and update a row.
	if _, err := q.SetUnwatchedAlerts(ctx, set); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	return n, nil
}

// ListAlerts implements audit.Store. A tenant id that is not a UUID has no
// alerts.
func (s *Audit) ListAlerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]audit.Alert, error) {
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
	out := make([]audit.Alert, len(rows))
	for i, r := range rows {
		out[i] = audit.Alert{
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
			return total, fmt.Errorf("alerts: %w", dbErr(err, auditErrors))
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
