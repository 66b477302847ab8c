package signin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestLimiterKeysSurviveUpgrades: the dashboard's sign-in limits' counter
// keys (realm "admin") are what earlier versions wrote, so that a window's
// counts hold across an upgrade.
func TestLimiterKeysSurviveUpgrades(t *testing.T) {
	t.Parallel()
	pepper := []byte("test pepper")
	l := NewLimiter(nil, pepper, "admin")
	old := func(kind, value string) string {
		m := hmac.New(sha256.New, pepper)
		m.Write([]byte("tollgate admin sign-in\x00" + kind + "\x00" + value))
		return "admin-signin:" + kind + ":" + hex.EncodeToString(m.Sum(nil)[:20])
	}
	for _, tc := range []struct{ got, want string }{
		{l.IPRule("192.0.2.1").Key, old("ip", "192.0.2.1")},
		{l.AccountRule("2001:db8::/64", "ops@example.com").Key, old("account-ip", "ops@example.com\x002001:db8::")},
		{l.EverywhereRule("ops@example.com").Key, old("account", "ops@example.com")},
	} {
		if tc.got != tc.want {
			t.Errorf("key %s, want %s", tc.got, tc.want)
		}
	}
}

// TestLimiterKeysAddressesAndNetworks: the client IP Echo resolves may be an
// address or (IPv6 keyed by its /64) a network; each keys a bucket of its
// own, the same for one client however it is written, and never the bucket
// of unresolvable clients.
func TestLimiterKeysAddressesAndNetworks(t *testing.T) {
	t.Parallel()
	l := NewLimiter(nil, []byte("test pepper"), "admin")
	key := func(ip string) string { return l.IPRule(ip).Key }
	unknown := key("")
	for _, tc := range []struct {
		name string
		a, b string
		same bool
	}{
		{"IPv4-mapped is IPv4", "::ffff:192.0.2.1", "192.0.2.1", true},
		{"a /64 written as a network or its first address", "2001:db8:1:2::/64", "2001:db8:1:2::", true},
		{"a /64 with host bits", "2001:db8:1:2::7/64", "2001:db8:1:2::/64", true},
		{"a /128 is its address", "2001:db8::1/128", "2001:db8::1", true},
		{"two /64s", "2001:db8:1:2::/64", "2001:db8:1:3::/64", false},
		{"two addresses", "192.0.2.1", "192.0.2.2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ka, kb := key(tc.a), key(tc.b)
			if ka == unknown || kb == unknown {
				t.Fatalf("%q or %q keyed as an unresolvable client", tc.a, tc.b)
			}
			if (ka == kb) != tc.same {
				t.Fatalf("same bucket for %q and %q: %t, want %t", tc.a, tc.b, ka == kb, tc.same)
			}
		})
	}
	if key("junk") != unknown {
		t.Fatal("an unreadable address keyed apart from unresolvable clients")
	}
}
