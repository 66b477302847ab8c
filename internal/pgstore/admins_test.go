package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func newAdmins(t *testing.T) (*pgstore.Admins, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	return pgstore.NewAdmins(pool), pool
}

const hashA = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaGhhc2g"

func TestAdmins(t *testing.T) {
	t.Parallel()
	s, _ := newAdmins(t)
	ctx := context.Background()
	a, err := s.CreateAdmin(ctx, "ops@example.com", hashA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAdmin(ctx, "ops@example.com", hashA); !errors.Is(err, admin.ErrConflict) {
		t.Fatalf("duplicate email: %v, want ErrConflict", err)
	}
	// The schema holds the normal form and the hash format too.
	if _, err := s.CreateAdmin(ctx, "Ops@Example.com", hashA); !errors.Is(err, admin.ErrInvalid) {
		t.Fatalf("email not normalised: %v, want ErrInvalid", err)
	}
	if _, err := s.CreateAdmin(ctx, "x@example.com", "plaintext"); !errors.Is(err, admin.ErrInvalid) {
		t.Fatalf("not a hash: %v, want ErrInvalid", err)
	}
	got, err := s.AdminByEmail(ctx, "ops@example.com")
	if err != nil || got.ID != a.ID || got.PasswordHash != hashA {
		t.Fatalf("by email: %+v, %v", got, err)
	}
	if _, err := s.AdminByEmail(ctx, "nobody@example.com"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := s.SetPassword(ctx, "nobody@example.com", hashA); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("set password of nobody: %v", err)
	}
	b, err := s.CreateAdmin(ctx, "cfo@example.com", hashA)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Admins(ctx)
	if err != nil || len(all) != 2 || all[0].ID != b.ID || all[1].ID != a.ID || all[0].PasswordHash != "" || all[0].CreatedAt.IsZero() {
		t.Fatalf("admins %+v, %v; want cfo then ops, by email, without their hashes", all, err)
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	s, pool := newAdmins(t)
	ctx := context.Background()
	a, err := s.CreateAdmin(ctx, "ops@example.com", hashA)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, live, _ := admin.NewToken()
	_, old, _ := admin.NewToken()
	if err := s.CreateSession(ctx, admin.Session{TokenHash: live, AdminID: a.ID, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, admin.Session{TokenHash: old, AdminID: a.ID, ExpiresAt: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	sess, who, err := s.SessionAdmin(ctx, live, now)
	if err != nil || who.Email != "ops@example.com" || sess.AdminID != a.ID || who.PasswordHash != "" {
		t.Fatalf("session: %+v %+v %v", sess, who, err)
	}
	// Expired, a session opens nothing, and pruning deletes it.
	if _, _, err := s.SessionAdmin(ctx, old, now); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("expired session: %v", err)
	}
	if _, _, err := s.SessionAdmin(ctx, live, now.Add(2*time.Hour)); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("session past its expiry: %v", err)
	}
	if err := s.PruneSessions(ctx, now); err != nil {
		t.Fatal(err)
	}
	var n int
	pool.QueryRow(ctx, "SELECT count(*) FROM admin_sessions").Scan(&n)
	if n != 1 {
		t.Fatalf("%d sessions after pruning, want 1", n)
	}
	// A new password ends every session.
	if _, err := s.SetPassword(ctx, "ops@example.com", hashA); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SessionAdmin(ctx, live, now); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("session after a password change: %v", err)
	}
	if err := s.DeleteSession(ctx, live); err != nil {
		t.Fatalf("deleting a gone session: %v", err)
	}
}
