package httpapi

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3 description of the tenant API. Tests
// validate real requests and answers of the handlers against it
// (openapi_check_test.go), so a change of shape must change it too.
//
//go:embed openapi.json
var openAPIDocument []byte

// registerOpenAPI serves the document at GET /v1/openapi.json, without
// authentication.
func registerOpenAPI(e *echo.Echo) {
	e.GET("/v1/openapi.json", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
	})
}
