package dashboard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/webhooks"
	"github.com/tollgate/tollgate/web"
)

// Endpoints is what the tenant page reads and changes of a tenant's
// outbound webhook endpoints (webhooks.Service).
type Endpoints interface {
	Endpoints(ctx context.Context, tenantID string) ([]webhooks.Endpoint, error)
	SetEnabled(ctx context.Context, tenantID, id string, enabled bool, reason string) (webhooks.Endpoint, error)
}

// The audit kinds of an endpoint an operator disabled or enabled.
const (
	KindEndpointDisabled = "webhook_endpoint_disabled"
	KindEndpointEnabled  = "webhook_endpoint_enabled"
)

func endpointRows(tenantID string, es []webhooks.Endpoint) []web.EndpointRow {
	rows := make([]web.EndpointRow, 0, len(es))
	for _, e := range es {
		r := web.EndpointRow{
			ID: e.ID, URL: e.URL, Events: strings.Join(e.Events, ", "), Enabled: e.Enabled,
			State:         "enabled",
			DisableAction: "/admin/tenants/" + tenantID + "/endpoints/" + e.ID + "/disable",
			EnableAction:  "/admin/tenants/" + tenantID + "/endpoints/" + e.ID + "/enable",
		}
		switch {
		case !e.Enabled:
			r.State = e.DisabledReason
		case e.FailingSince != nil:
			r.State = "failing since " + when(*e.FailingSince)
		}
		rows = append(rows, r)
	}
	return rows
}

// disableEndpoint disables one of the tenant's webhook endpoints, saying
// which operator did.
func (d *Dashboard) disableEndpoint(c echo.Context, s *signedIn) error {
	return d.setEndpoint(c, s, false)
}

// enableEndpoint enables one of the tenant's webhook endpoints again: one
// its tenant, an operator or three days of failures disabled. Its
// deliveries given up meanwhile stay given up; the tenant may re-send them.
func (d *Dashboard) enableEndpoint(c echo.Context, s *signedIn) error {
	return d.setEndpoint(c, s, true)
}

// setEndpoint enables or disables an endpoint and audits who did.
func (d *Dashboard) setEndpoint(c echo.Context, s *signedIn, enabled bool) error {
	ctx := c.Request().Context()
	id, epID := c.Param("id"), c.Param("endpoint")
	if d.cfg.Endpoints == nil {
		return notFound("This dashboard was started without webhook endpoints.")
	}
	verb, kind, reason := "disabled", KindEndpointDisabled, "disabled by an operator ("+s.admin.Email+")"
	if enabled {
		verb, kind, reason = "enabled", KindEndpointEnabled, ""
	}
	_, err := d.cfg.Endpoints.SetEnabled(ctx, id, epID, enabled, reason)
	if errors.Is(err, webhooks.ErrNotFound) {
		return notFound("This tenant has no webhook endpoint " + epID + ".")
	}
	if err != nil {
		return fmt.Errorf("webhook endpoint %s of tenant %s not %s: %w", epID, id, verb, err)
	}
	d.record(ctx, s, id, kind, map[string]any{"endpoint_id": epID})
	d.log.InfoContext(ctx, "webhook endpoint "+verb, "tenant_id", id, "endpoint_id", epID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=endpoint-"+verb)
}
