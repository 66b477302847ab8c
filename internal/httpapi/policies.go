package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/policy"
)

// PolicyService is what the policy routes call: policy.Service (a
// policy.Store that also invalidates this instance's Catalog) satisfies it.
// Errors wrap the policy package's sentinels.
type PolicyService interface {
	PutPolicy(ctx context.Context, tenantID string, p policy.Policy) (policy.Policy, error)
	GetPolicy(ctx context.Context, tenantID, name string) (policy.Policy, error)
	ListPolicies(ctx context.Context, tenantID string) ([]policy.Policy, error)
	DeletePolicy(ctx context.Context, tenantID, name string) error
	PutOverride(ctx context.Context, tenantID, name string, o policy.Override) (policy.Override, error)
	GetOverride(ctx context.Context, tenantID, name, pattern string) (policy.Override, error)
	ListOverrides(ctx context.Context, tenantID, name string) ([]policy.Override, error)
	DeleteOverride(ctx context.Context, tenantID, name, pattern string) error
}

// registerPolicies adds the policy and override routes to g, the group
// mounted at /v1 behind the auth middleware (which sets the tenant read by
// tenantID).
func registerPolicies(g *echo.Group, svc PolicyService) {
	h := policyHandlers{svc: svc}
	g.GET("/policies", h.list)
	g.PUT("/policies/:name", h.put)
	g.GET("/policies/:name", h.get)
	g.DELETE("/policies/:name", h.delete)
	g.GET("/policies/:name/overrides", h.listOverrides)
	g.PUT("/policies/:name/overrides/:pattern", h.putOverride)
	g.GET("/policies/:name/overrides/:pattern", h.getOverride)
	g.DELETE("/policies/:name/overrides/:pattern", h.deleteOverride)
}

type policyHandlers struct {
	svc PolicyService
}

func (h policyHandlers) list(c echo.Context) error {
	ps, err := h.svc.ListPolicies(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []policy.Policy{}
	}
	return c.JSON(http.StatusOK, map[string][]policy.Policy{"policies": ps})
}

func (h policyHandlers) put(c echo.Context) error {
	name, err := policyName(c)
	if err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	p, err := policy.Parse(name, body)
	if err != nil {
		return err
	}
	p, err = h.svc.PutPolicy(c.Request().Context(), tenantID(c), p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

func (h policyHandlers) get(c echo.Context) error {
	name, err := policyName(c)
	if err != nil {
		return err
	}
	p, err := h.svc.GetPolicy(c.Request().Context(), tenantID(c), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

func (h policyHandlers) delete(c echo.Context) error {
	name, err := policyName(c)
	if err != nil {
		return err
	}
	if err := h.svc.DeletePolicy(c.Request().Context(), tenantID(c), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (h policyHandlers) listOverrides(c echo.Context) error {
	name, err := policyName(c)
	if err != nil {
		return err
	}
	ovs, err := h.svc.ListOverrides(c.Request().Context(), tenantID(c), name)
	if err != nil {
		return err
	}
	if ovs == nil {
		ovs = []policy.Override{}
	}
	return c.JSON(http.StatusOK, map[string][]policy.Override{"overrides": ovs})
}

func (h policyHandlers) putOverride(c echo.Context) error {
	name, pattern, err := overrideKey(c)
	if err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	o, err := policy.ParseOverride(pattern, body)
	if err != nil {
		return err
	}
	o, err = h.svc.PutOverride(c.Request().Context(), tenantID(c), name, o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

func (h policyHandlers) getOverride(c echo.Context) error {
	name, pattern, err := overrideKey(c)
	if err != nil {
		return err
	}
	o, err := h.svc.GetOverride(c.Request().Context(), tenantID(c), name, pattern)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

func (h policyHandlers) deleteOverride(c echo.Context) error {
	name, pattern, err := overrideKey(c)
	if err != nil {
		return err
	}
	if err := h.svc.DeleteOverride(c.Request().Context(), tenantID(c), name, pattern); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// policyName returns the valid policy name in the path.
func policyName(c echo.Context) (string, error) {
	name, err := pathParam(c, "name")
	if err != nil {
		return "", err
	}
	return name, policy.ValidateName(name)
}

// overrideKey returns the valid policy name and override pattern in the path.
func overrideKey(c echo.Context) (name, pattern string, err error) {
	if name, err = policyName(c); err != nil {
		return "", "", err
	}
	if pattern, err = pathParam(c, "pattern"); err != nil {
		return "", "", err
	}
	return name, pattern, policy.ValidatePattern(pattern)
}

// pathParam returns a path parameter unescaped. Echo matches on the escaped
// path, and so hands over escaped parameters, whenever the request's path
// needs escaping to be told apart from its decoded form (it holds "%2F",
// say); otherwise its parameters are already decoded, and decoding them again
// would misread a literal "%".
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		// net/http refuses such a path before Echo sees it; kept so that a
		// parameter is never used half-decoded.
		return "", &badRequest{field: name, reason: "is not a valid path-escaped string"}
	}
	return u, nil
}

// readBody reads a request body of up to policy.MaxBody bytes, and one byte
// more, so that Parse can tell a body that is too large, and refuses one
// that encoding/json would read as other text than it holds (checkText).
func readBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, policy.MaxBody+1))
	if err != nil {
		return nil, &badRequest{reason: "the request body could not be read"}
	}
	if len(body) <= policy.MaxBody {
		// A longer body is cut, perhaps within a character; Parse
		// refuses it for its length.
		if err := checkText(body); err != nil {
			return nil, err
		}
	}
	return body, nil
}
