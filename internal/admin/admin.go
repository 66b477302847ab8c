// Package admin holds Tollgate's operators: admin accounts with argon2id
// password hashes, and the server-side sessions they sign in to the
// dashboard with. The dashboard's sign-in and the `tollgate admins`
// commands use it. It imports no driver, no Echo and nothing of the web
// layer: pgstore implements its Store.
package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinels; pgstore translates its errors into these.
var (
	// ErrNotFound is an unknown admin, or a session that does not exist or
	// has expired.
	ErrNotFound = errors.New("not found")
	// ErrConflict is an email that another admin has.
	ErrConflict = errors.New("already exists")
	// ErrInvalid is input refused; errors that wrap it say what is wrong in
	// words safe to show to the operator who typed it.
	ErrInvalid = errors.New("invalid")
)

// Admin is an operator who may sign in to the dashboard.
type Admin struct {
	ID    string
	Email string
	// PasswordHash is the argon2id hash in PHC string format; only
	// Store.AdminByEmail fills it.
	PasswordHash string
	CreatedAt    time.Time
}

// Session is a signed-in admin. Its token is only in the admin's cookie;
// the store keeps TokenHash.
type Session struct {
	TokenHash []byte
	AdminID   string
	CreatedAt time.Time
	ExpiresAt time.Time
	// LastSeenAt is the last request the session was seen on, as last
	// written by TouchSession: up to the dashboard's touch interval behind.
	LastSeenAt time.Time
}

// Store keeps admins and sessions. Every method is safe for concurrent use.
type Store interface {
	// CreateAdmin adds an admin with a normalised email and an argon2id
	// hash; a taken email is ErrConflict.
	CreateAdmin(ctx context.Context, email, passwordHash string) (Admin, error)
	// AdminByEmail returns the admin with email, PasswordHash included;
	// ErrNotFound when there is none.
	AdminByEmail(ctx context.Context, email string) (Admin, error)
	// Admins returns every admin, by email, without PasswordHash.
	Admins(ctx context.Context) ([]Admin, error)
	// SetPassword replaces an admin's password hash and ends every session
	// of the admin, in one transaction; ErrNotFound for an unknown email.
	SetPassword(ctx context.Context, email, passwordHash string) (Admin, error)

	// CreateSession stores s, last seen at s.LastSeenAt (the store's clock
	// when zero).
	CreateSession(ctx context.Context, s Session) error
	// SessionAdmin returns the session whose token hashes to tokenHash and
	// its admin, unless the session expired at or before now: then, or when
	// there is none, ErrNotFound.
	SessionAdmin(ctx context.Context, tokenHash []byte, now time.Time) (Session, Admin, error)
	// TouchSession moves the session's LastSeenAt forward to seenAt; never
	// back. An unknown session is no error.
	TouchSession(ctx context.Context, tokenHash []byte, seenAt time.Time) error
	// DeleteSession ends a session; an unknown one is no error.
	DeleteSession(ctx context.Context, tokenHash []byte) error
	// PruneSessions deletes sessions that expired before before.
	PruneSessions(ctx context.Context, before time.Time) error
}

// Creator stores a new admin (Store does).
type Creator interface {
	CreateAdmin(ctx context.Context, email, passwordHash string) (Admin, error)
}

// Create adds an admin who signs in with email (normalised by
// NormalizeEmail) and password (hashed under p, within h's bound on
// hashes at once when h is not nil). It is how `tollgate admins create`
// and the dashboard add admins. Errors: ErrInvalid for an email or a
// password refused, in words for the operator who typed them; ErrConflict
// for an email another admin has; ErrBusy from h; anything else is the
// store failing.
func Create(ctx context.Context, s Creator, h *Hasher, email, password string, p Argon2Params) (Admin, error) {
	norm, err := NormalizeEmail(email)
	if err != nil {
		return Admin{}, err
	}
	if err := ValidatePassword(password); err != nil {
		return Admin{}, err
	}
	var hash string
	if h == nil {
		hash, err = HashPassword(password, p)
	} else {
		hash, err = h.Hash(ctx, password, p)
	}
	if err != nil {
		return Admin{}, err
	}
	a, err := s.CreateAdmin(ctx, norm, hash)
	if err != nil {
		return Admin{}, fmt.Errorf("admin %s: %w", norm, err)
	}
	return a, nil
}

// MaxEmailLen is the longest email address accepted (RFC 5321's path limit).
const MaxEmailLen = 254

// NormalizeEmail returns email trimmed and lower-cased, the form admins are
// stored and found by, or an error wrapping ErrInvalid unless it looks like
// an address: one "@" with something on either side, no spaces or control
// characters, at most MaxEmailLen bytes.
func NormalizeEmail(email string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(email))
	at := strings.IndexByte(e, '@')
	switch {
	case e == "" || len(e) > MaxEmailLen || !utf8.ValidString(e):
		return "", fmt.Errorf("email must be an address of 3 to %d characters: %w", MaxEmailLen, ErrInvalid)
	case at <= 0 || at == len(e)-1 || strings.Count(e, "@") != 1:
		return "", fmt.Errorf("email must be an address such as ops@example.com: %w", ErrInvalid)
	}
	for _, r := range e {
		if r <= ' ' || r == 0x7f {
			return "", fmt.Errorf("email must not contain spaces or control characters: %w", ErrInvalid)
		}
	}
	return e, nil
}

// Password bounds, in bytes: long enough to resist guessing at the rate the
// sign-in limiter allows, short enough that hashing stays cheap.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 1024
)

// ValidatePassword returns an error wrapping ErrInvalid unless password is
// MinPasswordLen to MaxPasswordLen bytes.
func ValidatePassword(password string) error {
	if len(password) < MinPasswordLen || len(password) > MaxPasswordLen {
		return fmt.Errorf("password must be %d to %d characters: %w", MinPasswordLen, MaxPasswordLen, ErrInvalid)
	}
	return nil
}

// tokenBytes is the entropy of a session token: 256 bits.
const tokenBytes = 32

// NewToken returns a new session token for the cookie and the hash the
// store keeps. err is not nil only when the system's random source fails.
func NewToken() (token string, hash []byte, err error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("session token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token), nil
}

// HashToken returns what the store keeps of a session token: its SHA-256.
// The token carries 256 bits from crypto/rand, so a fast hash is enough; a
// password hash would only cost CPU on every page.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}
