package httpapi

import (
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// hstsValue tells browsers to use only HTTPS for this host for a year. It
// leaves subdomains alone (no includeSubDomains) and asks for no preload:
// those commit hosts Tollgate does not know about.
const hstsValue = "max-age=31536000"

// strictTransport sets Strict-Transport-Security on every answer to a
// request that came over HTTPS: TLS ended by this server, a trusted proxy's
// X-Forwarded-Proto: https (believed only from cfg.ClientIP.TrustedProxies,
// like its forwarding headers), or cfg.SecureTransport. Browsers ignore the
// header over plain HTTP, which is why it is not sent there.
func strictTransport(cfg Config) echo.MiddlewareFunc {
	secure, proxies := cfg.SecureTransport, cfg.ClientIP.TrustedProxies
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if overTLS(c.Request(), secure, proxies) {
				c.Response().Header().Set("Strict-Transport-Security", hstsValue)
			}
			return next(c)
		}
	}
}

// overTLS reports whether r reached Tollgate over HTTPS.
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
