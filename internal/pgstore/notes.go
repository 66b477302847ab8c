package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// RecordNotes implements audit.Store in one transaction, applying
// audit.PlanNotes: claim the flush id (a flush applied before does
// nothing), lock the (tenant, scope, minute) rows that hold the budgets,
// then write each minute's notes that fit, its flood entry, grown or made,
// and its budget.
func (s *Audit) RecordNotes(ctx context.Context, b audit.NoteFlush) (int64, error) {
	flushID, ok := uuidOf(b.ID)
	if !ok {
		return 0, fmt.Errorf("record noted entries: flush id %q is not a UUID", b.ID)
	}
	b.Notes = ofTenants(b.Notes, func(n *audit.Note) *string { return &n.Entry.TenantID })
	b.Overflow = ofTenants(b.Overflow, func(o *audit.NoteOverflow) *string { return &o.TenantID })
	plan := audit.PlanNotes(b)
	if len(plan.Minutes) == 0 {
		return 0, nil
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if n, err := q.ClaimBatch(ctx, flushID); err != nil {
		return 0, dbErr(err, auditErrors)
	} else if n == 0 {
		return 0, nil // applied before
	}
	lock := sqlcgen.LockAuditMinutesParams{}
	for _, m := range plan.Minutes {
		lock.TenantIds = append(lock.TenantIds, uuidOrNull(m.TenantID))
		lock.Scopes = append(lock.Scopes, m.Scope)
		lock.Minutes = append(lock.Minutes, ts(m.Start))
	}
	rows, err := q.LockAuditMinutes(ctx, lock)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	locked := make([]audit.LockedMinute, len(rows))
	for i, r := range rows {
		locked[i] = auditMinuteOf(r)
	}
	var written int64
	for _, w := range plan.Write(locked) {
		if err := writeNoteMinute(ctx, q, w); err != nil {
			return 0, err
		}
		written += w.Written
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	return written, nil
}

// auditMinuteOf turns a locked audit_minutes row into an
// audit.LockedMinute.
func auditMinuteOf(r sqlcgen.LockAuditMinutesRow) audit.LockedMinute {
	return audit.LockedMinute{
		Minute:  audit.Minute{TenantID: r.TenantID.String(), Scope: r.Scope, Start: r.Minute.Time},
		Entries: int64(r.Entries), FloodID: r.FloodID,
	}
}

// writeNoteMinute writes what audit.NotePlan.Write planned for one minute:
// its notes, its flood entry, grown or made, and its budget.
func writeNoteMinute(ctx context.Context, q *sqlcgen.Queries, w audit.MinuteWrite) error {
	for _, e := range w.Notes {
		if _, err := insertAudit(ctx, q, e); err != nil {
			return err
		}
	}
	floodID := int64(0)
	switch {
	case w.NewFlood != nil:
		e, err := insertAudit(ctx, q, *w.NewFlood)
		if err != nil {
			return err
		}
		floodID = e.ID
	case w.Past > 0:
		if err := q.AddToAuditFlood(ctx, sqlcgen.AddToAuditFloodParams{ID: w.FloodID, Entries: w.Past}); err != nil {
			return dbErr(err, auditErrors)
		}
	}
	if w.Written == 0 && floodID == 0 {
		return nil
	}
	if err := q.SettleAuditMinute(ctx, sqlcgen.SettleAuditMinuteParams{
		TenantID: uuidOrNull(w.TenantID), Scope: w.Scope, Minute: ts(w.Start), Entries: int32(w.Written), FloodID: floodID,
	}); err != nil {
		return dbErr(err, auditErrors)
	}
	return nil
}

// insertAudit writes e with q and returns it with its ID and At.
func insertAudit(ctx context.Context, q *sqlcgen.Queries, e audit.Entry) (audit.Entry, error) {
	detail, err := auditDetail(e.Detail)
	if err != nil {
		return audit.Entry{}, err
	}
	p := sqlcgen.InsertAuditParams{Actor: e.Actor, Kind: e.Kind, Detail: []byte(detail)}
	if !e.At.IsZero() {
		p.At = pgtype.Timestamptz{Time: e.At, Valid: true}
	}
	if e.TenantID != "" {
		id, ok := uuidOf(e.TenantID)
		if !ok {
			return audit.Entry{}, fmt.Errorf("tenant %q: %w", e.TenantID, audit.ErrInvalid)
		}
		p.TenantID = id
	}
	row, err := q.InsertAudit(ctx, p)
	if err != nil {
		return audit.Entry{}, dbErr(err, auditErrors)
	}
	e.ID, e.At = row.ID, timeOf(row.At)
	return e, nil
}
