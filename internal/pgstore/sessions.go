package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// CreateSession implements admin.Store.
func (s *Admins) CreateSession(ctx context.Context, sess admin.Session) error {
	id, ok := uuidOf(sess.AdminID)
	if !ok {
		return fmt.Errorf("create session: admin %q: %w", sess.AdminID, admin.ErrNotFound)
	}
	p := sqlcgen.CreateSessionParams{
		TokenHash: sess.TokenHash,
		AdminID:   id,
		ExpiresAt: pgtype.Timestamptz{Time: sess.ExpiresAt, Valid: true},
	}
	if !sess.LastSeenAt.IsZero() {
		p.LastSeenAt = pgtype.Timestamptz{Time: sess.LastSeenAt, Valid: true}
	}
	err := s.q.CreateSession(ctx, p)
	if err != nil {
		return fmt.Errorf("create session: %w", dbErr(err, adminErrors))
	}
	return nil
}

// SessionAdmin implements admin.Store.
func (s *Admins) SessionAdmin(ctx context.Context, tokenHash []byte, now time.Time) (admin.Session, admin.Admin, error) {
	row, err := s.q.SessionAdmin(ctx, sqlcgen.SessionAdminParams{TokenHash: tokenHash, Now: pgtype.Timestamptz{Time: now, Valid: true}})
	if err != nil {
		return admin.Session{}, admin.Admin{}, fmt.Errorf("session: %w", dbErr(err, adminErrors))
	}
	a := admin.Admin{ID: row.ID.String(), Email: row.Email}
	return admin.Session{TokenHash: tokenHash, AdminID: a.ID, CreatedAt: timeOf(row.CreatedAt), ExpiresAt: timeOf(row.ExpiresAt), LastSeenAt: timeOf(row.LastSeenAt)}, a, nil
}

// TouchSession implements admin.Store.
func (s *Admins) TouchSession(ctx context.Context, tokenHash []byte, seenAt time.Time) error {
	err := s.q.TouchSession(ctx, sqlcgen.TouchSessionParams{TokenHash: tokenHash, SeenAt: pgtype.Timestamptz{Time: seenAt, Valid: true}})
	if err != nil {
		return fmt.Errorf("touch session: %w", dbErr(err, adminErrors))
	}
	return nil
}

// DeleteSession implements admin.Store.
func (s *Admins) DeleteSession(ctx context.Context, tokenHash []byte) error {
	if err := s.q.DeleteSession(ctx, tokenHash); err != nil {
		return fmt.Errorf("delete session: %w", dbErr(err, adminErrors))
	}
	return nil
}

// PruneSessions implements admin.Store, at most pruneRows rows a statement so
// that no statement holds many locks.
func (s *Admins) PruneSessions(ctx context.Context, before time.Time) error {
	for {
		n, err := s.q.PruneSessions(ctx, sqlcgen.PruneSessionsParams{
			Before: pgtype.Timestamptz{Time: before, Valid: true}, MaxRows: pruneRows,
		})
		if err != nil {
			return fmt.Errorf("prune sessions: %w", dbErr(err, adminErrors))
		}
		if n < pruneRows {
			return nil
		}
	}
}
