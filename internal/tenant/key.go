package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// An API key reads tg_live_PPPPPPPPPPPP_SSSS…S (tg_test_ for test mode):
// twelve base62 characters of public prefix, which finds the key, then
// thirty-two of secret. Only the prefix and a hash of the whole key are kept.
const (
	liveMark  = "tg_live_"
	testMark  = "tg_test_"
	prefixLen = 12
	secretLen = 32
	// keyLen is the length of every key: the parser accepts nothing else.
	keyLen = len(liveMark) + prefixLen + 1 + secretLen
	idLen  = 16
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Key is an API key as Tollgate keeps it: never the key itself, which NewKey
// shows once, but the prefix that finds it and a hash that proves it.
type Key struct {
	// ID names the key to operators ("key_" and 16 base62 characters); it
	// is not part of the key.
	ID       string
	TenantID string
	// Prefix is the key's public lookup part (12 base62 characters),
	// unique among all keys.
	Prefix string
	// Hash is the SHA-256 of the whole key. The secret is 32 characters from
	// crypto/rand (190 bits): no guess can find a preimage, so a slow
	// password hash (argon2id, bcrypt), made for low-entropy human
	// passwords, would cost CPU on every request and add no safety.
	Hash []byte
	// Test marks a tg_test_ key: sandbox allotment, never metered.
	Test bool
	// Name says what the key is for, to operators; empty when not given
	// (at most MaxKeyNameLen characters).
	Name string
	// ExpiresAt, when set, is when the key stops working: from then on it
	// is refused like a revoked key, with an *ExpiredKeyError.
	ExpiresAt  *time.Time
	CreatedAt  time.Time
	RevokedAt  *time.Time
	LastUsedAt *time.Time
}

// Expired reports whether the key has an expiry at or before now.
func (k Key) Expired(now time.Time) bool {
	return k.ExpiresAt != nil && !now.Before(*k.ExpiresAt)
}

// MaxKeyNameLen is the longest key name, in characters.
const MaxKeyNameLen = 100

// ValidateKeyName returns a *FieldError unless name is empty or a name as
// ValidateName takes it, of at most MaxKeyNameLen characters.
func ValidateKeyName(name string) error {
	if name == "" {
		return nil
	}
	return validateText("name", name, MaxKeyNameLen)
}

// ValidateKeyExpiry returns a *FieldError unless expiresAt is unset or
// later than now: a key made expired would only ever be refused.
func ValidateKeyExpiry(expiresAt *time.Time, now time.Time) error {
	if expiresAt != nil && !expiresAt.After(now) {
		return &FieldError{"expires_at", "must be in the future"}
	}
	return nil
}

// ParseKeyExpiry reads a key's expiry as operators type it (the command
// line's --expires, the dashboard's key form): empty for none; a duration
// from now, in days (90d) or as Go writes durations (12h, 90m); or a time, a
// date (midnight UTC) or RFC 3339. It returns a *FieldError (field
// expires_at) for anything else, for a duration of more than MaxKeyExpiryDays
// days, and for an expiry that is not later than now (ValidateKeyExpiry).
func ParseKeyExpiry(s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	var at *time.Time
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= MaxKeyExpiryDays {
			t := now.AddDate(0, 0, n)
			at = &t
		}
	}
	if d, err := time.ParseDuration(s); at == nil && err == nil {
		t := now.Add(d)
		at = &t
	}
	for _, layout := range []string{time.DateOnly, time.RFC3339} {
		if t, err := time.Parse(layout, s); at == nil && err == nil {
			at = &t
		}
	}
	if at == nil {
		return nil, &FieldError{"expires_at", fmt.Sprintf("%q is neither a duration (90d, 12h) nor a time (2027-01-31, 2027-01-31T12:00:00Z)", s)}
	}
	if err := ValidateKeyExpiry(at, now); err != nil {
		return nil, err
	}
	return at, nil
}

// MaxKeyExpiryDays bounds an expiry typed in days: a hundred years.
const MaxKeyExpiryDays = 36500

// ExpiredKeyError is a key presented after its expiry. It unwraps to
// ErrUnauthorized, so it is refused as a revoked key is; unlike other
// refusals it says why, since only whoever holds the whole key learns it.
type ExpiredKeyError struct{ ExpiredAt time.Time }

func (e *ExpiredKeyError) Error() string {
	return "API key expired at " + e.ExpiredAt.UTC().Format(time.RFC3339)
}

// Unwrap makes errors.Is(err, ErrUnauthorized) hold.
func (e *ExpiredKeyError) Unwrap() error { return ErrUnauthorized }

// ClientFault says, for the key's holder, that the key expired and when.
func (e *ExpiredKeyError) ClientFault() (field, reason string) {
	return "", "This API key expired at " + e.ExpiredAt.UTC().Format(time.RFC3339) + "; use another key of the tenant or ask its operator for a new one."
}

// NewKey makes a new key for the caller to store (after setting TenantID)
// and to show once as raw; k holds its ID, prefix and hash, never raw
// itself. err is not nil only when the system's random source fails.
func NewKey(test bool) (raw string, k Key, err error) {
	prefix, err := randomBase62(prefixLen)
	if err != nil {
		return "", Key{}, err
	}
	secret, err := randomBase62(secretLen)
	if err != nil {
		return "", Key{}, err
	}
	id, err := randomBase62(idLen)
	if err != nil {
		return "", Key{}, err
	}
	raw = liveMark
	if test {
		raw = testMark
	}
	raw += prefix + "_" + secret
	return raw, Key{ID: "key_" + id, Prefix: prefix, Hash: hashKey(raw), Test: test}, nil
}

// matches reports, in time independent of where they differ, whether raw
// is the key k was made from.
func (k Key) matches(raw string) bool {
	// raw has keyLen bytes (parseKey saw to it): copied to the stack, it
	// is hashed without an allocation.
	var b [keyLen]byte
	if len(raw) != keyLen {
		return false
	}
	copy(b[:], raw)
	sum := sha256.Sum256(b[:])
	return subtle.ConstantTimeCompare(sum[:], k.Hash) == 1
}

func hashKey(raw string) []byte {
	h := sha256.Sum256([]byte(raw))
	return h[:]
}

// parseKey returns the prefix of raw and whether it is a test key, or ok
// false unless raw has exactly the shape NewKey makes. Nothing longer than a
// key is looked at.
func parseKey(raw string) (prefix string, test, ok bool) {
	if len(raw) != keyLen {
		return "", false, false
	}
	switch raw[:len(liveMark)] {
	case liveMark:
	case testMark:
		test = true
	default:
		return "", false, false
	}
	rest := raw[len(liveMark):]
	if rest[prefixLen] != '_' || !isBase62(rest[:prefixLen]) || !isBase62(rest[prefixLen+1:]) {
		return "", false, false
	}
	return rest[:prefixLen], test, true
}

func isBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// randomBase62 returns n characters drawn uniformly from base62: bytes of
// 248 and above are thrown away, since 248 = 4 × 62 and keeping them would
// favour the first eight characters.
func randomBase62(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/4+8)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("random key: %w", err)
		}
		for _, b := range buf {
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out), nil
}
