package consolesite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/webhooks"
	"github.com/tollgate/tollgate/web"
)

// Webhooks is what the webhooks page calls: the service of the API's
// /v1/webhooks routes (webhooks.Service). Errors wrap package webhooks'
// sentinels; an endpoint of another tenant is webhooks.ErrNotFound.
type Webhooks interface {
	Create(ctx context.Context, tenantID, url string, events []string) (webhooks.Created, error)
	Rotate(ctx context.Context, tenantID, id string) (webhooks.Created, error)
	Endpoints(ctx context.Context, tenantID string) ([]webhooks.Endpoint, error)
	Endpoint(ctx context.Context, tenantID, id string) (webhooks.Endpoint, error)
	Ping(ctx context.Context, tenantID, endpointID string) (webhooks.Delivery, error)
	Deliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]webhooks.Delivery, error)
	Resend(ctx context.Context, tenantID, endpointID, deliveryID string) error
	SetEnabled(ctx context.Context, tenantID, id string, enabled bool, reason string) (webhooks.Endpoint, error)
	DeleteEndpoint(ctx context.Context, tenantID, id string) error
}

// KindEndpointDeleted is the audit kind of an endpoint a member deleted
// (audit.KindEndpointDeleted).
const KindEndpointDeleted = audit.KindEndpointDeleted

// disabledByMember is the reason an endpoint disabled here shows (the
// API's words for the same act).
const disabledByMember = "disabled by the tenant"

// hookDeliveries is how many deliveries an endpoint's page lists.
const hookDeliveries = 50

// registerWebhooks mounts the webhooks page: both roles may manage the
// endpoints.
func (s *Site) registerWebhooks(g *echo.Group) {
	g.GET("/webhooks", s.page(s.webhooks))
	g.POST("/webhooks", s.page(s.createWebhook))
	g.GET("/webhooks/:hook", s.page(s.webhook))
	g.POST("/webhooks/:hook/test", s.page(s.testWebhook))
	g.GET("/webhooks/:hook/rotate", s.page(s.confirmRotate))
	g.POST("/webhooks/:hook/rotate", s.page(s.rotateWebhook))
	g.POST("/webhooks/:hook/deliveries/:delivery/resend", s.page(s.resendDelivery))
	g.POST("/webhooks/:hook/enable", s.page(s.enableWebhook(true)))
	g.POST("/webhooks/:hook/disable", s.page(s.enableWebhook(false)))
	g.GET("/webhooks/:hook/delete", s.page(s.confirmDeleteWebhook))
	g.POST("/webhooks/:hook/delete", s.page(s.deleteWebhook))
}

// webhooks lists the endpoints and the form that adds one.
func (s *Site) webhooks(c echo.Context, m *member) error {
	flash := ""
	if c.QueryParam("done") == "deleted" {
		flash = "The endpoint is deleted, with its deliveries: nothing more is sent to it."
	}
	return s.renderWebhooksFlash(c, m, http.StatusOK, hookForm("", nil, ""), nil, flash)
}

// createWebhook adds the form's endpoint; its secret is shown once.
func (s *Site) createWebhook(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	form, _ := c.FormParams()
	rawURL, events := strings.TrimSpace(c.FormValue("url")), form["events"]
	e, err := s.cfg.Webhooks.Create(ctx, m.TenantID, rawURL, events)
	if reason, ok := hookFault(err); ok {
		return s.renderWebhooks(c, m, http.StatusBadRequest, hookForm(rawURL, events, reason), nil)
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.log.InfoContext(ctx, "console webhook created", "tenant_id", m.TenantID, "endpoint_id", e.ID, "member_id", m.ID)
	secret := &web.ConsoleWebhookSecret{EndpointID: e.ID, URL: e.URL, Value: e.Secret}
	return s.renderWebhooks(c, m, http.StatusOK, hookForm("", nil, ""), secret)
}

// hookFault is the reason to show for err when it is the member's
// mistake: a field the service refused, or too many endpoints.
func hookFault(err error) (string, bool) {
	var fe *webhooks.FieldError
	switch {
	case errors.As(err, &fe):
		_, reason := fe.ClientFault()
		return reason, true
	case errors.Is(err, webhooks.ErrTooMany):
		return fmt.Sprintf("A workspace has at most %d endpoints.", webhooks.MaxEndpoints), true
	}
	return "", false
}

// hookForm is the add form with rawURL and events as typed.
func hookForm(rawURL string, events []string, reason string) web.ConsoleWebhookForm {
	f := web.ConsoleWebhookForm{URL: rawURL, Error: reason}
	for _, t := range webhooks.EventTypes {
		f.Events = append(f.Events, web.ConsoleWebhookEvent{Name: t, Checked: containsString(events, t)})
	}
	return f
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// renderWebhooks renders the webhooks page with form f and secret, a
// secret just made.
func (s *Site) renderWebhooks(c echo.Context, m *member, status int, f web.ConsoleWebhookForm, secret *web.ConsoleWebhookSecret) error {
	return s.renderWebhooksFlash(c, m, status, f, secret, "")
}

// renderWebhooksFlash is renderWebhooks with a flash, what a change did.
func (s *Site) renderWebhooksFlash(c echo.Context, m *member, status int, f web.ConsoleWebhookForm, secret *web.ConsoleWebhookSecret, flash string) error {
	ctx := c.Request().Context()
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	es, err := s.cfg.Webhooks.Endpoints(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	v := web.ConsoleWebhooksView{
		Chrome: web.ConsoleChrome{Title: "Webhooks", Section: "webhooks", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf, Flash: flash},
		Form:   f, Secret: secret,
	}
	for _, e := range es {
		v.Endpoints = append(v.Endpoints, hookRow(e))
	}
	return render(c, status, web.ConsoleWebhooks(v))
}

// memberHook returns the member's tenant's endpoint named in the path, or
// answers a 404 page (another tenant's, or none); when ok is false err is
// what answering returned.
func (s *Site) memberHook(c echo.Context, m *member) (webhooks.Endpoint, bool, error) {
	e, err := s.cfg.Webhooks.Endpoint(c.Request().Context(), m.TenantID, c.Param("hook"))
	switch {
	case errors.Is(err, webhooks.ErrNotFound):
		return e, false, s.hookNotFound(c)
	case err != nil:
		return e, false, s.fail(c, err)
	}
	return e, true, nil
}

func (s *Site) hookNotFound(c echo.Context) error {
	return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found",
		Message: "Your workspace has no such webhook endpoint.", Link: "/console/webhooks", LinkLabel: "Your webhooks"})
}

// webhook shows an endpoint and its deliveries log.
func (s *Site) webhook(c echo.Context, m *member) error {
	e, ok, err := s.memberHook(c, m)
	if !ok {
		return err
	}
	return s.renderWebhook(c, m, http.StatusOK, e, "", nil)
}

// testWebhook sends a test event, within the API's test send limit
// (webhooks.TestSendGroup, counted in the same counters).
func (s *Site) testWebhook(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	e, ok, err := s.memberHook(c, m)
	if !ok {
		return err
	}
	allowed, err := s.allowTest(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	if !allowed {
		return s.renderWebhook(c, m, http.StatusTooManyRequests, e,
			fmt.Sprintf("Your workspace may send %d test events a minute; try again in a minute.", s.testsPerMinute()), nil)
	}
	if _, err := s.cfg.Webhooks.Ping(ctx, m.TenantID, e.ID); errors.Is(err, webhooks.ErrOutboxFull) {
		return s.renderWebhook(c, m, http.StatusConflict, e, "This endpoint has too many deliveries waiting; try again later.", nil)
	} else if err != nil {
		return s.fail(c, err)
	}
	return c.Redirect(http.StatusSeeOther, "/console/webhooks/"+e.ID)
}

func (s *Site) testsPerMinute() int64 {
	if s.cfg.WebhookTestsPerMinute > 0 {
		return s.cfg.WebhookTestsPerMinute
	}
	return webhooks.DefaultTestSendsPerMinute
}

// allowTest counts a test send of the tenant against the shared limit.
func (s *Site) allowTest(ctx context.Context, tenantID string) (bool, error) {
	if s.cfg.WebhookTests == nil {
		return false, fmt.Errorf("webhook test limits: %w", gate.ErrStoreUnavailable)
	}
	ds, err := s.cfg.WebhookTests.Check(ctx, gate.Limits{Group: webhooks.TestSendGroup, Rules: []gate.Rule{
		{Key: "tenant:" + tenantID, Limit: s.testsPerMinute(), Window: time.Minute},
	}})
	if err != nil {
		return false, err
	}
	return ds[0].Allowed, nil
}

// resendDelivery makes a settled delivery of the endpoint due again.
func (s *Site) resendDelivery(c echo.Context, m *member) error {
	e, ok, err := s.memberHook(c, m)
	if !ok {
		return err
	}
	err = s.cfg.Webhooks.Resend(c.Request().Context(), m.TenantID, e.ID, c.Param("delivery"))
	switch {
	case errors.Is(err, webhooks.ErrNotFound):
		return s.hookNotFound(c)
	case errors.Is(err, webhooks.ErrConflict):
		return s.renderWebhook(c, m, http.StatusConflict, e, "That delivery is still being sent.", nil)
	case errors.Is(err, webhooks.ErrOutboxFull):
		return s.renderWebhook(c, m, http.StatusConflict, e, "This endpoint has too many deliveries waiting; try again later.", nil)
	case err != nil:
		return s.fail(c, err)
	}
	return c.Redirect(http.StatusSeeOther, "/console/webhooks/"+e.ID)
}

// enableWebhook enables the endpoint, or disables it (deliveries wait
// until it is enabled again): both are undone by the other button, so
// neither asks first.
func (s *Site) enableWebhook(enabled bool) func(c echo.Context, m *member) error {
	return func(c echo.Context, m *member) error {
		ctx := c.Request().Context()
		e, ok, err := s.memberHook(c, m)
		if !ok {
			return err
		}
		reason := ""
		if !enabled {
			reason = disabledByMember
		}
		e, err = s.cfg.Webhooks.SetEnabled(ctx, m.TenantID, e.ID, enabled, reason)
		if errors.Is(err, webhooks.ErrNotFound) {
			return s.hookNotFound(c)
		} else if err != nil {
			return s.fail(c, err)
		}
		s.log.InfoContext(ctx, "console webhook enabled or disabled", "tenant_id", m.TenantID, "endpoint_id", e.ID, "enabled", enabled, "member_id", m.ID)
		return s.renderWebhook(c, m, http.StatusOK, e, "", nil)
	}
}

// confirmRotate asks before rotating the endpoint's secret.
func (s *Site) confirmRotate(c echo.Context, m *member) error {
	return s.confirmHook(c, m, "Rotate the secret?", func(chrome web.ConsoleChrome, e web.ConsoleWebhookRow) templ.Component {
		return web.ConsoleWebhookRotate(web.ConsoleWebhookRotateView{Chrome: chrome, Endpoint: e})
	})
}

// confirmHook renders the page that asks before a change to the endpoint
// named in the path (a 404 page for none of the member's), page made
// with the webhooks pages' frame titled title.
func (s *Site) confirmHook(c echo.Context, m *member, title string, page func(web.ConsoleChrome, web.ConsoleWebhookRow) templ.Component) error {
	e, ok, err := s.memberHook(c, m)
	if !ok {
		return err
	}
	t, err := s.cfg.Tenants.Tenant(c.Request().Context(), m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	chrome := web.ConsoleChrome{Title: title, Section: "webhooks", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf}
	return render(c, http.StatusOK, page(chrome, hookRow(e)))
}

// rotateWebhook gives the endpoint a new secret, shown once.
func (s *Site) rotateWebhook(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	e, ok, err := s.memberHook(c, m)
	if !ok {
		return err
	}
	r, err := s.cfg.Webhooks.Rotate(ctx, m.TenantID, e.ID)
	if errors.Is(err, webhooks.ErrNotFound) {
		return s.hookNotFound(c)
	} else if err != nil {
		return s.fail(c, err)
	}
	s.log.InfoContext(ctx, "console webhook secret rotated", "tenant_id", m.TenantID, "endpoint_id", e.ID, "member_id", m.ID)
	return s.renderWebhook(c, m, http.StatusOK, r.Endpoint, "", &web.ConsoleWebhookSecret{EndpointID: e.ID, URL: e.URL, Value: r.Secret})
}

// confirmDeleteWebhook asks before deleting the endpoint with its
// deliveries: deleting cannot be undone. The page's button posts to
// deleteWebhook.
func (s *Site) confirmDeleteWebhook(c echo.Context, m *member) error {
	return s.confirmHook(c, m, "Delete the endpoint?", func(chrome web.ConsoleChrome, e web.ConsoleWebhookRow) templ.Component {
		return web.ConsoleWebhookDelete(web.ConsoleWebhookDeleteView{Chrome: chrome, Endpoint: e})
	})
}

// deleteWebhook deletes the endpoint and its deliveries, as the API's
// DELETE /v1/webhooks/{id} does (the same webhooks.Service call), audited
// with the member's email (asked first by confirmDeleteWebhook).
func (s *Site) deleteWebhook(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	e, ok, err := s.memberHook(c, m)
	if !ok {
		return err
	}
	err = s.cfg.Webhooks.DeleteEndpoint(ctx, m.TenantID, e.ID)
	if errors.Is(err, webhooks.ErrNotFound) {
		return s.hookNotFound(c)
	} else if err != nil {
		return s.fail(c, err)
	}
	host := ""
	if u, err := url.Parse(e.URL); err == nil {
		host = u.Host
	}
	s.record(ctx, m, KindEndpointDeleted, map[string]any{"endpoint_id": e.ID, "host": host})
	s.log.InfoContext(ctx, "console webhook deleted", "tenant_id", m.TenantID, "endpoint_id", e.ID, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console/webhooks?done=deleted")
}

// renderWebhook renders an endpoint's page with its deliveries log.
func (s *Site) renderWebhook(c echo.Context, m *member, status int, e webhooks.Endpoint, problem string, secret *web.ConsoleWebhookSecret) error {
	ctx := c.Request().Context()
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	ds, err := s.cfg.Webhooks.Deliveries(ctx, m.TenantID, e.ID, hookDeliveries)
	if err != nil {
		return s.fail(c, err)
	}
	v := web.ConsoleWebhookView{
		Chrome:   web.ConsoleChrome{Title: "Webhook endpoint", Section: "webhooks", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf},
		Endpoint: hookRow(e), Error: problem, Secret: secret,
	}
	for _, d := range ds {
		v.Deliveries = append(v.Deliveries, deliveryRow(d))
	}
	return render(c, status, web.ConsoleWebhook(v))
}

// hookRow is how the page lists an endpoint.
func hookRow(e webhooks.Endpoint) web.ConsoleWebhookRow {
	state := "enabled"
	if !e.Enabled {
		state = "disabled"
		if e.DisabledReason != "" {
			state += ": " + e.DisabledReason
		}
	}
	return web.ConsoleWebhookRow{ID: e.ID, URL: e.URL, Events: strings.Join(e.Events, ", "), State: state, Created: when(e.CreatedAt), Enabled: e.Enabled}
}

// deliveryRow is how the log lists a delivery.
func deliveryRow(d webhooks.Delivery) web.ConsoleDeliveryRow {
	code := "—"
	if d.LastStatusCode != nil {
		code = strconv.Itoa(*d.LastStatusCode)
	}
	settled := d.Status == "delivered" || d.Status == "failed" || d.Status == "dropped"
	return web.ConsoleDeliveryRow{ID: d.ID, Event: d.EventType, Status: d.Status, Attempts: strconv.Itoa(d.Attempts),
		Code: code, Created: when(d.CreatedAt), Settled: settled}
}
