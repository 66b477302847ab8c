package httpapi

import (
	"context"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/gate"
)

// PublicGate is the ceiling of the pages that take no API key
// (gate.Gate.Public): the client IP's bucket for a route, then the
// instance ceiling.
type PublicGate interface {
	Public(ctx context.Context, route string, ip netip.Addr, perMinute int64) gate.Verdict
}

// publicRoute is a kind of page without an API key and its per-IP limit.
type publicRoute struct {
	name      string
	perMinute int64
}

// Per-IP limits of the pages without an API key, per sliding minute. They
// are dampers against floods, sized for people, not machines: the
// dashboard's pages (each view or form post is one or two requests, the
// style sheet is cached for good) for a few operators behind one address;
// the billing link, each of whose uses asks Stripe for a portal session,
// far below that.
var (
	publicHome    = publicRoute{"home", 60}
	publicAdmin   = publicRoute{"admin", 300}
	publicBilling = publicRoute{"billing-portal", 30}
	publicOpenAPI = publicRoute{"openapi", 60}
	// A view of the API reference is the page and, until cached, its two
	// scripts.
	publicDocs  = publicRoute{"docs", 60}
	publicOther = publicRoute{"other", 60}
)

// publicRouteOf says which public route path is, or false for the paths
// that are not: /v1 (the gate's Admit counts those, with the tenant's key),
// and, as DESIGN says, health, readiness, metrics and the Stripe webhook,
// which are exempt from the instance ceiling (the webhook's bodies are
// still bounded per IP by bodyBudget).
func publicRouteOf(path string) (publicRoute, bool) {
	switch {
	case path == "/healthz", path == "/readyz", path == "/metrics", path == "/webhooks/stripe":
		return publicRoute{}, false
	case path == "/v1/openapi.json":
		return publicOpenAPI, true
	case path == "/v1" || strings.HasPrefix(path, "/v1/"):
		return publicRoute{}, false
	case path == "/":
		return publicHome, true
	case path == "/docs" || strings.HasPrefix(path, "/docs/"):
		return publicDocs, true
	case path == "/admin" || strings.HasPrefix(path, "/admin/"):
		return publicAdmin, true
	case strings.HasPrefix(path, "/billing/portal/"):
		return publicBilling, true
	}
	return publicOther, true
}

// publicRefusal answers c when it is a request to a page without an API key
// past its client IP's limit or the instance ceiling, with the same 429 as
// /v1's ceilings (Retry-After, X-RateLimit-Layer ip or instance, a problem
// body), and reports whether it did (with the answer's error).
func (a *api) publicRefusal(c echo.Context) (bool, error) {
	route, ok := publicRouteOf(c.Request().URL.Path)
	if !ok {
		return false, nil
	}
	v := a.cfg.Public.Public(c.Request().Context(), route.name, clientIP(c), route.perMinute)
	if v.Refusal != nil {
		return true, a.writeRefusal(c, v)
	}
	return false, nil
}
