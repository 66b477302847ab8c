package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// Audit keeps the audit log (table audit), the first refusal of each window
// (refusal_windows), hourly refusal counts (refusal_hours) and alerts: the
// audit.LogStore of audit.Log and the audit.Store of audit.Recorder. It is
// safe for concurrent use.
type Audit struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var (
	_ audit.LogStore = (*Audit)(nil)
	_ audit.Store    = (*Audit)(nil)
)

// NewAudit returns the audit store on pool, a database migrated to at least
// 000010.
func NewAudit(pool *pgxpool.Pool) *Audit {
	return &Audit{pool: pool, q: sqlcgen.New(pool)}
}

// pruneRows bounds the rows one prune statement deletes.
const pruneRows = 5000

// InsertAudit implements audit.LogStore.
func (s *Audit) InsertAudit(ctx context.Context, e audit.Entry) (audit.Entry, error) {
	return insertAudit(ctx, s.q, e)
}

// ListAudit implements audit.LogStore. A tenant id that is not a UUID has
// no entries.
func (s *Audit) ListAudit(ctx context.Context, f audit.Filter) ([]audit.Entry, error) {
	kinds := slices.Clone(f.Kinds)
	if f.Kind != "" {
		kinds = append(kinds, f.Kind)
	}
	p := sqlcgen.ListAuditParams{Kinds: kinds, NotKinds: f.NotKinds, BeforeID: f.Before, MaxRows: int32(f.Limit)}
	if p.Kinds == nil {
		p.Kinds = []string{}
	}
	if p.NotKinds == nil {
		p.NotKinds = []string{}
	}
	if f.TenantID != "" {
		id, ok := uuidOf(f.TenantID)
		if !ok {
			return nil, nil
		}
		p.TenantID = id
	}
	rows, err := s.q.ListAudit(ctx, p)
	if err != nil {
		return nil, dbErr(err, auditErrors)
	}
	out := make([]audit.Entry, 0, len(rows))
	for _, r := range rows {
		e, err := auditEntryOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// RecordFirstRefusals implements audit.Store in one transaction, applying
// audit.PlanFirstRefusals: claim the flush id (a flush applied before does
// nothing), lock the (tenant, minute) rows that hold the budgets, write the
// first refusals that fit (see sql/audit.sql), then write the flood entries
// and budgets the plan settles.
func (s *Audit) RecordFirstRefusals(ctx context.Context, b audit.FirstRefusalFlush) (int64, error) {
	flushID, ok := uuidOf(b.ID)
	if !ok {
		return 0, fmt.Errorf("record first refusals: flush id %q is not a UUID", b.ID)
	}
	b.Refusals = ofTenants(b.Refusals, func(r *audit.FirstRefusal) *string { return &r.TenantID })
	b.Overflow = ofTenants(b.Overflow, func(o *audit.RefusalOverflow) *string { return &o.TenantID })
	plan := audit.PlanFirstRefusals(b)
	if len(plan.Minutes) == 0 {
		return 0, nil
	}
	p, err := firstRefusalsParams(b.Refusals)
	if err != nil {
		return 0, err
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
	lock := sqlcgen.LockRefusalMinutesParams{}
	for _, m := range plan.Minutes {
		lock.TenantIds = append(lock.TenantIds, uuidOrNull(m.TenantID))
		lock.Minutes = append(lock.Minutes, ts(m.Start))
	}
	rows, err := q.LockRefusalMinutes(ctx, lock)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	locked := make([]audit.LockedMinute, len(rows))
	for i, r := range rows {
		locked[i] = refusalMinuteOf(r)
		p.RoomTenantIds = append(p.RoomTenantIds, r.TenantID)
		p.RoomMinutes = append(p.RoomMinutes, r.Minute)
		p.Rooms = append(p.Rooms, plan.Room(locked[i]))
	}
	var done []audit.RefusalsWritten
	if len(p.TenantIds) > 0 {
		rows, err := q.RecordFirstRefusals(ctx, p)
		if err != nil {
			return 0, dbErr(err, auditErrors)
		}
		for _, r := range rows {
			done = append(done, audit.RefusalsWritten{
				Minute:  audit.Minute{TenantID: r.TenantID.String(), Start: r.Minute.Time},
				Written: r.Written, Past: r.PastBudget, FirstPastAt: timeOf(r.FirstPastAt),
			})
		}
	}
	written, err := settleRefusalMinutes(ctx, q, plan.Settle(locked, done))
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	return written, nil
}

// refusalMinuteOf turns a locked refusal_minutes row into an
// audit.LockedMinute.
func refusalMinuteOf(r sqlcgen.LockRefusalMinutesRow) audit.LockedMinute {
	return audit.LockedMinute{
		Minute:  audit.Minute{TenantID: r.TenantID.String(), Start: r.Minute.Time},
		Entries: int64(r.Entries), FloodID: r.FloodID,
	}
}

// firstRefusalsParams lists refusals for the RecordFirstRefusals statement,
// without their rooms.
func firstRefusalsParams(refusals []audit.FirstRefusal) (sqlcgen.RecordFirstRefusalsParams, error) {
	p := sqlcgen.RecordFirstRefusalsParams{
		TenantIds:   make([]pgtype.UUID, 0, len(refusals)),
		CounterKeys: make([]string, 0, len(refusals)),
		WindowEnds:  make([]pgtype.Timestamptz, 0, len(refusals)),
		Ats:         make([]pgtype.Timestamptz, 0, len(refusals)),
		Minutes:     make([]pgtype.Timestamptz, 0, len(refusals)),
		Details:     make([]string, 0, len(refusals)),
	}
	for _, r := range refusals {
		detail, err := auditDetail(r.Detail)
		if err != nil {
			return p, err
		}
		p.TenantIds = append(p.TenantIds, uuidOrNull(r.TenantID))
		p.CounterKeys = append(p.CounterKeys, r.Key)
		p.WindowEnds = append(p.WindowEnds, ts(r.WindowEnd))
		p.Ats = append(p.Ats, ts(r.At))
		p.Minutes = append(p.Minutes, ts(audit.MinuteOf(r.At)))
		p.Details = append(p.Details, detail)
	}
	return p, nil
}

// settleRefusalMinutes writes what audit.RefusalPlan.Settle returned: each
// minute's flood entry, grown or made, then the budgets in one statement.
// It returns the entries written one by one.
func settleRefusalMinutes(ctx context.Context, q *sqlcgen.Queries, ws []audit.MinuteWrite) (int64, error) {
	var written int64
	settle := sqlcgen.SettleRefusalMinutesParams{}
	for _, w := range ws {
		written += w.Written
		floodID := int64(0)
		switch {
		case w.NewFlood != nil:
			detail, err := auditDetail(w.NewFlood.Detail)
			if err != nil {
				return 0, err
			}
			row, err := q.InsertAudit(ctx, sqlcgen.InsertAuditParams{
				At: ts(w.NewFlood.At), TenantID: uuidOrNull(w.TenantID),
				Actor: w.NewFlood.Actor, Kind: w.NewFlood.Kind, Detail: []byte(detail),
			})
			if err != nil {
				return 0, dbErr(err, auditErrors)
			}
			floodID = row.ID
		case w.Past > 0:
			if err := q.AddToRefusalFlood(ctx, sqlcgen.AddToRefusalFloodParams{ID: w.FloodID, Refusals: w.Past}); err != nil {
				return 0, dbErr(err, auditErrors)
			}
		}
		if w.Written == 0 && floodID == 0 {
			continue
		}
		settle.TenantIds = append(settle.TenantIds, uuidOrNull(w.TenantID))
		settle.Minutes = append(settle.Minutes, ts(w.Start))
		settle.Entries = append(settle.Entries, int32(w.Written))
		settle.FloodIds = append(settle.FloodIds, floodID)
	}
	if len(settle.TenantIds) > 0 {
		if err := q.SettleRefusalMinutes(ctx, settle); err != nil {
			return 0, dbErr(err, auditErrors)
		}
	}
	return written, nil
}

// PruneAudit implements audit.Store, at most pruneRows rows a statement, oldest
// first, so that no statement holds many locks.
func (s *Audit) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.q.PruneAudit(ctx, sqlcgen.PruneAuditParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneRows,
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("audit entries: %w", dbErr(err, auditErrors))
		}
		if n < pruneRows {
			return total, nil
		}
	}
}

// PruneRefusals implements audit.Store, at most pruneRows rows a statement so
// that no statement holds many locks.
func (s *Audit) PruneRefusals(ctx context.Context, windowsBefore, hoursBefore, flushesBefore time.Time) error {
	for {
		n, err := s.q.PruneRefusalWindows(ctx, sqlcgen.PruneRefusalWindowsParams{
			Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneRows,
		})
		if err != nil {
			return fmt.Errorf("refusal windows: %w", dbErr(err, auditErrors))
		}
		if n < pruneRows {
			break
		}
	}
	for {
		n, err := s.q.PruneRefusalHours(ctx, sqlcgen.PruneRefusalHoursParams{
			Before: pgtype.Timestamptz{Time: hoursBefore, Valid: true}, MaxRows: pruneRows,
		})
		if err != nil {
			return fmt.Errorf("refusal hours: %w", dbErr(err, auditErrors))
		}
		if n < pruneRows {
			break
		}
	}
	// The budgets: a minute's once its windows are gone, a day's once its
	// hourly counts are.
	day := pgtype.Date{Time: hoursBefore.UTC().Truncate(24 * time.Hour), Valid: true}
	for _, prune := range []struct {
		what string
		run  func() (int64, error)
	}{
		{"refusal minutes", func() (int64, error) {
			return s.q.PruneRefusalMinutes(ctx, sqlcgen.PruneRefusalMinutesParams{
				Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneRows,
			})
		}},
		{"audit minutes", func() (int64, error) {
			return s.q.PruneAuditMinutes(ctx, sqlcgen.PruneAuditMinutesParams{
				Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneRows,
			})
		}},
		{"alert days", func() (int64, error) {
			return s.q.PruneAlertDays(ctx, sqlcgen.PruneAlertDaysParams{Before: day, MaxRows: pruneRows})
		}},
		{"alert overflow", func() (int64, error) {
			return s.q.PruneAlertOverflow(ctx, sqlcgen.PruneAlertOverflowParams{Before: day, MaxRows: pruneRows})
		}},
	} {
		for {
			n, err := prune.run()
			if err != nil {
				return fmt.Errorf("%s: %w", prune.what, dbErr(err, auditErrors))
			}
			if n < pruneRows {
				break
			}
		}
	}
	return pruneFlushes(ctx, s.q, flushesBefore)
}

// auditEntryOf turns an audit row into an audit.Entry.
func auditEntryOf(r sqlcgen.Audit) (audit.Entry, error) {
	e := audit.Entry{ID: r.ID, At: timeOf(r.At), Actor: r.Actor, Kind: r.Kind}
	if r.TenantID.Valid {
		e.TenantID = r.TenantID.String()
	}
	dec := json.NewDecoder(bytes.NewReader(r.Detail))
	dec.UseNumber()
	if err := dec.Decode(&e.Detail); err != nil {
		return audit.Entry{}, fmt.Errorf("audit entry %d: detail: %v", r.ID, err)
	}
	return e, nil
}

// auditDetail encodes a detail as a JSON object; nil is {}.
func auditDetail(d map[string]any) (string, error) {
	if d == nil {
		return "{}", nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("detail: %v: %w", err, audit.ErrInvalid)
	}
	return string(b), nil
}
