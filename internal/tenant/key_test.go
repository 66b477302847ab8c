package tenant

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

var keyShape = regexp.MustCompile(`^tg_(live|test)_([0-9A-Za-z]{12})_[0-9A-Za-z]{32}$`)

func TestNewKey(t *testing.T) {
	t.Parallel()
	for _, test := range []bool{false, true} {
		raw, k, err := NewKey(test)
		if err != nil {
			t.Fatal(err)
		}
		m := keyShape.FindStringSubmatch(raw)
		if m == nil {
			t.Fatalf("NewKey(%v) = %q, not of the form tg_live|test_<12>_<32>", test, raw)
		}
		if want := map[bool]string{false: "live", true: "test"}[test]; m[1] != want {
			t.Errorf("NewKey(%v) mode: got %s, want %s", test, m[1], want)
		}
		if k.Prefix != m[2] || k.Test != test {
			t.Errorf("NewKey(%v): key %+v does not match raw %q", test, k, raw)
		}
		if !strings.HasPrefix(k.ID, "key_") || len(k.ID) != len("key_")+idLen {
			t.Errorf("NewKey(%v) ID %q: want key_ and %d characters", test, k.ID, idLen)
		}
		if !k.matches(raw) {
			t.Errorf("NewKey(%v): the key does not match its own raw form", test)
		}
		if bytes.Contains(k.Hash, []byte(raw)) || len(k.Hash) != 32 {
			t.Errorf("NewKey(%v): Hash is %d bytes, want a 32-byte SHA-256", test, len(k.Hash))
		}
		prefix, gotTest, ok := parseKey(raw)
		if !ok || prefix != k.Prefix || gotTest != test {
			t.Errorf("parseKey(NewKey(%v)) = %q, %v, %v; want %q, %v, true", test, prefix, gotTest, ok, k.Prefix, test)
		}
	}
}

func TestNewKeyIsRandom(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		raw, k, err := NewKey(false)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{raw, k.Prefix, k.ID} {
			if seen[s] {
				t.Fatalf("NewKey repeated %q", s)
			}
			seen[s] = true
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	const (
		prefix = "AbCdEf012345"
		secret = "0123456789abcdefghijABCDEFGHIJxy"
	)
	cases := []struct {
		name       string
		raw        string
		wantOK     bool
		wantTest   bool
		wantPrefix string
	}{
		{"live", "tg_live_" + prefix + "_" + secret, true, false, prefix},
		{"test", "tg_test_" + prefix + "_" + secret, true, true, prefix},
		{"empty", "", false, false, ""},
		{"garbage", "hello", false, false, ""},
		{"bearer scheme left in", "Bearer tg_live_" + prefix + "_" + secret, false, false, ""},
		{"wrong mode", "tg_prod_" + prefix + "_" + secret, false, false, ""},
		{"upper-case mark", "TG_LIVE_" + prefix + "_" + secret, false, false, ""},
		{"other vendor", "sk_live_" + prefix + "_" + secret, false, false, ""},
		{"secret one short", "tg_live_" + prefix + "_" + secret[1:], false, false, ""},
		{"secret one long", "tg_live_" + prefix + "_" + secret + "z", false, false, ""},
		{"too long", "tg_live_" + prefix + "_" + strings.Repeat("a", 10_000), false, false, ""},
		{"separator moved", "tg_live_" + prefix[:11] + "_" + prefix[11:] + secret, false, false, ""},
		{"no separator", "tg_live_" + prefix + "0" + secret, false, false, ""},
		{"symbol in prefix", "tg_live_AbCdEf01234-_" + secret, false, false, ""},
		{"symbol in secret", "tg_live_" + prefix + "_" + secret[:31] + "+", false, false, ""},
		{"space in secret", "tg_live_" + prefix + "_" + secret[:31] + " ", false, false, ""},
		{"trailing newline", "tg_live_" + prefix + "_" + secret[:31] + "\n", false, false, ""},
		{"non-ASCII", "tg_live_" + prefix + "_" + secret[:30] + "é", false, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			prefix, test, ok := parseKey(c.raw)
			if ok != c.wantOK || test != c.wantTest || prefix != c.wantPrefix {
				t.Errorf("parseKey(%.40q) = %q, %v, %v; want %q, %v, %v", c.raw, prefix, test, ok, c.wantPrefix, c.wantTest, c.wantOK)
			}
		})
	}
}

func TestKeyMatches(t *testing.T) {
	t.Parallel()
	raw, k, err := NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(raw)
	flipped[len(flipped)-1] ^= 1
	cases := []struct {
		name string
		raw  string
		want bool
	}{
		{"itself", raw, true},
		{"another key", other, false},
		{"last character changed", string(flipped), false},
		{"test form of the same secret", "tg_test_" + raw[len("tg_live_"):], false},
		{"empty", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := k.matches(c.raw); got != c.want {
				t.Errorf("matches: got %v, want %v", got, c.want)
			}
		})
	}
}

func TestParseKeyExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	at := func(t time.Time) *time.Time { return &t }
	for _, tc := range []struct {
		name, in string
		want     *time.Time
		err      string
	}{
		{"empty is never", "", nil, ""},
		{"days", "90d", at(now.AddDate(0, 0, 90)), ""},
		{"hours", "12h", at(now.Add(12 * time.Hour)), ""},
		{"a date is midnight UTC", "2027-01-31", at(time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)), ""},
		{"RFC 3339", "2027-01-31T12:00:00+01:00", at(time.Date(2027, 1, 31, 11, 0, 0, 0, time.UTC)), ""},
		{"in the past", "-1h", nil, "expires_at: must be in the future"},
		{"now is not the future", "0s", nil, "expires_at: must be in the future"},
		{"a past date", "2001-01-01", nil, "expires_at: must be in the future"},
		{"words", "soon", nil, `expires_at: "soon" is neither a duration`},
		{"too many days", "99999999d", nil, "is neither a duration"},
		{"zero days", "0d", nil, "is neither a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseKeyExpiry(tc.in, now)
			switch {
			case tc.err != "":
				var fe *FieldError
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &fe) || fe.Field != "expires_at" {
					t.Errorf("ParseKeyExpiry(%q) = %v, %v; want a field error of expires_at saying %q", tc.in, got, err, tc.err)
				}
			case err != nil:
				t.Errorf("ParseKeyExpiry(%q): %v", tc.in, err)
			case (got == nil) != (tc.want == nil) || got != nil && !got.Equal(*tc.want):
				t.Errorf("ParseKeyExpiry(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
