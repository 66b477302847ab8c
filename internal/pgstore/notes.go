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

// scopeMinute names a tenant's budget scope and UTC minute.
type scopeMinute struct {
	tenant pgtype.UUID
	scope  string
	minute int64 // Unix seconds
}

// RecordNotes implements audit.Store in one transaction: claim the batch id
// (a batch applied before does nothing), lock the (tenant, scope, minute)
// rows that hold the budgets, write the notes that fit, at most the budget
// per minute, and add the rest and b.Overflow to each minute's flood entry,
// making it when the minute has none.
func (s *Audit) RecordNotes(ctx context.Context, b audit.NoteBatch) (int64, error) {
	batchID, ok := uuidOf(b.ID)
	if !ok {
		return 0, fmt.Errorf("record noted entries: batch id %q is not a UUID", b.ID)
	}
	type group struct {
		kind    string
		sandbox bool
		minute  time.Time
		notes   []audit.Entry
		past    int64
		firstAt time.Time // of the past ones
	}
	groups := map[scopeMinute]*group{}
	groupOf := func(tenantID, scope, kind string, sandbox bool, at time.Time) *group {
		id, ok := uuidOf(tenantID)
		if !ok {
			return nil
		}
		m := minuteOf(at)
		k := scopeMinute{id, scope, m.Unix()}
		g := groups[k]
		if g == nil {
			g = &group{kind: kind, sandbox: sandbox, minute: m}
			groups[k] = g
		}
		return g
	}
	for _, n := range b.Notes {
		if g := groupOf(n.Entry.TenantID, n.Scope, n.Entry.Kind, n.Sandbox, n.Entry.At); g != nil {
			g.notes = append(g.notes, n.Entry)
		}
	}
	for _, o := range b.Overflow {
		if g := groupOf(o.TenantID, o.Scope, o.Kind, o.Sandbox, o.Minute); g != nil && o.Count > 0 {
			if g.past == 0 || o.At.Before(g.firstAt) {
				g.firstAt = o.At
			}
			g.past += o.Count
		}
	}
	if len(groups) == 0 {
		return 0, nil
	}
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b scopeMinute) int {
		return cmp.Or(bytes.Compare(a.tenant.Bytes[:], b.tenant.Bytes[:]), cmp.Compare(a.scope, b.scope), cmp.Compare(a.minute, b.minute))
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
	lock := sqlcgen.LockAuditMinutesParams{}
	for _, k := range keys {
		lock.TenantIds = append(lock.TenantIds, k.tenant)
		lock.Scopes = append(lock.Scopes, k.scope)
		lock.Minutes = append(lock.Minutes, pgtype.Timestamptz{Time: groups[k].minute, Valid: true})
	}
	locked, err := q.LockAuditMinutes(ctx, lock)
	if err != nil {
		return 0, dbErr(err, auditErrors)
	}
	var written int64
	for _, l := range locked {
		k := scopeMinute{l.TenantID, l.Scope, l.Minute.Time.Unix()}
		g := groups[k]
		if g == nil {
			continue
		}
		slices.SortStableFunc(g.notes, func(a, b audit.Entry) int { return a.At.Compare(b.At) })
		room := max(b.Budget-int(l.Entries), 0)
		n := min(room, len(g.notes))
		for _, e := range g.notes[:n] {
			if _, err := insertAudit(ctx, q, e); err != nil {
				return 0, err
			}
		}
		if rest := g.notes[n:]; len(rest) > 0 {
			if g.past == 0 || rest[0].At.Before(g.firstAt) {
				g.firstAt = rest[0].At
			}
			g.past += int64(len(rest))
		}
		floodID := int64(0)
		if g.past > 0 {
			if l.FloodID != 0 {
				if err := q.AddToAuditFlood(ctx, sqlcgen.AddToAuditFloodParams{ID: l.FloodID, Entries: g.past}); err != nil {
					return 0, dbErr(err, auditErrors)
				}
			} else {
				e, err := insertAudit(ctx, q, audit.Entry{
					At: g.firstAt, TenantID: l.TenantID.String(), Actor: audit.ActorTollgate, Kind: g.kind + audit.FloodSuffix,
					Detail: map[string]any{
						"window_start": g.minute.Format(time.RFC3339),
						"window_end":   g.minute.Add(time.Minute).Format(time.RFC3339),
						"entries":      g.past,
						"budget":       b.Budget,
						"scope":        l.Scope,
						"sandbox":      g.sandbox,
					},
				})
				if err != nil {
					return 0, err
				}
				floodID = e.ID
			}
		}
		if n == 0 && floodID == 0 {
			continue
		}
		if err := q.SettleAuditMinute(ctx, sqlcgen.SettleAuditMinuteParams{
			TenantID: l.TenantID, Scope: l.Scope, Minute: l.Minute, Entries: int32(n), FloodID: floodID,
		}); err != nil {
			return 0, dbErr(err, auditErrors)
		}
		written += int64(n)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, dbErr(err, auditErrors)
	}
	return written, nil
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
