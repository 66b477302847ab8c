package webhooks

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// secretPrefix starts every signing secret, as the Standard Webhooks
// libraries expect: whsec_ and the base64 of the key.
const secretPrefix = "whsec_"

// secretBytes is the length of a signing key: 24 bytes, as Standard
// Webhooks suggests (between 24 and 64).
const secretBytes = 24

// Sealer seals signing secrets for the database and opens them to sign:
// AES-256-GCM under a key derived from the pepper, so that a copy of the
// database alone signs nothing. Safe for concurrent use.
type Sealer struct {
	aead  cipher.AEAD
	keyID []byte
}

// Sealed is a signing secret as the database keeps it.
type Sealed struct {
	// Box is the secret sealed.
	Box []byte
	// KeyID names the key that sealed it (Sealer.KeyID).
	KeyID []byte
}

// NewSealer returns a Sealer under key, 32 bytes (digest.Key of the
// pepper).
func NewSealer(key []byte) (*Sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("webhook secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("webhook secret key: %w", err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("tollgate webhook sealing key id"))
	return &Sealer{aead: aead, keyID: m.Sum(nil)[:keyIDBytes]}, nil
}

// keyIDBytes is the length of a key id.
const keyIDBytes = 8

// KeyID names the Sealer's key: 8 bytes of a MAC under it, which tell
// nothing of the key, the same on every instance with the same pepper.
// An instance claims only the deliveries of secrets sealed under its
// key (Store.Claim).
func (s *Sealer) KeyID() []byte { return s.keyID }

// newSecret returns a fresh signing key, sealed, and its whsec_ form to
// show the tenant once.
func (s *Sealer) newSecret() (sealed Sealed, shown string) {
	key := make([]byte, secretBytes)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	return Sealed{Box: s.seal(key), KeyID: s.keyID}, secretPrefix + base64.StdEncoding.EncodeToString(key)
}

func (s *Sealer) seal(key []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(key)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, key, nil)
}

// errSealed is a sealed secret that does not open: sealed under another
// pepper, or damaged.
var errSealed = errors.New("webhook secret does not open under this pepper")

func (s *Sealer) open(sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errSealed
	}
	key, err := s.aead.Open(nil, sealed[:n], sealed[n:], nil)
	if err != nil {
		return nil, errSealed
	}
	return key, nil
}

// Sign returns the webhook-signature header of one attempt per the
// Standard Webhooks specification: "v1," and the base64 of HMAC-SHA-256
// of "id.timestamp.body" under each key, space-separated (the current
// key first, then the previous one while it is still valid).
func Sign(id string, at time.Time, body []byte, keys ...[]byte) string {
	signed := make([]byte, 0, len(id)+len(body)+24)
	signed = append(signed, id...)
	signed = append(signed, '.')
	signed = strconv.AppendInt(signed, at.Unix(), 10)
	signed = append(signed, '.')
	signed = append(signed, body...)
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		m := hmac.New(sha256.New, k)
		m.Write(signed)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}
