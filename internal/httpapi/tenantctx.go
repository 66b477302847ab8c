package httpapi

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/tenant"
)

// tenantKey is the request-context key of the authenticated tenant's id.
type tenantKey struct{}

// setTenantID records id as the authenticated tenant of the request: the
// auth middleware calls it once the API key checks out.
func setTenantID(c echo.Context, id string) {
	r := c.Request()
	c.SetRequest(r.WithContext(context.WithValue(r.Context(), tenantKey{}, id)))
}

// apiKeyCtx is the request-context key of the authenticated API key.
type apiKeyCtx struct{}

// setAPIKey records k as the request's API key: the auth middleware calls
// it beside setTenantID.
func setAPIKey(c echo.Context, k tenant.Key) {
	r := c.Request()
	c.SetRequest(r.WithContext(context.WithValue(r.Context(), apiKeyCtx{}, k)))
}

// apiKey returns the request's API key (its id, and whether it is a test
// key), or the zero Key outside the auth middleware.
func apiKey(c echo.Context) tenant.Key {
	k, _ := c.Request().Context().Value(apiKeyCtx{}).(tenant.Key)
	return k
}

// tenantID returns the authenticated tenant's id, or "" when the request was
// not authenticated (a route outside the auth middleware).
func tenantID(c echo.Context) string {
	id, _ := c.Request().Context().Value(tenantKey{}).(string)
	return id
}
