package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
	q *sqlcgen.Queries
}

var (
	_ audit.LogStore = (*Audit)(nil)
	_ audit.Store    = (*Audit)(nil)
)

// NewAudit returns the audit store on pool, a database migrated to at least
// 000005.
func NewAudit(pool *pgxpool.Pool) *Audit {
	return &Audit{q: sqlcgen.New(pool)}
}

// pruneBatch bounds the rows one prune statement deletes.
const pruneBatch = 5000

// InsertAudit implements audit.LogStore.
func (s *Audit) InsertAudit(ctx context.Context, e audit.Entry) (audit.Entry, error) {
	detail, err := auditDetail(e.Detail)
	if err != nil {
		return audit.Entry{}, err
	}
	p := sqlcgen.InsertAuditParams{Actor: e.Actor, Kind: e.Kind, Detail: []byte(detail)}
	if !e.At.IsZero() {
		p.At = pgtype.Timestamptz{Time: e.At, Valid: true}
	}
	if e.TenantID != "" {
		id, ok := auditUUID(e.TenantID)
		if !ok {
			return audit.Entry{}, fmt.Errorf("tenant %q: %w", e.TenantID, audit.ErrInvalid)
		}
		p.TenantID = id
	}
	row, err := s.q.InsertAudit(ctx, p)
	if err != nil {
		return audit.Entry{}, auditErr(err)
	}
	e.ID, e.At = row.ID, row.At.Time
	return e, nil
}

// ListAudit implements audit.LogStore. A tenant id that is not a UUID has
// no entries.
func (s *Audit) ListAudit(ctx context.Context, f audit.Filter) ([]audit.Entry, error) {
	p := sqlcgen.ListAuditParams{Kind: f.Kind, BeforeID: f.Before, MaxRows: int32(f.Limit)}
	if f.TenantID != "" {
		id, ok := auditUUID(f.TenantID)
		if !ok {
			return nil, nil
		}
		p.TenantID = id
	}
	rows, err := s.q.ListAudit(ctx, p)
	if err != nil {
		return nil, auditErr(err)
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

// RecordFirstRefusals implements audit.Store in one statement (see
// sql/audit.sql).
func (s *Audit) RecordFirstRefusals(ctx context.Context, rs []audit.FirstRefusal) (int64, error) {
	p := sqlcgen.RecordFirstRefusalsParams{
		TenantIds:   make([]pgtype.UUID, 0, len(rs)),
		CounterKeys: make([]string, 0, len(rs)),
		WindowEnds:  make([]pgtype.Timestamptz, 0, len(rs)),
		Ats:         make([]pgtype.Timestamptz, 0, len(rs)),
		Details:     make([]string, 0, len(rs)),
	}
	for _, r := range rs {
		id, ok := auditUUID(r.TenantID)
		if !ok {
			continue
		}
		detail, err := auditDetail(r.Detail)
		if err != nil {
			return 0, err
		}
		p.TenantIds = append(p.TenantIds, id)
		p.CounterKeys = append(p.CounterKeys, r.Key)
		p.WindowEnds = append(p.WindowEnds, pgtype.Timestamptz{Time: r.WindowEnd, Valid: true})
		p.Ats = append(p.Ats, pgtype.Timestamptz{Time: r.At, Valid: true})
		p.Details = append(p.Details, detail)
	}
	if len(p.TenantIds) == 0 {
		return 0, nil
	}
	n, err := s.q.RecordFirstRefusals(ctx, p)
	if err != nil {
		return 0, auditErr(err)
	}
	return n, nil
}

// PruneRefusals implements audit.Store, a batch of rows per statement so
// that no statement holds many locks.
func (s *Audit) PruneRefusals(ctx context.Context, windowsBefore, hoursBefore, batchesBefore time.Time) error {
	for {
		n, err := s.q.PruneRefusalWindows(ctx, sqlcgen.PruneRefusalWindowsParams{
			Before: pgtype.Timestamptz{Time: windowsBefore, Valid: true}, MaxRows: pruneBatch,
		})
		if err != nil {
			return fmt.Errorf("refusal windows: %w", auditErr(err))
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
			return fmt.Errorf("refusal hours: %w", auditErr(err))
		}
		if n < pruneBatch {
			break
		}
	}
	return pruneBatches(ctx, s.q, batchesBefore)
}

// auditEntryOf turns an audit row into an audit.Entry.
func auditEntryOf(r sqlcgen.Audit) (audit.Entry, error) {
	e := audit.Entry{ID: r.ID, At: r.At.Time, Actor: r.Actor, Kind: r.Kind}
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

// auditUUID reads a tenant id; one that is not a UUID names no tenant.
func auditUUID(s string) (pgtype.UUID, bool) {
	var u pgtype.UUID
	if err := u.Scan(s); err != nil || !u.Valid {
		return u, false
	}
	return u, true
}

// auditErr turns the errors of the usage, audit and alert statements into
// the audit package's sentinel where one applies (a tenant deleted under an
// entry being recorded), and strips pgx's types from the rest: their text is
// kept, ctx's errors stay errors.Is-able.
func auditErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation
		return fmt.Errorf("tenant: %w", audit.ErrInvalid)
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			return fmt.Errorf("%w: %v", c, err)
		}
	}
	return fmt.Errorf("%v", err)
}
