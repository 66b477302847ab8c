package httpapi

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// EnvoyService is what the envoy domain routes call: envoyconf.Service (which
// also invalidates this instance's envoyconf.Catalog) satisfies it. Errors
// wrap the policy package's sentinels, and a file Parse refuses is an
// *envoyconf.Error.
type EnvoyService interface {
	Put(ctx context.Context, tenantID, domain string, source []byte) (envoyconf.Domain, error)
	Get(ctx context.Context, tenantID, domain string) (envoyconf.Domain, error)
	List(ctx context.Context, tenantID string) ([]envoyconf.Domain, error)
	Delete(ctx context.Context, tenantID, domain string) error
}

// registerEnvoy adds the routes of the tenant's envoyproxy/ratelimit files
// to g, the group mounted at /v1/envoy behind the auth middleware (which
// sets the tenant read by tenantID), as registerPolicies does for policies.
func registerEnvoy(g *echo.Group, svc EnvoyService) {
	h := envoyHandlers{svc: svc}
	g.GET("/domains", h.list)
	g.PUT("/domains/:domain", h.put)
	g.GET("/domains/:domain", h.get)
	g.DELETE("/domains/:domain", h.delete)
}

type envoyHandlers struct {
	svc EnvoyService
}

// yamlTypes are the media types a file is uploaded as: RFC 9512's, and the
// two older ones tools still send.
var yamlTypes = []string{"application/yaml", "text/yaml", "application/x-yaml"}

func (h envoyHandlers) list(c echo.Context) error {
	ds, err := h.svc.List(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []envoyconf.Domain{}
	}
	return c.JSON(http.StatusOK, map[string][]envoyconf.Domain{"domains": ds})
}

// put stores the body, the file as the tenant has it, under the domain of
// the path. The body is refused before it is read when it is not sent as
// YAML (415), and when it is longer than a file may be (413) once
// envoyconf.MaxSource+1 bytes are read: the body budget reserved
// maxOtherBody for it, which is that.
func (h envoyHandlers) put(c echo.Context) error {
	domain, err := envoyDomain(c)
	if err != nil {
		return err
	}
	if !isYAML(c.Request().Header.Get(echo.HeaderContentType)) {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType,
			"The body is the configuration file as YAML: send it with Content-Type application/yaml (text/yaml and application/x-yaml are taken too).")
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, envoyconf.MaxSource+1))
	if err != nil {
		return &badRequest{reason: "the request body could not be read"}
	}
	if len(body) > envoyconf.MaxSource {
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge,
			fmt.Sprintf("A configuration file is at most %d bytes.", envoyconf.MaxSource))
	}
	d, err := h.svc.Put(c.Request().Context(), tenantID(c), domain, body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

// get answers the file as it was uploaded, byte for byte.
func (h envoyHandlers) get(c echo.Context) error {
	domain, err := envoyDomain(c)
	if err != nil {
		return err
	}
	d, err := h.svc.Get(c.Request().Context(), tenantID(c), domain)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, yamlTypes[0], d.Source)
}

func (h envoyHandlers) delete(c echo.Context) error {
	domain, err := envoyDomain(c)
	if err != nil {
		return err
	}
	if err := h.svc.Delete(c.Request().Context(), tenantID(c), domain); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// envoyDomain returns the valid domain in the path.
func envoyDomain(c echo.Context) (string, error) {
	d, err := pathParam(c, "domain")
	if err != nil {
		return "", err
	}
	return d, envoyconf.ValidateDomain(d)
}

// isYAML reports whether a Content-Type names YAML, whatever its
// parameters (a charset).
func isYAML(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && slices.Contains(yamlTypes, mt)
}
