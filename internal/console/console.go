// Package console holds the tenant console's people (issue 41): members
// of a tenant who sign in with an email and an argon2id password hash (as
// internal/admin's operators do), their server-side sessions, and the
// one-use tokens mailed to them to confirm an address, reset a password or
// accept an invitation. It holds the types, the sentinels and the Store
// contract; pgstore.Members implements it. It imports no driver, no Echo
// and nothing of the web layer.
package console

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

// Sentinels; pgstore translates its errors into these.
var (
	// ErrNotFound is an unknown member, a member of another tenant than the
	// one named, or a session that does not exist, has expired or whose
	// member is disabled.
	ErrNotFound = errors.New("not found")
	// ErrEmailTaken is an email another member has: there is one account
	// per email, whichever the tenant.
	ErrEmailTaken = errors.New("email taken")
	// ErrTokenInvalid is a mailed token that is unknown, used already,
	// expired, or for another purpose. The four are one answer, so that
	// the answer tells a guesser nothing.
	ErrTokenInvalid = errors.New("token invalid or expired")
	// ErrLastOwner is the removal of the tenant's last owner who can sign
	// in: a tenant keeps one.
	ErrLastOwner = errors.New("last owner")
	// ErrInvalid is a value the schema refuses (an email not normalised, a
	// password hash that is not argon2id, an unknown role or purpose): the
	// caller's validation should have refused it first.
	ErrInvalid = errors.New("invalid")
)

// Role is what a member may do in the console.
type Role string

// The roles: an owner manages members and billing, a developer keys and
// policies.
const (
	RoleOwner     Role = "owner"
	RoleDeveloper Role = "developer"
)

// Purpose is what a mailed token is for; a token works for its purpose
// only.
type Purpose string

// The purposes of a mailed token.
const (
	PurposeConfirm Purpose = "confirm"
	PurposeReset   Purpose = "reset"
	PurposeInvite  Purpose = "invite"
)

// How long a mailed token works, by purpose.
const (
	ConfirmTTL = 48 * time.Hour
	ResetTTL   = time.Hour
	InviteTTL  = 7 * 24 * time.Hour
)

// TTL is how long a token of p works (ResetTTL, the shortest, for a
// purpose it does not know).
func (p Purpose) TTL() time.Duration {
	switch p {
	case PurposeConfirm:
		return ConfirmTTL
	case PurposeInvite:
		return InviteTTL
	}
	return ResetTTL
}

// StarterPlan is the plan a tenant made by sign-up starts on.
const StarterPlan = "starter"

// Member is a person of a tenant who may sign in to the console.
type Member struct {
	ID       string
	TenantID string
	// Email is lower-cased and trimmed (admin.NormalizeEmail's form).
	Email string
	// PasswordHash is the argon2id hash in PHC string format; empty while
	// an invited member has not set a password (no password matches it).
	PasswordHash string
	Role         Role
	// ConfirmedAt is when the member proved the address; nil until then.
	ConfirmedAt *time.Time
	// DisabledAt, when set, keeps the member from signing in.
	DisabledAt *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Session is a signed-in member; its token is only in the member's cookie.
type Session struct {
	MemberID  string
	TenantID  string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Store keeps members, sessions and mailed tokens. Raw tokens (sessions'
// and mailed ones) are 32 random bytes, base64url: the store returns each
// once and keeps only its SHA-256. Every method that takes a member id
// takes its tenant id too and answers ErrNotFound for a member of another
// tenant. Every method is safe for concurrent use; errors other than the
// ones named are the store failing.
type Store interface {
	// SignUp makes, in one transaction, a tenant named tenantName on
	// StarterPlan with a test key only (tenant.CreateSandbox), its owner
	// (unconfirmed) with email and passwordHash, and a confirm token,
	// returned raw. email must be admin.NormalizeEmail's form (else
	// ErrInvalid, as for a hash that is not argon2id). ErrEmailTaken, and
	// then no tenant is left behind; tenant.ErrInvalid for a name refused.
	SignUp(ctx context.Context, email, passwordHash, tenantName string) (m Member, c tenant.Created, confirmToken string, err error)
	// Confirm spends a confirm token, marks its member confirmed and, for
	// an owner, gives the tenant its first live key, returned raw (shown
	// once; "" for a developer). Both happen once per member:
	// ErrTokenInvalid for a token used, expired, unknown, or of a member
	// confirmed already (another confirm token mailed again).
	Confirm(ctx context.Context, rawToken string) (m Member, liveKey string, err error)
	// MemberByEmail returns the member with email (trimmed and lower-cased
	// first), PasswordHash included; ErrNotFound.
	MemberByEmail(ctx context.Context, email string) (Member, error)
	// MemberByID returns the tenant's member; ErrNotFound.
	MemberByID(ctx context.Context, tenantID, memberID string) (Member, error)
	// Members returns the tenant's members by email.
	Members(ctx context.Context, tenantID string) ([]Member, error)

	// CreateSession signs the tenant's member in until expiresAt and
	// returns the session's raw token; ErrNotFound.
	CreateSession(ctx context.Context, tenantID, memberID string, expiresAt time.Time) (string, error)
	// SessionMember returns the session of rawToken and its member unless
	// it expired or the member is disabled: then, or when there is none,
	// ErrNotFound.
	SessionMember(ctx context.Context, rawToken string) (Session, Member, error)
	// DeleteSession ends a session; an unknown one is no error.
	DeleteSession(ctx context.Context, rawToken string) error
	// DeleteSessions ends every session of the tenant's member and says
	// how many there were.
	DeleteSessions(ctx context.Context, tenantID, memberID string) (int64, error)

	// IssueToken makes a token of purpose for the tenant's member, working
	// for purpose.TTL(), and returns it raw; ErrNotFound.
	IssueToken(ctx context.Context, tenantID, memberID string, purpose Purpose) (string, error)
	// UseToken spends a token of purpose and returns its member;
	// ErrTokenInvalid (unknown, used, expired or another purpose).
	UseToken(ctx context.Context, purpose Purpose, rawToken string) (Member, error)
	// TokenMember returns the member of an unused, unexpired token of
	// purpose without spending it, for the page a mailed link opens (mail
	// scanners follow links); ErrTokenInvalid (unknown, used, expired or
	// another purpose).
	TokenMember(ctx context.Context, purpose Purpose, rawToken string) (Member, error)
	// SetPassword replaces the tenant's member's password hash and ends
	// every session of the member, in one transaction; ErrNotFound.
	SetPassword(ctx context.Context, tenantID, memberID, passwordHash string) (Member, error)
	// ResetPassword spends a reset token, sets its member's password hash
	// and ends the member's sessions, in one transaction; ErrTokenInvalid.
	ResetPassword(ctx context.Context, rawToken, passwordHash string) (Member, error)

	// Invite adds email to the tenant as role, with no password yet, and
	// returns an invite token raw. email must be normalised as for SignUp;
	// ErrEmailTaken; ErrNotFound for no such tenant; ErrInvalid for an
	// unknown role.
	Invite(ctx context.Context, tenantID, email string, role Role) (string, error)
	// AcceptInvite spends an invite token, sets its member's password hash
	// and marks the member confirmed (the mail reached them), in one
	// transaction; ErrTokenInvalid.
	AcceptInvite(ctx context.Context, rawToken, passwordHash string) (Member, error)
	// RemoveMember removes the tenant's member: ErrNotFound for a member
	// of another tenant, ErrLastOwner when no other owner who can sign in
	// (a password set, not disabled) would remain. Two owners removing
	// each other at once cannot both succeed.
	RemoveMember(ctx context.Context, tenantID, memberID string) error
}
