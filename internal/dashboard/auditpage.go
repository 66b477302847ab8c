package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// auditPerPage is the length of an audit log page.
const auditPerPage = 50

// The audit log's two views: what people and services changed, and the
// refusals the API recorded (which can come in floods and would bury the
// changes).
const (
	auditChanges  = "changes"
	auditRefusals = "refusals"
)

// refusalKinds are the kinds the refusals view shows; the changes view shows
// every other kind.
var refusalKinds = []string{audit.KindRefusal, audit.KindRefusalFlood}

// changeKinds are the kinds of the changes view's filter: those written by
// the dashboard, the CLI and the tenant API's policy routes, billing, the
// tenant API's counter resets, the console's endpoint deletions, and the
// operators' disabling of whole tenants.
var changeKinds = []string{
	KindTenantCreated, KindLimitsChanged, KindKeyCreated, KindKeyRevoked, audit.KindKeyRolled, KindPlanChanged, KindEndpointDisabled, KindEndpointEnabled,
	audit.KindEndpointDeleted, KindMemberDisabled, KindMemberEnabled, audit.KindTenantDisabled, audit.KindTenantEnabled,
	policy.KindPolicyPut, policy.KindPolicyDeleted, policy.KindOverridePut, policy.KindOverrideDeleted,
	billing.AuditKind, billing.AuditKindCustomerLinked,
	audit.KindCounterReset, audit.KindCounterReset + audit.FloodSuffix,
	KindSignedIn, KindSignInFailed, KindAdminCreated,
}

// auditFilter reads the audit page's query: the view, tenant, kind and page
// cursor. A kind outside the fixed lists, or a view that is neither, is a
// 400 naming what is accepted.
func auditFilter(c echo.Context) (audit.Filter, string, error) {
	f := audit.Filter{
		TenantID: strings.TrimSpace(c.QueryParam("tenant")),
		Kind:     strings.TrimSpace(c.QueryParam("kind")),
		Limit:    auditPerPage,
	}
	if c.QueryParam("page") != "" {
		// The list is paged by entry number, so that entries written
		// meanwhile move nothing; a page number would be answered with the
		// first page as if it were the one asked for.
		return f, "", badRequest("The audit log has no page numbers (page): follow \"Older entries\", which pages by entry number (before).")
	}
	if b := c.QueryParam("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return f, "", badRequest("The page cursor must be an entry number.")
		}
		f.Before = n
	}
	view := c.QueryParam("view")
	kindView := ""
	switch {
	case f.Kind == "":
	case slices.Contains(refusalKinds, f.Kind):
		kindView = auditRefusals
	case slices.Contains(changeKinds, f.Kind):
		kindView = auditChanges
	default:
		return f, "", badRequest("Unknown kind (kind): choose one of the list, " + strings.Join(append(slices.Clone(changeKinds), refusalKinds...), ", ") + ".")
	}
	if view != "" && kindView != "" && view != kindView {
		return f, "", badRequest("Kind " + f.Kind + " (kind) is listed in the " + kindView + " view (view), not in " + view + ".")
	}
	view = cmp.Or(view, kindView)
	switch view {
	case "", auditChanges:
		view = auditChanges
		f.NotKinds = refusalKinds
	case auditRefusals:
		f.Kinds = refusalKinds
	default:
		return f, "", badRequest("The audit log's view (view) is changes or refusals.")
	}
	return f, view, nil
}

// auditPage lists audit entries, newest first, by view, tenant and kind.
func (d *Dashboard) auditPage(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	f, view, err := auditFilter(c)
	if err != nil {
		return err
	}
	es, err := d.cfg.Audit.List(ctx, f)
	if err != nil {
		return err
	}
	v := web.AuditView{Chrome: d.chrome(s, "Audit log", "audit"), View: view, TenantFilter: f.TenantID, KindFilter: f.Kind}
	kinds := changeKinds
	if view == auditRefusals {
		kinds = refusalKinds
	}
	for _, k := range kinds {
		v.Kinds = append(v.Kinds, web.Option{Value: k, Label: k, Selected: k == f.Kind})
	}
	for _, t := range []struct{ view, label string }{{auditChanges, "Changes and sign-ins"}, {auditRefusals, "Refusals"}} {
		q := url.Values{"view": {t.view}}
		if f.TenantID != "" {
			q.Set("tenant", f.TenantID)
		}
		v.Tabs = append(v.Tabs, web.Tab{Label: t.label, Href: "/admin/audit?" + q.Encode(), Current: t.view == view, TestID: "audit-tab-" + t.view})
	}
	names := d.tenantNames(ctx, es)
	for _, e := range es {
		r := web.AuditRow{ID: strconv.FormatInt(e.ID, 10), At: when(e.At), Actor: e.Actor, Kind: e.Kind, Detail: detailPairs(e.Detail)}
		if e.Kind == audit.KindRefusalFlood {
			if text, ok := floodText(e.Detail); ok {
				r.Flood, r.Detail = text, nil
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
		q := url.Values{"before": {strconv.FormatInt(es[len(es)-1].ID, 10)}, "view": {view}}
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
	case view == auditRefusals:
		v.Empty = "No refusals recorded. The first refusal of each counter in each window shows here, and a tenant's refusals past its budget of a minute in one flood entry."
	default:
		v.Empty = "No changes yet. Entries appear when an operator changes limits, keys, policies or plans, when an operator signs in or fails to, when billing changes a tenant, and when a tenant changes its policies."
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

// detailPairs writes an entry's detail for reading: one "key: value" pair
// per member in key order, a nested object's members as "key value" pairs
// in braces, null as "none".
func detailPairs(d map[string]any) []web.KV {
	keys := slices.Sorted(maps.Keys(d))
	out := make([]web.KV, 0, len(keys))
	for _, k := range keys {
		var b strings.Builder
		writeValue(&b, d[k])
		out = append(out, web.KV{Key: k, Value: b.String()})
	}
	return out
}

func writeValue(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("none")
	case string:
		b.WriteString(v)
	case map[string]any:
		b.WriteString("{")
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k + ": ")
			writeValue(b, v[k])
		}
		b.WriteString("}")
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
