package webhooks_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/webhooks"
)

// TestIPv4InsideIPv6: an IPv6 address that carries an IPv4 one (NAT64,
// 6to4) is judged by the IPv4 address it carries, so that a DNS64 answer
// for a public name still works; the forms whose IPv4 address cannot be
// told (local-use NAT64, Teredo) or that nothing should route (the
// deprecated IPv4-compatible ::a.b.c.d) are refused outright. Each is
// refused alike when an endpoint is registered and when a delivery
// connects.
func TestIPv4InsideIPv6(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		addr string
		// ok and okPrivate: accepted without and with allow-private.
		ok, okPrivate bool
	}{
		"NAT64 of loopback":              {"64:ff9b::7f00:1", false, true},
		"NAT64 of loopback, mixed":       {"64:ff9b::127.0.0.1", false, true},
		"NAT64 of a private address":     {"64:ff9b::a00:1", false, true},
		"NAT64 of CGNAT":                 {"64:ff9b::6440:1", false, true},
		"NAT64 of the metadata service":  {"64:ff9b::a9fe:a9fe", false, false},
		"NAT64 of link-local":            {"64:ff9b::169.254.1.1", false, false},
		"NAT64 of 0.0.0.0":               {"64:ff9b::", false, false},
		"NAT64 of broadcast":             {"64:ff9b::ffff:ffff", false, false},
		"NAT64 with a zone":              {"64:ff9b::a00:1%eth0", false, true},
		"NAT64 of a public address":      {"64:ff9b::808:808", true, true},
		"local-use NAT64, public inside": {"64:ff9b:1::808:808", false, false},
		"local-use NAT64, other bits":    {"64:ff9b:1:ffff::1", false, false},
		"6to4 of loopback":               {"2002:7f00:1::1", false, true},
		"6to4 of a private address":      {"2002:c0a8:101::1", false, true},
		"6to4 of the metadata service":   {"2002:a9fe:a9fe::", false, false},
		"6to4 of 0.0.0.0":                {"2002::1", false, false},
		"6to4 of a public address":       {"2002:808:808::1", true, true},
		"IPv4-compatible loopback":       {"::127.0.0.1", false, false},
		"IPv4-compatible public":         {"::808:808", false, false},
		"IPv4-compatible ::2":            {"::2", false, false},
		"unspecified ::":                 {"::", false, false},
		"loopback ::1":                   {"::1", false, true},
		"IPv4-translated loopback":       {"::ffff:0:127.0.0.1", false, true},
		"IPv4-translated private":        {"::ffff:0:a00:1", false, true},
		"IPv4-translated public":         {"::ffff:0:808:808", true, true},
		"Teredo":                         {"2001:0:4136:e378:8000:63bf:3fff:fdd2", false, false},
		"Teredo, short":                  {"2001::1", false, false},
		"documentation, beside Teredo":   {"2001:db8::1", true, true},
		"public IPv6":                    {"2606:4700:4700::1111", true, true},
		"IPv4-mapped loopback":           {"::ffff:127.0.0.1", false, true},
		"IPv4-mapped public":             {"::ffff:8.8.8.8", true, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, private := range []bool{false, true} {
				want := c.ok
				if private {
					want = c.okPrivate
				}
				u := "https://[" + strings.ReplaceAll(c.addr, "%", "%25") + "]/hooks"
				if _, err := webhooks.CheckURL(u, private); (err == nil) != want {
					t.Errorf("CheckURL(%q, allowPrivate %t): %v, want ok %t", u, private, err, want)
				} else if err != nil && !errors.Is(err, webhooks.ErrInvalid) {
					t.Errorf("CheckURL(%q): %v does not wrap ErrInvalid", u, err)
				}
				address := net.JoinHostPort(c.addr, "443")
				err := webhooks.Guard(private)("tcp6", address, nil)
				if (err == nil) != want {
					t.Errorf("guard(allowPrivate %t) on %s: %v, want ok %t", private, address, err, want)
				} else if err != nil && !errors.Is(err, webhooks.ErrRefusedAddress) {
					t.Errorf("guard on %s: %v does not wrap ErrRefusedAddress", address, err)
				}
			}
		})
	}
}

// TestNonCanonicalIPv4Hosts: a host that a resolver (inet_aton, or a
// browser's URL parser) may read as an IPv4 address written some other
// way than a dotted quad is refused at registration, whatever the address
// and with allow-private too; names that only begin with digits or hex
// letters are not. At connect time the guard is given addresses, never
// these forms: the dialer resolves them first.
func TestNonCanonicalIPv4Hosts(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		host string
		ok   bool
	}{
		"one number":             {"2130706433", false},
		"two parts":              {"127.1", false},
		"three parts":            {"10.0.1", false},
		"hex":                    {"0x7f000001", false},
		"hex, upper case":        {"0X7F000001", false},
		"hex part":               {"0x7f.0.0.1", false},
		"octal part":             {"0177.0.0.1", false},
		"leading zeros":          {"127.000.000.001", false},
		"trailing dot":           {"127.0.0.1.", false},
		"public, trailing dot":   {"8.8.8.8.", false},
		"five parts":             {"1.2.3.4.5", false},
		"out of range":           {"256.0.0.1", false},
		"a name ending in a num": {"hooks.example.123", false},
		"a name ending in hex":   {"hooks.example.0x1f", false},
		"a lone 0x":              {"example.0x", false},
		"a dotted quad":          {"8.8.8.8", true},
		"a name":                 {"hooks.example.com", true},
		"a name, trailing dot":   {"hooks.example.com.", true},
		"digits first":           {"1password.com", true},
		"hex letters":            {"cafe.be", true},
		"a numeric label":        {"123.example.com", true},
		"a label of 0x":          {"0x1f.example.com", true},
		"a last label of hex":    {"example.deadbeef", true},
		"digits then letters":    {"example.123abc", true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, private := range []bool{false, true} {
				u := "https://" + c.host + ":8443/hooks"
				_, err := webhooks.CheckURL(u, private)
				if (err == nil) != c.ok {
					t.Errorf("CheckURL(%q, allowPrivate %t): %v, want ok %t", u, private, err, c.ok)
					continue
				}
				var fe *webhooks.FieldError
				if err != nil && (!errors.As(err, &fe) || fe.Field != "url") {
					t.Errorf("CheckURL(%q): %v, want a FieldError for url", u, err)
				}
			}
		})
	}
}
