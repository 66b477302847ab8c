package client

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestByIP: the key the middleware counts a request by, resolved as
// Tollgate resolves its own clients. IPv6 clients are cut to their network,
// forwarding headers count only from trusted proxies, X-Forwarded-For is
// walked from the right past trusted hops, and a trusted proxy's unusable
// provider header leaves the client unresolved (""), which the middleware
// counts as Unkeyed.
func TestByIP(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name   string
		cfg    IPConfig
		peer   string
		header map[string][]string
		want   string
	}{
		{"IPv4 peer", IPConfig{}, "203.0.113.7:5000", nil, "203.0.113.7"},
		{"IPv6 peer, /64", IPConfig{}, "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:5000", nil, "2001:db8:1:2::"},
		{"another host of the same /64", IPConfig{}, "[2001:db8:1:2::1]:5000", nil, "2001:db8:1:2::"},
		{"IPv6 peer, /56", IPConfig{IPv6Prefix: 56}, "[2001:db8:1:2ff::1]:5000", nil, "2001:db8:1:200::"},
		{"IPv6 peer, /128", IPConfig{IPv6Prefix: 128}, "[2001:db8::1]:5000", nil, "2001:db8::1"},
		{"IPv6 peer with a zone", IPConfig{IPv6Prefix: 128}, "[fe80::1%eth0]:5000", nil, "fe80::1"},
		{"IPv4-mapped peer", IPConfig{}, "[::ffff:203.0.113.7]:5000", nil, "203.0.113.7"},
		{"peer without a port", IPConfig{}, "203.0.113.7", nil, "203.0.113.7"},
		{"unparseable peer", IPConfig{}, "@unix", nil, ""},
		{"no trusted proxy: X-Forwarded-For ignored", IPConfig{}, "203.0.113.7:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "203.0.113.7"},
		{"untrusted peer's X-Forwarded-For ignored", IPConfig{TrustedProxies: trusted}, "203.0.113.7:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "203.0.113.7"},
		{"trusted proxy without X-Forwarded-For", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", nil, "10.0.0.1"},
		{"trusted proxy's X-Forwarded-For", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "198.51.100.1"},
		{"trusted proxy's X-Forwarded-For, IPv6", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"2001:db8:9:9::5"}}, "2001:db8:9:9::"},
		{"a client's own X-Forwarded-For entries are left of the proxy's", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4, 198.51.100.1"}}, "198.51.100.1"},
		{"trusted hops skipped from the right", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4, 198.51.100.1, 10.0.0.9, 10.0.0.8"}}, "198.51.100.1"},
		{"several X-Forwarded-For lines", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4", "198.51.100.1, 10.0.0.9"}}, "198.51.100.1"},
		{"bracketed IPv6 hop", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[2001:db8::1]"}}, "2001:db8::"},
		{"garbage hop: the peer", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1, garbage"}}, "10.0.0.1"},
		{"every hop trusted: the farthest", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"10.0.0.3, 10.0.0.2"}}, "10.0.0.3"},
		{"hop with a port", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1:4711"}}, "198.51.100.1"},
		{"IPv6 hop with a port", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[2001:db8:3:3::1]:4711"}}, "2001:db8:3:3::"},
		{"hop with a zone", IPConfig{TrustedProxies: trusted, IPv6Prefix: 128}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"fe80::1%eth0"}}, "fe80::1"},
		{"bracketed hop with a zone", IPConfig{TrustedProxies: trusted, IPv6Prefix: 128}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[fe80::1%eth0]"}}, "fe80::1"},
		{"hop with a zone and a port", IPConfig{TrustedProxies: trusted, IPv6Prefix: 128}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[fe80::1%eth0]:4711"}}, "fe80::1"},
		{"IPv4-mapped hop with a port", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[::ffff:198.51.100.1]:4711"}}, "198.51.100.1"},
		{"trusted hop with a port skipped", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1:1, 10.0.0.9:443, [::ffff:10.0.0.8]:80"}}, "198.51.100.1"},
		{"every hop trusted, with ports: the farthest", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"10.0.0.3:1, 10.0.0.2:2"}}, "10.0.0.3"},
		{"port out of range: garbage", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1:99999"}}, "10.0.0.1"},
		{"named port: garbage", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1:http"}}, "10.0.0.1"},
		{"empty port: garbage", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1:"}}, "10.0.0.1"},
		{"unclosed bracket: garbage", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[2001:db8::1"}}, "10.0.0.1"},
		{"bracketed IPv4: garbage", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"[198.51.100.1]:80"}}, "10.0.0.1"},
		{"empty hop: garbage", IPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.1, "}}, "10.0.0.1"},
		{"provider header with a port", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string][]string{"X-Real-IP": {"198.51.100.1:4711"}}, "198.51.100.1"},
		{"provider header, IPv6 with a zone and a port", IPConfig{TrustedProxies: trusted, Header: "x-real-ip", IPv6Prefix: 128}, "10.0.0.1:5000", map[string][]string{"X-Real-IP": {"[fe80::2%en0]:4711"}}, "fe80::2"},
		{"provider header", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string][]string{"X-Real-IP": {"198.51.100.1"}}, "198.51.100.1"},
		{"provider header, IPv6", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string][]string{"X-Real-IP": {"2001:db8:5:5:1::"}}, "2001:db8:5:5::"},
		{"provider header beats X-Forwarded-For", IPConfig{TrustedProxies: trusted, Header: "cf-connecting-ip"}, "10.0.0.1:5000",
			map[string][]string{"Cf-Connecting-Ip": {"198.51.100.1"}, "X-Forwarded-For": {"198.51.100.2"}}, "198.51.100.1"},
		{"provider header garbage", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string][]string{"X-Real-IP": {"garbage"}}, ""},
		{"provider header missing", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", nil, ""},
		{"provider header list", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string][]string{"X-Real-IP": {"198.51.100.1, 198.51.100.2"}}, ""},
		{"provider header from an untrusted peer", IPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "203.0.113.7:5000", map[string][]string{"X-Real-IP": {"198.51.100.1"}}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			for k, vs := range tt.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			if got := ByIP(tt.cfg)(r); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
