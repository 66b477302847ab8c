package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// Admins keeps the dashboard's admin accounts (table admins) and their
// sessions (admin_sessions, in sessions.go): the admin.Store. It is safe
// for concurrent use.
type Admins struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

var _ admin.Store = (*Admins)(nil)

// NewAdmins returns the admin store on pool, a database migrated to at
// least 000008.
func NewAdmins(pool *pgxpool.Pool) *Admins {
	return &Admins{pool: pool, q: sqlcgen.New(pool)}
}

// CreateAdmin implements admin.Store.
func (s *Admins) CreateAdmin(ctx context.Context, email, passwordHash string) (admin.Admin, error) {
	row, err := s.q.CreateAdmin(ctx, sqlcgen.CreateAdminParams{Email: email, PasswordHash: passwordHash})
	if err != nil {
		return admin.Admin{}, fmt.Errorf("create admin: %w", dbErr(err, adminErrors))
	}
	return adminOf(row), nil
}

// AdminByEmail implements admin.Store.
func (s *Admins) AdminByEmail(ctx context.Context, email string) (admin.Admin, error) {
	row, err := s.q.AdminByEmail(ctx, email)
	if err != nil {
		return admin.Admin{}, fmt.Errorf("admin: %w", dbErr(err, adminErrors))
	}
	return adminOf(row), nil
}

// Admins implements admin.Store.
func (s *Admins) Admins(ctx context.Context) ([]admin.Admin, error) {
	rows, err := s.q.ListAdmins(ctx)
	if err != nil {
		return nil, fmt.Errorf("list admins: %w", dbErr(err, adminErrors))
	}
	out := make([]admin.Admin, len(rows))
	for i, r := range rows {
		out[i] = admin.Admin{ID: r.ID.String(), Email: r.Email, CreatedAt: timeOf(r.CreatedAt)}
	}
	return out, nil
}

// SetPassword implements admin.Store: the new hash and the end of the
// admin's sessions commit together, so that no session opened with the old
// password survives the change.
func (s *Admins) SetPassword(ctx context.Context, email, passwordHash string) (admin.Admin, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return admin.Admin{}, fmt.Errorf("set admin password: %w", dbErr(err, adminErrors))
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	row, err := q.SetAdminPassword(ctx, sqlcgen.SetAdminPasswordParams{Email: email, PasswordHash: passwordHash})
	if err != nil {
		return admin.Admin{}, fmt.Errorf("set admin password: %w", dbErr(err, adminErrors))
	}
	if _, err := q.DeleteAdminSessions(ctx, row.ID); err != nil {
		return admin.Admin{}, fmt.Errorf("set admin password: end sessions: %w", dbErr(err, adminErrors))
	}
	if err := tx.Commit(ctx); err != nil {
		return admin.Admin{}, fmt.Errorf("set admin password: %w", dbErr(err, adminErrors))
	}
	return adminOf(row), nil
}

// adminOf turns a row into an admin.Admin.
func adminOf(r sqlcgen.Admin) admin.Admin {
	return admin.Admin{ID: r.ID.String(), Email: r.Email, PasswordHash: r.PasswordHash, CreatedAt: timeOf(r.CreatedAt)}
}
