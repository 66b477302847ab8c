package digest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
)

// TestAppendHexIsHMAC: the digest is HMAC-SHA-256 of kind, a zero byte and
// the parts, the same from many goroutines reusing the pooled state.
func TestAppendHexIsHMAC(t *testing.T) {
	t.Parallel()
	key := []byte("digest-test-key-0123456789abcdef")
	want := func(in string, n int) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(in))
		return hex.EncodeToString(m.Sum(nil)[:n])
	}
	d := New(key)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				subject := string(rune('a'+g)) + string(rune('a'+i%26))
				got := string(d.AppendHex([]byte("p:"), 16, "subject", "tenant", ":", subject))
				if w := "p:" + want("subject\x00tenant:"+subject, 16); got != w {
					t.Errorf("AppendHex = %s, want %s", got, w)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, w := d.Hex(Size, "ip", "203.0.113.7"), want("ip\x00203.0.113.7", Size); got != w {
		t.Errorf("Hex = %s, want %s", got, w)
	}
	if a, b := d.Hex(16, "ip", "x"), d.Hex(16, "subject", "x"); a == b {
		t.Error("two kinds, one digest")
	}
}

func BenchmarkAppendHex(b *testing.B) {
	d := New([]byte("digest-test-key-0123456789abcdef"))
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = d.AppendHex(buf[:0], 16, "subject", "0b6f4b7e-4c42-4f8e-9d83-2f0b8b6e7c11", ":", "login", ":", "alice@example.com")
	}
}

// TestAppendAndKey: Append is AppendHex's bytes; Key is the HMAC of the
// label alone.
func TestAppendAndKey(t *testing.T) {
	t.Parallel()
	key := []byte("digest-test-key-0123456789abcdef")
	d := New(key)
	raw := d.Append([]byte{1}, 16, "link", "t1", "\x00", "99")
	if got, want := hex.EncodeToString(raw[1:]), d.Hex(16, "link", "t1", "\x00", "99"); raw[0] != 1 || got != want {
		t.Errorf("Append = %x, want 01 then %s", raw, want)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("a label"))
	if got, want := Key(key, "a label"), m.Sum(nil); !hmac.Equal(got, want) || len(got) != Size {
		t.Errorf("Key = %x, want %x", got, want)
	}
}
