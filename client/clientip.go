package client

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// IPConfig says whom the middleware believes about a client's address. It
// resolves addresses as Tollgate does for its own per-IP ceilings.
type IPConfig struct {
	// TrustedProxies are the peers (load balancers, reverse proxies) whose
	// forwarding headers are believed. Empty: the TCP peer is the client,
	// whatever the headers say, so a client can never choose its own key.
	TrustedProxies []netip.Prefix
	// Header, when set, names the one header that trusted proxies set to
	// the client's address (cf-connecting-ip, fly-client-ip, x-real-ip,
	// true-client-ip). Otherwise X-Forwarded-For is walked from the right
	// past trusted hops.
	Header string
	// IPv6Prefix is the length of the IPv6 network a client is keyed by
	// (default 64): one host holds a whole /64 and can rotate through it
	// at will, so a per-address key would be no limit.
	IPv6Prefix int
}

// ByIP keys a request by its client's address, as cfg resolves it: an
// IPv4 address, or the IPv6 network of cfg.IPv6Prefix bits (such as
// "2001:db8:1:2::"). A forwarding hop may carry a port or a zone, as some
// proxies write it ("192.0.2.1:4711", "[2001:db8::1]:4711",
// "fe80::1%eth0"): the key is its address. A request whose address cannot
// be resolved (a trusted proxy sent none, or garbage) gets the empty key,
// which the middleware counts under Unkeyed.
func ByIP(cfg IPConfig) KeyFunc {
	bits := cfg.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = 64
	}
	header := http.CanonicalHeaderKey(strings.TrimSpace(cfg.Header))
	proxies := make([]netip.Prefix, 0, len(cfg.TrustedProxies))
	for _, p := range cfg.TrustedProxies {
		if p.IsValid() {
			proxies = append(proxies, p.Masked())
		}
	}
	return func(r *http.Request) string {
		a, ok := clientAddr(r, proxies, header)
		if !ok {
			return ""
		}
		if a.Is6() {
			a = netip.PrefixFrom(a, bits).Masked().Addr()
		}
		return a.String()
	}
}

// clientAddr resolves r's client address: the TCP peer unless it is a
// trusted proxy, then the provider header or the first untrusted hop of
// X-Forwarded-For from the right (Echo's rule, which Tollgate uses).
func clientAddr(r *http.Request, proxies []netip.Prefix, header string) (netip.Addr, bool) {
	peer, ok := parseAddr(hostOf(r.RemoteAddr))
	if !ok {
		return netip.Addr{}, false
	}
	if len(proxies) == 0 || !trusted(proxies, peer) {
		return peer, true
	}
	if header != "" {
		// A trusted proxy that sent no usable address (none, garbage, a
		// list) leaves the client unknown; it is not the proxy.
		return parseHop(r.Header.Get(header))
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		return peer, true
	}
	hops := strings.Split(strings.Join(xff, ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			// A hop that is not an address: nothing left of it can be
			// believed, and the last believable hop is the peer.
			return peer, true
		}
		if !trusted(proxies, a) {
			return a, true
		}
	}
	// Every hop is trusted: the farthest is the best guess.
	a, _ := parseHop(hops[0])
	return a, true
}

// parseHop parses one forwarding hop as proxies write it: an address
// ("192.0.2.1", "2001:db8::1", "fe80::1%eth0"), an address and a port
// ("192.0.2.1:4711", "[2001:db8::1]:4711", "[fe80::1%eth0]:4711"), or a
// bracketed IPv6 address ("[2001:db8::1]"). A port, like a zone, names no
// other client and is dropped. Anything else (a name, a port out of range,
// a bracketed IPv4 address) is not an address.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, ok := parseAddr(s); ok {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		// ParseAddrPort takes "[::ffff:192.0.2.1]:80" and "1.2.3.4:0".
		return ap.Addr().Unmap().WithZone(""), true
	}
	if inner, ok := strings.CutPrefix(s, "["); ok {
		if inner, ok := strings.CutSuffix(inner, "]"); ok {
			if a, err := netip.ParseAddr(inner); err == nil && a.Is6() {
				return a.Unmap().WithZone(""), true
			}
		}
	}
	return netip.Addr{}, false
}

// hostOf is the host of a host:port RemoteAddr, or the whole of it when it
// has no port.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// parseAddr parses an IP address without its zone, IPv4-mapped IPv6
// addresses as IPv4.
func parseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func trusted(proxies []netip.Prefix, a netip.Addr) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
