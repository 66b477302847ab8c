package httpapi

import (
	"net"
	"net/http"
	"strings"
)

// hstsValue tells browsers to use only HTTPS for this host for a year. It
// leaves subdomains alone (no includeSubDomains) and asks for no preload:
// those commit hosts Tollgate does not know about.
const hstsValue = "max-age=31536000"

// edge sets Strict-Transport-Security on every answer to a request that
// came over HTTPS (overTLS). Browsers ignore the header over plain HTTP,
// which is why it is not sent there.

// overTLS reports whether r reached Tollgate over HTTPS: TLS ended by this
// server, a trusted proxy's X-Forwarded-Proto: https (believed only from
// proxies, like its forwarding headers), or secure (Config.SecureTransport).
func overTLS(r *http.Request, secure bool, proxies []*net.IPNet) bool {
	if r.TLS != nil || secure {
		return true
	}
	if len(proxies) == 0 || !strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && trusted(proxies, ip)
}
