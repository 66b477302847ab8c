package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/gate"
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
	// BudgetLevel writes budget.threshold for the percents of a budget a
	// reservation or a settlement reached, once each per window.
	BudgetLevel(ctx context.Context, l webhooks.BudgetLevel) error
}

// maxWebhookBody bounds the body of POST /v1/webhooks: a URL of at most
// 2,048 bytes and a few event names.
const maxWebhookBody = 4 << 10

// deliveriesPerPage is how many deliveries the log answers, newest first.
const deliveriesPerPage = 100

// disabledByTenant is the reason an endpoint disabled through the API
// shows.
const disabledByTenant = "disabled by the tenant"

// DefaultWebhookTestsPerMinute is how many test events a tenant may send
// a minute, across its endpoints, unless configured otherwise: a person
// trying a receiver sends a few; a script cannot turn the route into a
// stream of outbox rows or of requests to someone's server.
const DefaultWebhookTestsPerMinute = webhooks.DefaultTestSendsPerMinute

// webhookTestGroup is the counter group of the test sends' limit, shared
// with the console's.
const webhookTestGroup = webhooks.TestSendGroup

// errTestsLimited is a test send past the tenant's limit.
var errTestsLimited = errors.New("webhook test sends limited")

// registerTenantWebhooks adds /v1/webhooks behind admit, which keeps test
// keys to reading. Without a service, every route answers 404.
func registerTenantWebhooks(g *echo.Group, cfg Config) {
	if cfg.Webhooks == nil {
		return
	}
	h := hookHandlers{svc: cfg.Webhooks, tests: cfg.WebhookTestLimiter,
		testsPerMinute: cmp.Or(cfg.WebhookTestsPerMinute, DefaultWebhookTestsPerMinute)}
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

type hookHandlers struct {
	svc            TenantWebhooks
	tests          *gate.Limiter
	testsPerMinute int64
}

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

// test sends the endpoint a test.ping once the tenant's test sends of
// the last minute leave room (counted before the endpoint is looked up:
// a refused send costs no database work); past them, 429 with
// Retry-After.
func (h hookHandlers) test(c echo.Context) error {
	ctx := c.Request().Context()
	if h.tests == nil {
		return fmt.Errorf("webhook test limits: %w", gate.ErrStoreUnavailable)
	}
	ds, err := h.tests.Check(ctx, gate.Limits{Group: webhookTestGroup, Rules: []gate.Rule{
		{Key: "tenant:" + tenantID(c), Limit: h.testsPerMinute, Window: time.Minute},
	}})
	if err != nil {
		return err
	}
	if d := ds[0]; !d.Allowed {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(max(1, ceilDiv(d.RetryAfter, time.Second)), 10))
		return &testsLimited{perMinute: h.testsPerMinute}
	}
	d, err := h.svc.Ping(ctx, tenantID(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, d)
}

// testsLimited is a test send past the tenant's limit, saying the limit.
type testsLimited struct{ perMinute int64 }

func (e *testsLimited) Error() string { return errTestsLimited.Error() }

// Unwrap returns errTestsLimited.
func (e *testsLimited) Unwrap() error { return errTestsLimited }

// ClientFault implements clientError.
func (e *testsLimited) ClientFault() (field, reason string) {
	return "", fmt.Sprintf("This tenant may send %d test events a minute; retry after Retry-After seconds.", e.perMinute)
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
