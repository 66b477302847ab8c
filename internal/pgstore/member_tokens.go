package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// CreateSession implements console.Store.
func (s *Members) CreateSession(ctx context.Context, tenantID, memberID string, expiresAt time.Time) (string, error) {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return "", fmt.Errorf("create session: member %s: %w", memberID, console.ErrNotFound)
	}
	raw, hash, err := admin.NewToken()
	if err != nil {
		return "", fmt.Errorf("create session: %w", err)
	}
	n, err := s.q.CreateMemberSession(ctx, sqlcgen.CreateMemberSessionParams{
		TokenHash: hash, Now: ts(s.now()), ExpiresAt: ts(expiresAt), MemberID: p.ID, TenantID: p.TenantID,
	})
	if err == nil && n == 0 {
		err = console.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("create session: member %s: %w", memberID, dbErr(err, memberErrors))
	}
	return raw, nil
}

// SessionMember implements console.Store.
func (s *Members) SessionMember(ctx context.Context, rawToken string) (console.Session, console.Member, error) {
	row, err := s.q.SessionMember(ctx, sqlcgen.SessionMemberParams{TokenHash: admin.HashToken(rawToken), Now: ts(s.now())})
	if err != nil {
		return console.Session{}, console.Member{}, fmt.Errorf("session: %w", dbErr(err, memberErrors))
	}
	m := memberOf(row.Member)
	return console.Session{
		MemberID: m.ID, TenantID: m.TenantID,
		CreatedAt: timeOf(row.SessionCreatedAt), ExpiresAt: timeOf(row.SessionExpiresAt),
	}, m, nil
}

// DeleteSession implements console.Store.
func (s *Members) DeleteSession(ctx context.Context, rawToken string) error {
	if err := s.q.DeleteMemberSession(ctx, admin.HashToken(rawToken)); err != nil {
		return fmt.Errorf("delete session: %w", dbErr(err, memberErrors))
	}
	return nil
}

// DeleteSessions implements console.Store.
func (s *Members) DeleteSessions(ctx context.Context, tenantID, memberID string) (int64, error) {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return 0, nil
	}
	n, err := s.q.DeleteMemberSessions(ctx, sqlcgen.DeleteMemberSessionsParams{MemberID: p.ID, TenantID: p.TenantID})
	if err != nil {
		return 0, fmt.Errorf("delete sessions: member %s: %w", memberID, dbErr(err, memberErrors))
	}
	return n, nil
}

// IssueToken implements console.Store.
func (s *Members) IssueToken(ctx context.Context, tenantID, memberID string, purpose console.Purpose) (string, error) {
	raw, err := s.issue(ctx, s.q, tenantID, memberID, purpose)
	if err != nil {
		return "", fmt.Errorf("issue %s token: member %s: %w", purpose, memberID, dbErr(err, memberErrors))
	}
	return raw, nil
}

// issue stores a new token of purpose for the tenant's member through q
// and returns it raw; ErrNotFound when the member is not the tenant's.
func (s *Members) issue(ctx context.Context, q *sqlcgen.Queries, tenantID, memberID string, purpose console.Purpose) (string, error) {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return "", console.ErrNotFound
	}
	raw, hash, err := admin.NewToken()
	if err != nil {
		return "", err
	}
	now := s.now()
	n, err := q.CreateMemberToken(ctx, sqlcgen.CreateMemberTokenParams{
		TokenHash: hash, Purpose: string(purpose), Now: ts(now), ExpiresAt: ts(now.Add(purpose.TTL())),
		MemberID: p.ID, TenantID: p.TenantID,
	})
	if err == nil && n == 0 {
		err = console.ErrNotFound
	}
	return raw, err
}

// spend spends a token of purpose through q, at now; ErrTokenInvalid when
// no unused, unexpired token of purpose hashes to rawToken's hash.
func (s *Members) spend(ctx context.Context, q *sqlcgen.Queries, purpose console.Purpose, rawToken string, now pgtype.Timestamptz) (sqlcgen.UseMemberTokenRow, error) {
	t, err := q.UseMemberToken(ctx, sqlcgen.UseMemberTokenParams{Now: now, TokenHash: admin.HashToken(rawToken), Purpose: string(purpose)})
	if errors.Is(err, pgx.ErrNoRows) {
		return t, console.ErrTokenInvalid
	}
	return t, err
}

// UseToken implements console.Store.
func (s *Members) UseToken(ctx context.Context, purpose console.Purpose, rawToken string) (console.Member, error) {
	var m console.Member
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		t, err := s.spend(ctx, q, purpose, rawToken, ts(s.now()))
		if err != nil {
			return err
		}
		row, err := q.MemberByID(ctx, sqlcgen.MemberByIDParams{ID: t.ID, TenantID: t.TenantID})
		m = memberOf(row)
		return err
	})
	if err != nil {
		return console.Member{}, fmt.Errorf("use %s token: %w", purpose, err)
	}
	return m, nil
}

// TokenMember implements console.Store: one read, nothing spent.
func (s *Members) TokenMember(ctx context.Context, purpose console.Purpose, rawToken string) (console.Member, error) {
	row, err := s.q.PeekMemberToken(ctx, sqlcgen.PeekMemberTokenParams{TokenHash: admin.HashToken(rawToken), Purpose: string(purpose), Now: ts(s.now())})
	if errors.Is(err, pgx.ErrNoRows) {
		err = console.ErrTokenInvalid
	}
	if err != nil {
		return console.Member{}, fmt.Errorf("read %s token: %w", purpose, err)
	}
	return memberOf(row.Member), nil
}

// SetPassword implements console.Store: the new hash and the end of the
// member's sessions commit together, so that no session opened with the
// old password survives the change.
func (s *Members) SetPassword(ctx context.Context, tenantID, memberID, passwordHash string) (console.Member, error) {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return console.Member{}, fmt.Errorf("set password: member %s: %w", memberID, console.ErrNotFound)
	}
	var m console.Member
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		var err error
		m, err = s.setPassword(ctx, q, p, passwordHash, false)
		return err
	})
	if err != nil {
		return console.Member{}, fmt.Errorf("set password: member %s: %w", memberID, err)
	}
	return m, nil
}

// ResetPassword implements console.Store.
func (s *Members) ResetPassword(ctx context.Context, rawToken, passwordHash string) (console.Member, error) {
	m, err := s.spendAndSet(ctx, console.PurposeReset, rawToken, passwordHash, false)
	if err != nil {
		return console.Member{}, fmt.Errorf("reset password: %w", err)
	}
	return m, nil
}

// AcceptInvite implements console.Store.
func (s *Members) AcceptInvite(ctx context.Context, rawToken, passwordHash string) (console.Member, error) {
	m, err := s.spendAndSet(ctx, console.PurposeInvite, rawToken, passwordHash, true)
	if err != nil {
		return console.Member{}, fmt.Errorf("accept invite: %w", err)
	}
	return m, nil
}

// spendAndSet spends a token of purpose and sets its member's password
// (marking the member confirmed when confirm is set) in one transaction.
func (s *Members) spendAndSet(ctx context.Context, purpose console.Purpose, rawToken, passwordHash string, confirm bool) (console.Member, error) {
	var m console.Member
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		t, err := s.spend(ctx, q, purpose, rawToken, ts(s.now()))
		if err != nil {
			return err
		}
		m, err = s.setPassword(ctx, q, memberIDs(t), passwordHash, confirm)
		return err
	})
	return m, err
}

// setPassword sets the member's password hash through q and ends the
// member's sessions.
func (s *Members) setPassword(ctx context.Context, q *sqlcgen.Queries, p memberIDs, passwordHash string, confirm bool) (console.Member, error) {
	row, err := q.SetMemberPassword(ctx, sqlcgen.SetMemberPasswordParams{
		PasswordHash: &passwordHash, Now: ts(s.now()), Confirm: confirm, ID: p.ID, TenantID: p.TenantID,
	})
	if err != nil {
		return console.Member{}, err
	}
	if _, err := q.DeleteMemberSessions(ctx, sqlcgen.DeleteMemberSessionsParams{MemberID: p.ID, TenantID: p.TenantID}); err != nil {
		return console.Member{}, fmt.Errorf("end sessions: %w", err)
	}
	return memberOf(row), nil
}

// Invite implements console.Store.
func (s *Members) Invite(ctx context.Context, tenantID, email string, role console.Role) (string, error) {
	tid, ok := uuidOf(tenantID)
	if !ok {
		return "", fmt.Errorf("invite: tenant %s: %w", tenantID, console.ErrNotFound)
	}
	var raw string
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		row, err := q.CreateMember(ctx, sqlcgen.CreateMemberParams{TenantID: tid, Email: email, Role: string(role)})
		if err != nil {
			return err
		}
		raw, err = s.issue(ctx, q, tenantID, row.ID.String(), console.PurposeInvite)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("invite: %w", err)
	}
	return raw, nil
}

// RemoveMember implements console.Store. The tenant's owners are locked
// first, so that two removals of owners run one after the other and the
// second sees the first's.
func (s *Members) RemoveMember(ctx context.Context, tenantID, memberID string) error {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return fmt.Errorf("remove member %s: %w", memberID, console.ErrNotFound)
	}
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		owners, err := q.LockTenantOwners(ctx, p.TenantID)
		if err != nil {
			return err
		}
		m, err := q.MemberByID(ctx, sqlcgen.MemberByIDParams(p))
		if err != nil {
			return err
		}
		if console.Role(m.Role) == console.RoleOwner && !otherActiveOwner(owners, p.ID) {
			return console.ErrLastOwner
		}
		n, err := q.DeleteMember(ctx, sqlcgen.DeleteMemberParams(p))
		if err == nil && n == 0 {
			err = console.ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("remove member %s: %w", memberID, err)
	}
	return nil
}

// otherActiveOwner reports whether an owner other than id can sign in.
func otherActiveOwner(owners []sqlcgen.LockTenantOwnersRow, id pgtype.UUID) bool {
	for _, o := range owners {
		if o.Active && o.ID != id {
			return true
		}
	}
	return false
}
