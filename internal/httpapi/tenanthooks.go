package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/webhooks"
)

// TenantWebhooks is what the /v1/webhooks routes call (webhooks.Service).
// Errors wrap package webhooks' sentinels.
type TenantWebhooks interface {
	Create(ctx context.Context, tenantID, url string, events []string) (webhooks.Created, error)
	Rotate(ctx context.Context, tenantID, id string) (webhooks.Created, error)
	Endpoints(ctx context.Context, tenantID string) ([]webhooks.Endpoint, error)
	Endpoint(ctx context.Context, tenantID, id string) (webhooks.Endpoint, error)
	DeleteEndpoint(ctx context.Context, tenantID, id string) error
	SetEnabled(ctx context.Context, tenantID, id string, enabled bool, reason string) (webhooks.Endpoint, error)
	Ping(ctx context.Context, tenantID, endpointID string) (webhooks.Delivery, error)
	Deliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]webhooks.Delivery, error)
	Resend(ctx context.Context, tenantID, endpointID, deliveryID string) error
}

// maxWebhookBody bounds the body of POST /v1/webhooks: a URL of at most
// 2,048 bytes and a few event names.
const maxWebhookBody = 4 << 10

// deliveriesPerPage is how many deliveries the log answers, newest first.
const deliveriesPerPage = 100

// disabledByTenant is the reason an endpoint disabled through the API
// shows.
const disabledByTenant = "disabled by the tenant"

// registerTenantWebhooks adds /v1/webhooks behind admit, which keeps test
// keys to reading. Without a service, every route answers 404.
func registerTenantWebhooks(g *echo.Group, svc TenantWebhooks) {
	if svc == nil {
		return
	}
	h := hookHandlers{svc: svc}
	g.POST("", h.create)
	g.GET("", h.list)
	g.GET("/:id", h.get)
	g.DELETE("/:id", h.delete)
	g.POST("/:id/rotate", h.rotate)
	g.POST("/:id/test", h.test)
	g.POST("/:id/enable", h.enable)
	g.POST("/:id/disable", h.disable)
	g.GET("/:id/deliveries", h.deliveries)
	g.POST("/:id/deliveries/:delivery/resend", h.resend)
}

type hookHandlers struct{ svc TenantWebhooks }

type hookBody struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

func (h hookHandlers) create(c echo.Context) error {
	var b hookBody
	if err := decodeJSON(c, maxWebhookBody, &b); err != nil {
		return err
	}
	e, err := h.svc.Create(c.Request().Context(), tenantID(c), b.URL, b.Events)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/webhooks/"+e.ID)
	return c.JSON(http.StatusCreated, e)
}

func (h hookHandlers) list(c echo.Context) error {
	es, err := h.svc.Endpoints(c.Request().Context(), tenantID(c))
	if err != nil {
		return err
	}
	if es == nil {
		es = []webhooks.Endpoint{}
	}
	return c.JSON(http.StatusOK, map[string][]webhooks.Endpoint{"webhooks": es})
}

func (h hookHandlers) get(c echo.Context) error {
	e, err := h.svc.Endpoint(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

func (h hookHandlers) delete(c echo.Context) error {
	if err := h.svc.DeleteEndpoint(c.Request().Context(), tenantID(c), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (h hookHandlers) rotate(c echo.Context) error {
	e, err := h.svc.Rotate(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

func (h hookHandlers) test(c echo.Context) error {
	d, err := h.svc.Ping(c.Request().Context(), tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, d)
}

func (h hookHandlers) enable(c echo.Context) error  { return h.setEnabled(c, true) }
func (h hookHandlers) disable(c echo.Context) error { return h.setEnabled(c, false) }

func (h hookHandlers) setEnabled(c echo.Context, on bool) error {
	e, err := h.svc.SetEnabled(c.Request().Context(), tenantID(c), c.Param("id"), on, disabledByTenant)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

func (h hookHandlers) deliveries(c echo.Context) error {
	ds, err := h.svc.Deliveries(c.Request().Context(), tenantID(c), c.Param("id"), deliveriesPerPage)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []webhooks.Delivery{}
	}
	return c.JSON(http.StatusOK, map[string][]webhooks.Delivery{"deliveries": ds})
}

func (h hookHandlers) resend(c echo.Context) error {
	err := h.svc.Resend(c.Request().Context(), tenantID(c), c.Param("id"), c.Param("delivery"))
	if err != nil {
		return fmt.Errorf("resend: %w", err)
	}
	return c.NoContent(http.StatusAccepted)
}
