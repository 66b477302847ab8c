package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// auditPerPage is the length of an audit log page.
const auditPerPage = 50

// auditKinds are the kinds the filter suggests: those written by the
// dashboard, billing, the refusal recorder and the tenant API's counter
// resets.
var auditKinds = []string{KindLimitsChanged, KindKeyCreated, KindKeyRevoked, KindPlanChanged, KindEndpointDisabled, KindEndpointEnabled, "billing_changed", audit.KindCounterReset, audit.KindCounterReset + audit.FloodSuffix, audit.KindRefusal, audit.KindRefusalFlood, KindSignedIn}

// auditPage lists audit entries, newest first, by tenant and kind.
func (d *Dashboard) auditPage(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	f := audit.Filter{
		TenantID: strings.TrimSpace(c.QueryParam("tenant")),
		Kind:     strings.TrimSpace(c.QueryParam("kind")),
		Limit:    auditPerPage,
	}
	if c.QueryParam("page") != "" {
		// The list is paged by entry number, so that entries written
		// meanwhile move nothing; a page number would be answered with the
		// first page as if it were the one asked for.
		return badRequest("The audit log has no page numbers (page): follow \"Older entries\", which pages by entry number (before).")
	}
	if b := c.QueryParam("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return badRequest("The page cursor must be an entry number.")
		}
		f.Before = n
	}
	es, err := d.cfg.Audit.List(ctx, f)
	if err != nil {
		return err
	}
	v := web.AuditView{Chrome: d.chrome(s, "Audit log", "audit"), TenantFilter: f.TenantID, KindFilter: f.Kind, Kinds: auditKinds}
	names := d.tenantNames(ctx, es)
	for _, e := range es {
		r := web.AuditRow{ID: strconv.FormatInt(e.ID, 10), At: when(e.At), Actor: e.Actor, Kind: e.Kind, Detail: detailText(e.Detail)}
		if e.Kind == audit.KindRefusalFlood {
			if text, ok := floodText(e.Detail); ok {
				r.Detail, r.Flood = text, true
			}
		}
		switch name := names[e.TenantID]; {
		case e.TenantID == "":
			r.Tenant = "service"
		case name != "":
			r.Tenant, r.TenantHref = name, "/admin/tenants/"+e.TenantID
		default:
			r.Tenant = e.TenantID
		}
		v.Rows = append(v.Rows, r)
	}
	if len(es) == auditPerPage {
		q := url.Values{"before": {strconv.FormatInt(es[len(es)-1].ID, 10)}}
		if f.TenantID != "" {
			q.Set("tenant", f.TenantID)
		}
		if f.Kind != "" {
			q.Set("kind", f.Kind)
		}
		v.NextHref = "/admin/audit?" + q.Encode()
	}
	switch {
	case len(v.Rows) > 0:
	case f.TenantID != "" || f.Kind != "":
		v.Empty = "No entries match these filters. Check the tenant ID (copy it from the tenant's page), or clear the filters."
	case f.Before > 0:
		v.Empty = "No older entries."
	default:
		v.Empty = "The audit log is empty. Entries appear when an operator changes limits, keys or plans, when billing changes a tenant, and at the first refusal of each counter in each window."
	}
	return render(c, http.StatusOK, web.Audit(v))
}

// floodText says what a refusal_flood entry stands for, in a sentence; false
// when its detail is not what the audit package writes.
func floodText(d map[string]any) (string, bool) {
	start, err1 := time.Parse(time.RFC3339, fmt.Sprint(d["window_start"]))
	end, err2 := time.Parse(time.RFC3339, fmt.Sprint(d["window_end"]))
	n, err3 := strconv.ParseInt(fmt.Sprint(d["refusals"]), 10, 64)
	budget, err4 := strconv.ParseInt(fmt.Sprint(d["budget"]), 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return "", false
	}
	what := "first refusals"
	if n == 1 {
		what = "first refusal"
	}
	are := "are"
	if n == 1 {
		are = "is"
	}
	return fmt.Sprintf("%s more %s from %s to %s UTC, past the budget of %s entries a minute, %s not listed one by one.",
		count(n), what, start.UTC().Format("15:04"), end.UTC().Format("15:04"), count(budget), are), true
}

// detailText writes an entry's detail for reading: "key: value" pairs in
// key order, objects in braces, null as "none".
func detailText(d map[string]any) string {
	if len(d) == 0 {
		return "none"
	}
	var b strings.Builder
	writeDetail(&b, d, "; ")
	return b.String()
}

func writeDetail(b *strings.Builder, v any, sep string) {
	switch v := v.(type) {
	case nil:
		b.WriteString("none")
	case string:
		b.WriteString(v)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(k + ": ")
			if m, ok := v[k].(map[string]any); ok {
				b.WriteString("{")
				writeDetail(b, m, ", ")
				b.WriteString("}")
				continue
			}
			writeDetail(b, v[k], ", ")
		}
	default:
		j, _ := json.Marshal(v)
		b.Write(j)
	}
}

// tenantNames names the tenants of a page of entries; a tenant that cannot
// be read is shown by its id.
func (d *Dashboard) tenantNames(ctx context.Context, es []audit.Entry) map[string]string {
	names := map[string]string{}
	for _, e := range es {
		if e.TenantID == "" {
			continue
		}
		if _, done := names[e.TenantID]; done {
			continue
		}
		names[e.TenantID] = ""
		t, err := d.cfg.Tenants.Tenant(ctx, e.TenantID)
		if err != nil {
			if !errors.Is(err, tenant.ErrNotFound) {
				d.log.WarnContext(ctx, "audit page: tenant name not read", "tenant_id", e.TenantID, "err", err)
			}
			continue
		}
		names[e.TenantID] = t.Name
	}
	return names
}
