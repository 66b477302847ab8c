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
}

// ipExtractor returns Echo's IP extractor for cfg. Echo's defaults trust
// loopback, link-local and private peers; Tollgate trusts only what is
// configured, so a caller can never choose its own bucket.
func ipExtractor(cfg ClientIPConfig) echo.IPExtractor {
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
			// A trusted proxy that sent no usable address: the client is
			// unknown, not the proxy.
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
