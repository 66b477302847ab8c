// Package echomw is Tollgate's rate-limit middleware for Echo apps: the
// net/http middleware of package client (same keys, headers, 429 and fail
// modes) as an echo.MiddlewareFunc. It is a package of its own so that
// apps on net/http alone do not pull in Echo.
package echomw

import (
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/client"
)

// Middleware returns Echo middleware that checks every request against
// cfg.Policy with c, as client.Middleware does: allowed requests go on
// with RateLimit-Policy and RateLimit headers, refused ones are answered
// 429 with Retry-After, when Tollgate is unavailable (an answer that is
// not Tollgate's and a redirect included) the client's FailMode decides
// (FailClosed answers 503), and when Tollgate refuses the
// check as wrong (an unknown or revoked key, a deleted policy) the request
// is answered 500. Key requests by client address with client.ByIP, given
// the same trusted proxies as the Echo app's IPExtractor. It fails as
// client.Middleware does, which reads the policy from Tollgate once.
func Middleware(c *client.Client, cfg client.MiddlewareConfig) (echo.MiddlewareFunc, error) {
	mw, err := client.Middleware(c, cfg)
	if err != nil {
		return nil, err
	}
	return echo.WrapMiddleware(mw), nil
}
