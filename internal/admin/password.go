package admin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
)

// Argon2Params are the cost of an argon2id hash. They are written into each
// hash, so that raising them later leaves old hashes verifiable.
type Argon2Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen uint32 // bytes
	KeyLen  uint32 // bytes
}

// DefaultArgon2 is OWASP's argon2id recommendation (19 MiB, two passes, one
// thread): about 25 ms on one core here, a cost that sign-ins bear and
// password guessing does not.
var DefaultArgon2 = Argon2Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// errMalformedHash is a stored hash that is not an argon2id PHC string.
var errMalformedHash = errors.New("malformed argon2id hash")

// HashPassword returns the argon2id hash of password under p, in the PHC
// string format: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>, base64
// without padding. It refuses a password that ValidatePassword refuses.
func HashPassword(password string, p Argon2Params) (string, error) {
	if err := ValidatePassword(password); err != nil {
		return "", err
	}
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

// CheckPassword reports whether password is the one encoded hashes, in time
// that does not depend on where they differ. An error means encoded is not
// an argon2id hash this package can read.
func CheckPassword(encoded, password string) (bool, error) {
	p, salt, key, err := decodeHash(encoded)
	if err != nil {
		return false, err
	}
	if len(password) > MaxPasswordLen {
		return false, nil
	}
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

// decodeHash reads a PHC argon2id string. Costs beyond what this package
// would ever write are refused, so that a tampered row cannot make a
// sign-in allocate gigabytes.
func decodeHash(s string) (Argon2Params, []byte, []byte, error) {
	var p Argon2Params
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, errMalformedHash
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return p, nil, nil, fmt.Errorf("%w: version %q", errMalformedHash, parts[2])
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil {
		return p, nil, nil, fmt.Errorf("%w: parameters %q", errMalformedHash, parts[3])
	}
	if p.Memory < 8 || p.Memory > 1<<20 || p.Time < 1 || p.Time > 16 || p.Threads < 1 {
		return p, nil, nil, fmt.Errorf("%w: parameters %q out of range", errMalformedHash, parts[3])
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return p, nil, nil, fmt.Errorf("%w: salt", errMalformedHash)
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return p, nil, nil, fmt.Errorf("%w: key", errMalformedHash)
	}
	return p, salt, key, nil
}

var (
	decoyOnce sync.Once
	decoy     string
)

// CheckDecoy spends the time of a CheckPassword against a hash that matches
// nothing: sign-in calls it for an unknown email, so that the answer's
// timing does not tell which addresses have accounts.
func CheckDecoy(password string) {
	decoyOnce.Do(func() {
		decoy, _ = HashPassword("decoy password that signs no one in", DefaultArgon2)
	})
	CheckPassword(decoy, password)
}
