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

// KindEndpointDisabled is the audit kind of an endpoint an operator
// disabled.
const KindEndpointDisabled = "webhook_endpoint_disabled"

func endpointRows(tenantID string, es []webhooks.Endpoint) []web.EndpointRow {
	rows := make([]web.EndpointRow, 0, len(es))
	for _, e := range es {
		r := web.EndpointRow{
			ID: e.ID, URL: e.URL, Events: strings.Join(e.Events, ", "), Enabled: e.Enabled,
			State:         "enabled",
			DisableAction: "/admin/tenants/" + tenantID + "/endpoints/" + e.ID + "/disable",
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
	ctx := c.Request().Context()
	id, epID := c.Param("id"), c.Param("endpoint")
	if d.cfg.Endpoints == nil {
		return notFound("This dashboard was started without webhook endpoints.")
	}
	_, err := d.cfg.Endpoints.SetEnabled(ctx, id, epID, false, "disabled by an operator ("+s.admin.Email+")")
	if errors.Is(err, webhooks.ErrNotFound) {
		return notFound("This tenant has no webhook endpoint " + epID + ".")
	}
	if err != nil {
		return fmt.Errorf("disable webhook endpoint %s of tenant %s: %w", epID, id, err)
	}
	d.record(ctx, s, id, KindEndpointDisabled, map[string]any{"endpoint_id": epID})
	d.log.InfoContext(ctx, "webhook endpoint disabled", "tenant_id", id, "endpoint_id", epID, "admin_id", s.admin.ID)
	return seeOther(c, "/admin/tenants/"+id+"?done=endpoint-disabled")
}
