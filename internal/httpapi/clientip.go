package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// ClientIPConfig says whom to believe about a client's address.
type ClientIPConfig struct {
	// TrustedProxies are the peers whose forwarding headers are believed.
	// Empty: the TCP peer is the client, whatever the headers say.
	TrustedProxies []*net.IPNet
	// Header, when set, names the one provider header (cf-connecting-ip,
	// fly-client-ip, x-real-ip, true-client-ip) that trusted proxies set;
	// otherwise X-Forwarded-For is walked from the right past trusted hops.
	Header string
	// IPv6Prefix is the length of the IPv6 network a client is keyed by
	// (default DefaultIPv6Prefix): one host holds a whole /64 and can
	// rotate through it at will, so a per-address bucket would be no limit.
	IPv6Prefix int
}

// DefaultIPv6Prefix is ClientIPConfig.IPv6Prefix's default: the /64 that
// one subscriber line or one cloud instance is given.
const DefaultIPv6Prefix = 64

// ipExtractor returns Echo's IP extractor for cfg: the client's address as
// every per-IP layer keys it (the gate's, the dashboard's sign-in limiter),
// an IPv6 address cut to its network (cfg.IPv6Prefix), or "" when it cannot
// be resolved.
func ipExtractor(cfg ClientIPConfig) echo.IPExtractor {
	bits := cfg.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = DefaultIPv6Prefix
	}
	resolve := resolver(cfg)
	return func(r *http.Request) string {
		s := resolve(r)
		a, err := netip.ParseAddr(s)
		if err != nil {
			return ""
		}
		a = a.Unmap().WithZone("")
		if a.Is6() {
			a = netip.PrefixFrom(a, bits).Masked().Addr()
		}
		// Most addresses arrive in the form they are keyed by: hand back
		// the string as it came rather than a new one.
		var buf [48]byte
		if string(a.AppendTo(buf[:0])) == s {
			return s
		}
		return a.String()
	}
}

// resolver returns the function that finds a request's client address.
// Echo's defaults trust loopback, link-local and private peers; Tollgate
// trusts only what is configured, so a caller can never choose its own
// bucket.
func resolver(cfg ClientIPConfig) echo.IPExtractor {
	if len(cfg.TrustedProxies) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range cfg.TrustedProxies {
		opts = append(opts, echo.TrustIPRange(n))
	}
	if cfg.Header == "" {
		return echo.ExtractIPFromXFFHeader(opts...)
	}
	header := http.CanonicalHeaderKey(cfg.Header)
	direct := echo.ExtractIPDirect()
	return func(r *http.Request) string {
		peer := direct(r)
		ip := net.ParseIP(peer)
		if ip == nil || !trusted(cfg.TrustedProxies, ip) {
			return peer
		}
		v := strings.TrimSpace(r.Header.Get(header))
		if net.ParseIP(v) == nil {
			// A trusted proxy that sent no usable address (none, garbage,
			// a list): the client is unknown, not the proxy, and the gate
			// puts every such request in one shared bucket.
			return ""
		}
		return v
	}
}

func trusted(nets []*net.IPNet, ip net.IP) bool {
	for _, n := range nets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// clientIP is the request's resolved client address; the zero Addr when it
// cannot be resolved.
func clientIP(c echo.Context) netip.Addr {
	a, err := netip.ParseAddr(c.RealIP())
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
