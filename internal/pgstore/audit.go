package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

// pruneBatch bounds the rows one prune statement deletes.
const pruneBatch = 5000

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

// minuteKey names a tenant's UTC minute.
type minuteKey struct {
	tenant pgtype.UUID
	minute int64 // Unix seconds
}

// minuteOf is the UTC minute of a refusal, which its budget counts in.
func minuteOf(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// RecordFirstRefusals implements audit.Store in one transaction: claim the
// batch id (a batch applied before does nothing), lock the (tenant, minute)
// rows that hold the budgets, write the first refusals that fit (see
// sql/audit.sql), then add the rest and b.Overflow to each minute's flood
// entry, making it when the minute has none.
func (s *Audit) RecordFirstRefusals(ctx context.Context, b audit.FirstRefusalBatch) (int64, error) {
	batchID, ok := uuidOf(b.ID)
	if !ok {
		return 0, fmt.Errorf("record first refusals: batch id %q is not a UUID", b.ID)
	}
	p := sqlcgen.RecordFirstRefusalsParams{
		TenantIds:   make([]pgtype.UUID, 0, len(b.Refusals)),
		CounterKeys: make([]string, 0, len(b.Refusals)),
		WindowEnds:  make([]pgtype.Timestamptz, 0, len(b.Refusals)),
		Ats:         make([]pgtype.Timestamptz, 0, len(b.Refusals)),
		Minutes:     make([]pgtype.Timestamptz, 0, len(b.Refusals)),
		Details:     make([]string, 0, len(b.Refusals)),
	}
	// What each minute gets beyond its budget: the overflow counted by the
	// Recorder, then the first refusals the budget left out.
	type past struct {
		at    time.Time
		count int64
	}
	pasts := map[minuteKey]past{}
	minutes := map[minuteKey]time.Time{}
	for _, r := range b.Refusals {
		id, ok := uuidOf(r.TenantID)
		if !ok {
			continue
		}
		detail, err := auditDetail(r.Detail)
		if err != nil {
			return 0, err
		}
		m := minuteOf(r.At)
		minutes[minuteKey{id, m.Unix()}] = m
		p.TenantIds = append(p.TenantIds, id)
		p.CounterKeys = append(p.CounterKeys, r.Key)
		p.WindowEnds = append(p.WindowEnds, pgtype.Timestamptz{Time: r.WindowEnd, Valid: true})
		p.Ats = append(p.Ats, pgtype.Timestamptz{Time: r.At, Valid: true})
		p.Minutes = append(p.Minutes, pgtype.Timestamptz{Time: m, Valid: true})
		p.Details = append(p.Details, detail)
	}
	for _, o := range b.Overflow {
		id, ok := uuidOf(o.TenantID)
		if !ok || o.Count <= 0 {
			continue
		}
		m := minuteOf(o.Minute)
		k := minuteKey{id, m.Unix()}
		minutes[k] = m
		old, seen := pasts[k]
		if !seen || o.At.Before(old.at) {
			old.at = o.At
		}
		old.count += o.Count
		pasts[k] = old
	}
	if len(minutes) == 0 {
		return 0, nil
	}
	keys := slices.SortedFunc(maps.Keys(minutes), func(a, b minuteKey) int {
		return cmp.Or(bytes.Compare(a.tenant.Bytes[:], b.tenant.Bytes[:]), cmp.Compare(a.minute, b.minute))
	})

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if n, err := q.ClaimBatch(ctx, batchID); err != nil {
		return 0, dbErr(err, auditErrors)
	} else if n == 0 {
		return 0, nil // applied before
	}
	lock := sqlcgen.LockRefusalMinutesParams{TenantIds: make([]pgtype.UUID, len(keys)), Minutes: make([]pgtype.Timestamptz, len(keys))}
	for i, k := range keys {
		lock.TenantIds[i], lock.Minutes[i] = k.tenant, pgtype.Timestamptz{Time: minutes[k], Valid: true}
	}
	locked, err := q.LockRefusalMinutes(ctx, lock)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	type budget struct {
		entries int32
		floodID int64
		written int64
	}
	budgets := make(map[minuteKey]*budget, len(locked))
	for _, l := range locked {
		k := minuteKey{l.TenantID, l.Minute.Time.Unix()}
		budgets[k] = &budget{entries: l.Entries, floodID: l.FloodID}
		p.RoomTenantIds = append(p.RoomTenantIds, l.TenantID)
		p.RoomMinutes = append(p.RoomMinutes, l.Minute)
		p.Rooms = append(p.Rooms, max(int64(b.Budget)-int64(l.Entries), 0))
	}
	var written int64
	if len(p.TenantIds) > 0 {
		rows, err := q.RecordFirstRefusals(ctx, p)
		if err != nil {
			return 0, dbErr(err, auditErrors)
		}
		for _, r := range rows {
			k := minuteKey{r.TenantID, r.Minute.Time.Unix()}
			if bu := budgets[k]; bu != nil {
				bu.written = r.Written
			}
			written += r.Written
			if r.PastBudget > 0 {
				old, seen := pasts[k]
				if at := timeOf(r.FirstPastAt); !seen || at.Before(old.at) {
					old.at = at
				}
				old.count += r.PastBudget
				pasts[k] = old
			}
		}
	}
	settle := sqlcgen.SettleRefusalMinutesParams{}
	for _, k := range keys {
		bu := budgets[k]
		if bu == nil {
			continue // a tenant that no longer exists
		}
		floodID := int64(0)
		if ps := pasts[k]; ps.count > 0 {
			if bu.floodID != 0 {
				if err := q.AddToRefusalFlood(ctx, sqlcgen.AddToRefusalFloodParams{ID: bu.floodID, Refusals: ps.count}); err != nil {
					return 0, dbErr(err, auditErrors)
				}
			} else {
				m := minutes[k]
				detail, err := auditDetail(map[string]any{
					"window_start": m.Format(time.RFC3339),
					"window_end":   m.Add(time.Minute).Format(time.RFC3339),
					"refusals":     ps.count,
					"budget":       b.Budget,
				})
				if err != nil {
					return 0, err
				}
				row, err := q.InsertAudit(ctx, sqlcgen.InsertAuditParams{
					At: pgtype.Timestamptz{Time: ps.at, Valid: true}, TenantID: k.tenant,
					Actor: audit.ActorTollgate, Kind: audit.KindRefusalFlood, Detail: []byte(detail),
				})
				if err != nil {
					return 0, dbErr(err, auditErrors)
				}
				floodID = row.ID
			}
		}
		if bu.written == 0 && floodID == 0 {
			continue
		}
		settle.TenantIds = append(settle.TenantIds, k.tenant)
		settle.Minutes = append(settle.Minutes, pgtype.Timestamptz{Time: minutes[k], Valid: true})
		settle.Entries = append(settle.Entries, int32(bu.written))
		settle.FloodIds = append(settle.FloodIds, floodID)
	}
	if len(settle.TenantIds) > 0 {
		if err := q.SettleRefusalMinutes(ctx, settle); err != nil {
			return 0, dbErr(err, auditErrors)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	return written, nil
}

// PruneAudit implements audit.Store, a batch of rows per statement, oldest
// first, so that no statement holds many locks.
func (s *Audit) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.q.PruneAudit(ctx, sqlcgen.PruneAuditParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneBatch,
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("audit entries: %w", dbErr(err, auditErrors))
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

// PruneRefusals implements audit.Store, a batch of rows per statement so
// that no statement holds many locks.
func (s *Audit) PruneRefusals(ctx context.Context, windowsBefore, hoursBefore, batchesBefore time.Time) error {
	for {
		n, err := s.q.PruneRefusalWindows(ctx, sqlcgen.PruneRefusalWindowsParams{
			Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneBatch,
		})
		if err != nil {
			return fmt.Errorf("refusal windows: %w", dbErr(err, auditErrors))
		}
		if n < pruneBatch {
			break
		}
	}
	for {
		n, err := s.q.PruneRefusalHours(ctx, sqlcgen.PruneRefusalHoursParams{
			Before: pgtype.Timestamptz{Time: hoursBefore, Valid: true}, MaxRows: pruneBatch,
		})
		if err != nil {
			return fmt.Errorf("refusal hours: %w", dbErr(err, auditErrors))
		}
		if n < pruneBatch {
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
				Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneBatch,
			})
		}},
		{"audit minutes", func() (int64, error) {
			return s.q.PruneAuditMinutes(ctx, sqlcgen.PruneAuditMinutesParams{
				Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneBatch,
			})
		}},
		{"alert days", func() (int64, error) {
			return s.q.PruneAlertDays(ctx, sqlcgen.PruneAlertDaysParams{Before: day, MaxRows: pruneBatch})
		}},
		{"alert overflow", func() (int64, error) {
			return s.q.PruneAlertOverflow(ctx, sqlcgen.PruneAlertOverflowParams{Before: day, MaxRows: pruneBatch})
		}},
	} {
		for {
			n, err := prune.run()
			if err != nil {
				return fmt.Errorf("%s: %w", prune.what, dbErr(err, auditErrors))
			}
			if n < pruneBatch {
				break
			}
		}
	}
	return pruneBatches(ctx, s.q, batchesBefore)
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
