// Package digest is Tollgate's one HMAC-SHA-256 helper: the digests that
// stand in for secrets and personal data everywhere Tollgate keeps or
// compares them (subjects and client addresses in counter keys, the emails
// and addresses of the sign-in limits, the MACs of signed links), and the
// keys derived from one secret for another use (Key). One keyed Digester per
// key reuses its hash state across calls, so a digest on the hot path costs
// no allocation of its own.
//
// digest imports only the standard library.
package digest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// Size is the length of a full digest in bytes.
const Size = sha256.Size

// Digester computes HMAC-SHA-256 under one key. It is safe for concurrent
// use.
type Digester struct {
	pool sync.Pool // of *state
}

// state is one keyed hash and the buffer its input is gathered in.
type state struct {
	h   hash.Hash
	in  []byte
	sum [Size]byte
}

// New returns a Digester keyed with key, which it keeps (callers must not
// change it afterwards).
func New(key []byte) *Digester {
	d := &Digester{}
	d.pool.New = func() any { return &state{h: hmac.New(sha256.New, key)} }
	return d
}

// AppendHex appends to dst the first n bytes (at most Size) of the HMAC of
// kind, a zero byte, and parts one after the other, hex-encoded: 2n
// characters. kind separates the uses of one key (a subject's digest is
// never an address's); the caller separates parts that could run into each
// other.
func (d *Digester) AppendHex(dst []byte, n int, kind string, parts ...string) []byte {
	return d.append(dst, n, true, kind, parts)
}

// Append is AppendHex without the hex: it appends the first n bytes (at
// most Size) of the HMAC themselves, for a MAC that is compared as bytes.
func (d *Digester) Append(dst []byte, n int, kind string, parts ...string) []byte {
	return d.append(dst, n, false, kind, parts)
}

func (d *Digester) append(dst []byte, n int, hexed bool, kind string, parts []string) []byte {
	s := d.pool.Get().(*state)
	s.in = append(s.in[:0], kind...)
	s.in = append(s.in, 0)
	for _, p := range parts {
		s.in = append(s.in, p...)
	}
	s.h.Reset()
	s.h.Write(s.in)
	sum := s.h.Sum(s.sum[:0])[:min(n, Size)]
	if hexed {
		dst = hex.AppendEncode(dst, sum)
	} else {
		dst = append(dst, sum...)
	}
	if cap(s.in) <= 4096 {
		d.pool.Put(s)
	}
	return dst
}

// Hex returns AppendHex(nil, n, kind, parts...) as a string.
func (d *Digester) Hex(n int, kind string, parts ...string) string {
	var buf [2 * Size]byte
	return string(d.AppendHex(buf[:0], n, kind, parts...))
}

// Key derives from secret the key of one use named by label: the whole
// HMAC-SHA-256 of label under secret (no zero byte after it, unlike a
// Digester's kind), Size bytes. One secret (the pepper, a session token) so
// yields independent keys, and none of them reveals the secret.
func Key(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}
