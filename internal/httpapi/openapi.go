package httpapi

import (
	"crypto/rand"
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tollgate/tollgate/web"
)

// openAPIDocument is the OpenAPI 3 description of the tenant API. Tests
// validate real requests and answers of the handlers against it
// (openapi_check_test.go), so a change of shape must change it too; `make
// test` lints it with Redocly's recommended rules.
//
//go:embed openapi.json
var openAPIDocument []byte

// apiDocsPolicy is the Content-Security-Policy of the API reference, less
// its style nonce: scripts and the document from Tollgate only, images from
// Tollgate or inline (Redoc draws its link icons as data: URLs), no inline
// script, no frames, no forms. The inline styles allowed are those with the
// answer's nonce (Redoc's styled components, given it by the init script)
// and, by their SHA-256, the one style element Redoc's bundle adds as it
// loads, before it can be given the nonce (the scroll bars' sheet, which it
// adds empty, then fills). A new Redoc whose sheet differs shows in the
// browser suite as a refused inline style whose hash Chromium reports.
const apiDocsPolicy = "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'; " +
	"style-src 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=' 'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc=' 'nonce-"

// registerOpenAPI serves, without authentication, the document at GET
// /v1/openapi.json and its rendered reference at GET /docs (Redoc, with its
// scripts under /docs/).
func registerOpenAPI(e *echo.Echo) {
	e.GET("/v1/openapi.json", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
	})
	e.GET("/docs", func(c echo.Context) error {
		nonce := rand.Text()
		h := c.Response().Header()
		h.Set("Content-Security-Policy", apiDocsPolicy+nonce+"'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		// A nonce is good for one answer: the page is never reused.
		h.Set(echo.HeaderCacheControl, "no-store")
		h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
		c.Response().WriteHeader(http.StatusOK)
		return web.APIDocs(nonce).Render(c.Request().Context(), c.Response())
	})
	// Redoc's bundle is about 1 MB, a third of that compressed; its address
	// changes with its content, so a browser fetches it once.
	gzip := middleware.Gzip()
	for _, s := range []web.Script{web.RedocScript, web.APIDocsScript} {
		e.GET(s.Path, func(c echo.Context) error {
			h := c.Response().Header()
			h.Set(echo.HeaderCacheControl, "public, max-age=31536000, immutable")
			h.Set("X-Content-Type-Options", "nosniff")
			return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", s.Body)
		}, gzip)
	}
}
