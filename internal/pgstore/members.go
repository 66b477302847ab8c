package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Members keeps the console's members, their sessions and mailed tokens
// (tables members, member_sessions, member_tokens): the console.Store.
// Tokens are made and hashed as the admins' sessions are (admin.NewToken,
// admin.HashToken). It is safe for concurrent use.
type Members struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
	now  func() time.Time
}

var _ console.Store = (*Members)(nil)

// NewMembers returns the member store on pool, a database migrated to at
// least 000032. now is the clock tokens and sessions expire by (time.Now
// when nil).
func NewMembers(pool *pgxpool.Pool, now func() time.Time) *Members {
	if now == nil {
		now = time.Now
	}
	return &Members{pool: pool, q: sqlcgen.New(pool), now: now}
}

// memberErrors: no rows is ErrNotFound, a taken email ErrEmailTaken, a
// tenant that does not exist ErrNotFound, any other constraint ErrInvalid.
var memberErrors = dbErrors{
	domain: []error{console.ErrNotFound, console.ErrEmailTaken, console.ErrTokenInvalid, console.ErrLastOwner,
		console.ErrInvalid, tenant.ErrInvalid, tenant.ErrNotFound},
	noRows: console.ErrNotFound,
	code: func(pe *pgconn.PgError) error {
		switch pe.Code {
		case uniqueViolation:
			if pe.ConstraintName == "members_email_key" {
				return console.ErrEmailTaken
			}
		case foreignKeyViolation:
			return fmt.Errorf("%s: %w", pe.ConstraintName, console.ErrNotFound)
		case checkViolation, stringTooLong, notNullViolation:
			return fmt.Errorf("%s: %w", pe.ConstraintName, console.ErrInvalid)
		}
		return nil
	},
}

// inTx runs f in a transaction of its own, committed when f returns nil.
func (s *Members) inTx(ctx context.Context, f func(q *sqlcgen.Queries) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbErr(err, memberErrors)
	}
	defer tx.Rollback(ctx)
	if err := f(s.q.WithTx(tx)); err != nil {
		return dbErr(err, memberErrors)
	}
	return dbErr(tx.Commit(ctx), memberErrors)
}

// SignUp implements console.Store. The tenant is made by
// tenant.CreateSandbox through a txCreator in the transaction that adds
// the owner and the token, so that a taken email leaves no tenant behind.
func (s *Members) SignUp(ctx context.Context, email, passwordHash, tenantName string) (console.Member, tenant.Created, string, error) {
	var m console.Member
	var c tenant.Created
	var raw string
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		var err error
		if c, err = tenant.CreateSandbox(ctx, txCreator{q}, tenantName, console.StarterPlan); err != nil {
			return err
		}
		tid, _ := uuidOf(c.Tenant.ID)
		row, err := q.CreateMember(ctx, sqlcgen.CreateMemberParams{
			TenantID: tid, Email: email, PasswordHash: &passwordHash, Role: string(console.RoleOwner),
		})
		if err != nil {
			return err
		}
		m = memberOf(row)
		raw, err = s.issue(ctx, q, row.TenantID.String(), m.ID, console.PurposeConfirm)
		return err
	})
	if err != nil {
		return console.Member{}, tenant.Created{}, "", fmt.Errorf("sign up: %w", err)
	}
	return m, c, raw, nil
}

// Confirm implements console.Store: the token is spent, the member
// confirmed and the live key stored in one transaction, so that of two
// requests racing with one token only one makes a key, and a member
// confirmed already (a confirm token mailed again) gets no second one. Only
// an owner's confirmation makes a live key; a developer's has none.
func (s *Members) Confirm(ctx context.Context, rawToken string) (console.Member, string, error) {
	var m console.Member
	var live string
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		now := ts(s.now())
		t, err := s.spend(ctx, q, console.PurposeConfirm, rawToken, now)
		if err != nil {
			return err
		}
		row, err := q.ConfirmMember(ctx, sqlcgen.ConfirmMemberParams{Now: now, ID: t.ID, TenantID: t.TenantID})
		if errors.Is(err, pgx.ErrNoRows) {
			// Confirmed already, with another token: rolled back, this
			// one stays unspent but can never confirm.
			return console.ErrTokenInvalid
		}
		if err != nil {
			return err
		}
		m = memberOf(row)
		if m.Role != console.RoleOwner {
			return nil
		}
		var k tenant.Key
		if live, k, err = tenant.NewKey(false); err != nil {
			return err
		}
		k.Name = tenant.FirstLiveKeyName
		if _, err := q.CreateKey(ctx, keyParams(k, t.TenantID)); err != nil {
			return fmt.Errorf("live key: %w", err)
		}
		return nil
	})
	if err != nil {
		return console.Member{}, "", fmt.Errorf("confirm: %w", err)
	}
	return m, live, nil
}

// MemberByEmail implements console.Store.
func (s *Members) MemberByEmail(ctx context.Context, email string) (console.Member, error) {
	row, err := s.q.MemberByEmail(ctx, email)
	if err != nil {
		return console.Member{}, fmt.Errorf("member by email: %w", dbErr(err, memberErrors))
	}
	return memberOf(row), nil
}

// MemberByID implements console.Store.
func (s *Members) MemberByID(ctx context.Context, tenantID, memberID string) (console.Member, error) {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return console.Member{}, fmt.Errorf("member %s: %w", memberID, console.ErrNotFound)
	}
	row, err := s.q.MemberByID(ctx, sqlcgen.MemberByIDParams(p))
	if err != nil {
		return console.Member{}, fmt.Errorf("member %s: %w", memberID, dbErr(err, memberErrors))
	}
	return memberOf(row), nil
}

// Members implements console.Store.
func (s *Members) Members(ctx context.Context, tenantID string) ([]console.Member, error) {
	tid, ok := uuidOf(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.q.ListMembers(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", dbErr(err, memberErrors))
	}
	out := make([]console.Member, len(rows))
	for i, r := range rows {
		out[i] = memberOf(r)
	}
	return out, nil
}

// memberIDs is a member id with its tenant id, as every statement on one member
// takes them.
type memberIDs struct{ ID, TenantID pgtype.UUID }

// memberParams reads a tenant id and a member id; ok is false unless both
// are UUIDs (then they name no member).
func memberParams(tenantID, memberID string) (memberIDs, bool) {
	tid, ok1 := uuidOf(tenantID)
	mid, ok2 := uuidOf(memberID)
	return memberIDs{ID: mid, TenantID: tid}, ok1 && ok2
}

// memberOf turns a row into a console.Member.
func memberOf(r sqlcgen.Member) console.Member {
	return console.Member{
		ID:           r.ID.String(),
		TenantID:     r.TenantID.String(),
		Email:        r.Email,
		PasswordHash: deref(r.PasswordHash),
		Role:         console.Role(r.Role),
		ConfirmedAt:  timePtrOf(r.ConfirmedAt),
		DisabledAt:   timePtrOf(r.DisabledAt),
		CreatedAt:    timeOf(r.CreatedAt),
		UpdatedAt:    timeOf(r.UpdatedAt),
	}
}
