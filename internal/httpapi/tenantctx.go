package httpapi

import (
	"context"

	"github.com/labstack/echo/v4"
)

// tenantKey is the request-context key of the authenticated tenant's id.
type tenantKey struct{}

// setTenantID records id as the authenticated tenant of the request: the
// auth middleware calls it once the API key checks out.
func setTenantID(c echo.Context, id string) {
	r := c.Request()
	c.SetRequest(r.WithContext(context.WithValue(r.Context(), tenantKey{}, id)))
}

// tenantID returns the authenticated tenant's id, or "" when the request was
// not authenticated (a route outside the auth middleware).
func tenantID(c echo.Context) string {
	id, _ := c.Request().Context().Value(tenantKey{}).(string)
	return id
}
