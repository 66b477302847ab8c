package httpapi

import (
	"net"
	"net/http/httptest"
	"testing"
)

// TestIPExtractor: the address every per-IP layer keys a request by. IPv6
// clients are cut to their network (rotating through a /64 buys nothing),
// forwarding headers count only from trusted proxies, and a trusted proxy's
// unusable header leaves the client unresolved (""), which the gate keys as
// one shared bucket, never one per request.
func TestIPExtractor(t *testing.T) {
	t.Parallel()
	_, proxies, _ := net.ParseCIDR("10.0.0.0/8")
	trusted := []*net.IPNet{proxies}
	tests := []struct {
		name   string
		cfg    ClientIPConfig
		peer   string
		header map[string]string
		want   string
	}{
		{"IPv4 peer", ClientIPConfig{}, "203.0.113.7:5000", nil, "203.0.113.7"},
		{"IPv6 peer, /64", ClientIPConfig{}, "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:5000", nil, "2001:db8:1:2::"},
		{"another host of the same /64", ClientIPConfig{}, "[2001:db8:1:2::1]:5000", nil, "2001:db8:1:2::"},
		{"IPv6 peer, /56", ClientIPConfig{IPv6Prefix: 56}, "[2001:db8:1:2ff::1]:5000", nil, "2001:db8:1:200::"},
		{"IPv6 peer, /128", ClientIPConfig{IPv6Prefix: 128}, "[2001:db8::1]:5000", nil, "2001:db8::1"},
		{"IPv4-mapped peer", ClientIPConfig{}, "[::ffff:203.0.113.7]:5000", nil, "203.0.113.7"},
		{"untrusted peer's header ignored", ClientIPConfig{}, "203.0.113.7:5000", map[string]string{"X-Forwarded-For": "198.51.100.1"}, "203.0.113.7"},
		{"trusted proxy's X-Forwarded-For", ClientIPConfig{TrustedProxies: trusted}, "10.0.0.1:5000", map[string]string{"X-Forwarded-For": "2001:db8:9:9::5"}, "2001:db8:9:9::"},
		{"provider header", ClientIPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string]string{"X-Real-IP": "198.51.100.1"}, "198.51.100.1"},
		{"provider header, IPv6", ClientIPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string]string{"X-Real-IP": "2001:db8:5:5:1::"}, "2001:db8:5:5::"},
		{"provider header garbage", ClientIPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string]string{"X-Real-IP": "garbage"}, ""},
		{"provider header empty", ClientIPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string]string{"X-Real-IP": ""}, ""},
		{"provider header list", ClientIPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "10.0.0.1:5000", map[string]string{"X-Real-IP": "198.51.100.1, 198.51.100.2"}, ""},
		{"provider header from an untrusted peer", ClientIPConfig{TrustedProxies: trusted, Header: "x-real-ip"}, "203.0.113.7:5000", map[string]string{"X-Real-IP": "198.51.100.1"}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			if got := ipExtractor(tt.cfg)(r); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
