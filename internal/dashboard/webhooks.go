package dashboard

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// webhooksPerPage is the length of a webhook log page.
const webhooksPerPage = 50

const webhooksUnavailable = "This dashboard was started without the Stripe event log, so there is nothing to list. `tollgate serve` wires it; events sent to POST /webhooks/stripe are listed here."

// outcomeLabels are the words and colours of webhook outcomes, in filter
// order.
var outcomeLabels = []struct {
	value        billing.Outcome
	label, class string
}{
	{billing.OutcomeApplied, "applied", "b-good"},
	{billing.OutcomeReplay, "replayed", "b-muted"},
	{billing.OutcomeStale, "stale", "b-muted"},
	{billing.OutcomeUnknownCustomer, "unknown customer", "b-warn"},
	{billing.OutcomeCustomerConflict, "customer conflict", "b-bad"},
	{billing.OutcomeIgnored, "ignored", "b-muted"},
	{billing.OutcomeFailed, "failed", "b-bad"},
}

func webhookRow(e billing.EventRecord) web.WebhookRow {
	r := web.WebhookRow{
		ID: e.ID, Type: e.Type, Outcome: string(e.Outcome), OutcomeLabel: string(e.Outcome), OutcomeClass: "b-muted",
		Note: e.Note, Customer: cmp.Or(e.CustomerID, "none"), Received: when(e.ReceivedAt), Created: when(e.Created),
		Deliveries: strconv.Itoa(e.Deliveries), Replayed: e.Deliveries > 1,
		Href: "/admin/webhooks/" + url.PathEscape(e.ID),
	}
	for _, o := range outcomeLabels {
		if o.value == e.Outcome {
			r.OutcomeLabel, r.OutcomeClass = o.label, o.class
		}
	}
	switch {
	case e.TenantID != "" && e.TenantName != "":
		r.Tenant, r.TenantHref = e.TenantName, "/admin/tenants/"+e.TenantID
	case e.TenantID != "":
		r.Tenant = e.TenantID + " (deleted)"
	default:
		r.Tenant = "no tenant"
	}
	return r
}

// webhooks lists received Stripe events; with an id, it shows that event's
// payload above the list, and for an event held for an unknown customer the
// form that links the customer to a tenant.
func (d *Dashboard) webhooks(c echo.Context, s *signedIn) error {
	v, err := d.webhooksView(c, s)
	if err != nil {
		return err
	}
	v.Flash = flashes[c.QueryParam("done")]
	return render(c, http.StatusOK, web.Webhooks(v))
}

// webhooksView builds the webhook log, with the event of the id parameter
// selected when there is one.
func (d *Dashboard) webhooksView(c echo.Context, s *signedIn) (web.WebhooksView, error) {
	ctx := c.Request().Context()
	v := web.WebhooksView{Chrome: d.chrome(s, "Stripe events", "webhooks")}
	if d.cfg.Webhooks == nil {
		v.Unavailable = webhooksUnavailable
		return v, nil
	}
	if id := c.Param("id"); id != "" {
		e, err := d.cfg.Webhooks.Event(ctx, id)
		if err != nil {
			return v, err
		}
		v.Selected = &web.WebhookDetail{WebhookRow: webhookRow(e), Error: e.Error, Payload: prettyJSON(e.Payload), PayloadTruncated: e.Truncated}
		if d.linkable(e) {
			v.Selected.Link = &web.LinkCustomerForm{Action: "/admin/webhooks/" + url.PathEscape(e.ID) + "/link", Customer: e.CustomerID}
		}
	}
	outcome := billing.Outcome(c.QueryParam("outcome"))
	v.Outcomes = []web.Option{{Value: "", Label: "any outcome", Selected: outcome == ""}}
	known := outcome == ""
	for _, o := range outcomeLabels {
		v.Outcomes = append(v.Outcomes, web.Option{Value: string(o.value), Label: o.label, Selected: o.value == outcome})
		known = known || o.value == outcome
	}
	if !known {
		return v, badRequest("Unknown outcome " + strconv.Quote(string(outcome)) + ".")
	}
	offset, err := intParam(c, "offset", 0, 0, maxPage*webhooksPerPage)
	if err != nil {
		return v, err
	}
	evs, err := d.cfg.Webhooks.Events(ctx, billing.EventFilter{Outcome: outcome, Offset: offset, Limit: webhooksPerPage + 1})
	if err != nil {
		return v, err
	}
	if len(evs) > webhooksPerPage {
		evs = evs[:webhooksPerPage]
		q := url.Values{"offset": {strconv.Itoa(offset + webhooksPerPage)}}
		if outcome != "" {
			q.Set("outcome", string(outcome))
		}
		v.NextHref = "/admin/webhooks?" + q.Encode()
	}
	for _, e := range evs {
		v.Rows = append(v.Rows, webhookRow(e))
	}
	if len(v.Rows) == 0 {
		v.Empty = "No Stripe events received yet. Point a Stripe webhook endpoint at POST /webhooks/stripe (or run `stripe listen --forward-to`) and set the signing secret; events show here as they arrive."
		if outcome != "" {
			v.Empty = "No events with this outcome. Choose \"any outcome\" to see them all."
		}
	}
	return v, nil
}

// linkable says whether e waits for an operator to link its customer, and
// the dashboard can.
func (d *Dashboard) linkable(e billing.EventRecord) bool {
	return d.cfg.Billing != nil && e.Outcome == billing.OutcomeUnknownCustomer && e.CustomerID != ""
}

// linkCustomer links the Stripe customer of an unknown_customer event to
// the tenant the operator names, through billing, which applies the
// customer's held events and audits the link with the operator as actor. A
// refusal is shown on the event's page with the form filled in again.
func (d *Dashboard) linkCustomer(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	if d.cfg.Webhooks == nil || d.cfg.Billing == nil {
		return notFound("This dashboard was started without billing, so it cannot link Stripe customers.")
	}
	id := c.Param("id")
	e, err := d.cfg.Webhooks.Event(ctx, id)
	if err != nil {
		return err
	}
	tenantID := strings.TrimSpace(c.FormValue("tenant_id"))
	status, msg, field := http.StatusBadRequest, "", "tenant_id"
	switch {
	case !d.linkable(e):
		status, msg, field = http.StatusConflict, "This event is not waiting for its customer any more: there is nothing to link.", ""
	case tenantID == "" || len(tenantID) > 100:
		msg = "Enter the ID of the tenant this Stripe customer belongs to."
	default:
		err := d.cfg.Billing.LinkCustomer(ctx, tenantID, e.CustomerID, s.admin.Email)
		switch {
		case err == nil:
			d.changed("tenant", tenantID)
			d.log.InfoContext(ctx, "stripe customer linked", "tenant_id", tenantID, "event_id", e.ID, "admin_id", s.admin.ID)
			return seeOther(c, "/admin/webhooks/"+url.PathEscape(e.ID)+"?done=linked#top")
		case errors.Is(err, billing.ErrNotFound):
			msg = "No tenant has the ID " + strconv.Quote(tenantID) + ". Copy it from the tenant's page."
		case errors.Is(err, billing.ErrConflict):
			status, msg, field = http.StatusConflict, "Customer "+e.CustomerID+" is already linked to another tenant. Only one tenant can have it.", ""
		case errors.Is(err, tenant.ErrInvalid):
			msg, field = "This event names no customer that can be linked.", ""
		default:
			return err
		}
	}
	v, err := d.webhooksView(c, s)
	if err != nil {
		return err
	}
	if v.Selected.Link == nil {
		v.Selected.Link = &web.LinkCustomerForm{Action: "/admin/webhooks/" + url.PathEscape(e.ID) + "/link", Customer: e.CustomerID}
	}
	v.Selected.Link.TenantID, v.Selected.Link.Error, v.Selected.Link.ErrorField = tenantID, "Not linked: "+msg, field
	return render(c, status, web.Webhooks(v))
}

// prettyJSON indents a JSON payload for reading; anything else is shown as
// it is.
func prettyJSON(p []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, p, "", "  "); err != nil {
		return string(p)
	}
	return b.String()
}
