package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/dashboard/webhooklog"
	"github.com/tollgate/tollgate/web"
)

// webhooksPerPage is the length of a webhook log page.
const webhooksPerPage = 50

const webhooksUnavailable = "This dashboard was started without the Stripe event log, so there is nothing to list. `tollgate serve` wires it; events sent to POST /webhooks/stripe are listed here."

// outcomeLabels are the words and colours of webhook outcomes, in filter
// order.
var outcomeLabels = []struct{ value, label, class string }{
	{webhooklog.OutcomeApplied, "applied", "b-good"},
	{webhooklog.OutcomeReplay, "replayed", "b-muted"},
	{webhooklog.OutcomeStale, "stale", "b-muted"},
	{webhooklog.OutcomeUnknownCustomer, "unknown customer", "b-warn"},
	{webhooklog.OutcomeIgnored, "ignored", "b-muted"},
	{webhooklog.OutcomeFailed, "failed", "b-bad"},
}

func webhookRow(e webhooklog.Event) web.WebhookRow {
	r := web.WebhookRow{
		ID: e.ID, Type: e.Type, Outcome: e.Outcome, OutcomeLabel: e.Outcome, OutcomeClass: "b-muted",
		Note: e.Note, Customer: or(e.CustomerID, "none"), Received: when(e.ReceivedAt), Created: when(e.Created),
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
// payload above the list.
func (d *Dashboard) webhooks(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	v := web.WebhooksView{Chrome: d.chrome(s, "Webhooks", "webhooks")}
	if d.cfg.Webhooks == nil {
		v.Unavailable = webhooksUnavailable
		return render(c, http.StatusOK, web.Webhooks(v))
	}
	if id := c.Param("id"); id != "" {
		e, err := d.cfg.Webhooks.WebhookEvent(ctx, id)
		if err != nil {
			return err
		}
		v.Selected = &web.WebhookDetail{WebhookRow: webhookRow(e), Error: e.Error, Payload: prettyJSON(e.Payload), PayloadTruncated: e.PayloadTruncated}
	}
	outcome := c.QueryParam("outcome")
	v.Outcomes = []web.OutcomeOption{{Value: "", Label: "any outcome", Selected: outcome == ""}}
	known := outcome == ""
	for _, o := range outcomeLabels {
		v.Outcomes = append(v.Outcomes, web.OutcomeOption{Value: o.value, Label: o.label, Selected: o.value == outcome})
		known = known || o.value == outcome
	}
	if !known {
		return badRequest("Unknown outcome " + strconv.Quote(outcome) + ".")
	}
	offset, _ := strconv.Atoi(c.QueryParam("offset"))
	offset = max(offset, 0)
	evs, err := d.cfg.Webhooks.WebhookEvents(ctx, webhooklog.Filter{Outcome: outcome, Offset: offset, Limit: webhooksPerPage + 1})
	if err != nil {
		return err
	}
	if len(evs) > webhooksPerPage {
		evs = evs[:webhooksPerPage]
		q := url.Values{"offset": {strconv.Itoa(offset + webhooksPerPage)}}
		if outcome != "" {
			q.Set("outcome", outcome)
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
	return render(c, http.StatusOK, web.Webhooks(v))
}

// prettyJSON indents a JSON payload for reading; anything else is shown as
// it is.
func prettyJSON(s string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err != nil {
		return s
	}
	return b.String()
}
