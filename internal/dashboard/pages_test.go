package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/logbuf"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/pgtest"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/usage"
)

// tenantWith creates a tenant on plan with a live and a test key.
func (e *env) tenantWith(name, plan string) (tenant.Tenant, []tenant.Key) {
	e.t.Helper()
	_, live, _ := tenant.NewKey(false)
	_, test, _ := tenant.NewKey(true)
	tn, err := e.tenants.CreateTenant(context.Background(), name, plan, live, test)
	if err != nil {
		e.t.Fatal(err)
	}
	keys, err := e.tenants.Keys(context.Background(), tn.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return tn, keys
}

// record records counts of outcome for tenantID, minutesAgo minutes back.
func (e *env) record(tenantID string, minutesAgo int, outcome string, n int64) {
	e.t.Helper()
	m := time.Now().UTC().Truncate(time.Minute).Add(-time.Duration(minutesAgo) * time.Minute)
	err := e.usage.AddUsage(context.Background(), uuid.NewString(), []usage.Row{{TenantID: tenantID, Minute: m, Live: true, Checked: true, Outcome: outcome, Count: n}})
	if err != nil {
		e.t.Fatal(err)
	}
}

func TestPagesShowTheData(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, keys := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	globex, _ := e.tenantWith("Globex", tenant.PlanPro)
	policies := pgstore.NewPolicies(e.pool)
	p, err := policy.Parse("sign-in-ip", []byte(`{"limit":10,"window":"1m","alert_after":5,"shadow":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policies.PutPolicy(ctx, acme.ID, p); err != nil {
		t.Fatal(err)
	}
	o, _ := policy.ParseOverride("vip-*", []byte(`{"limit":100}`))
	if _, err := policies.PutOverride(ctx, acme.ID, "sign-in-ip", o); err != nil {
		t.Fatal(err)
	}
	e.record(acme.ID, 5, admission.OutcomeAllowed, 40)
	e.record(acme.ID, 5, admission.LayerPolicy, 7)
	e.record(acme.ID, 300, admission.LayerIP, 3)
	e.record(globex.ID, 1, admission.OutcomeAllowed, 90)
	now := time.Now().UTC().Truncate(time.Minute)
	if err := e.traffic.AddDegraded(ctx, map[time.Time]int64{now.Add(-10 * time.Minute): 4, now.Add(-9 * time.Minute): 6, now.Add(-2 * time.Hour): 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.audit.Record(ctx, audit.Entry{TenantID: acme.ID, Actor: "stripe", Kind: "billing_changed", Detail: map[string]any{"after": map[string]any{"plan": "pro"}}}); err != nil {
		t.Fatal(err)
	}

	b := e.browser()
	b.signIn("ops@example.com")

	// Overview: both charts draw bars or areas by outcome, with axes and
	// the degraded minutes; refusals by layer; the busiest tenants.
	ov := b.get("/admin").mustStatus(http.StatusOK)
	hour := picture(t, ov.one("chart-hour"), "chart-wide")
	// The phone's picture draws the same bars.
	if n := len(find(picture(t, ov.one("chart-hour"), "chart-narrow"), rect("s-allowed"))); n != 2 {
		t.Errorf("hour chart for a phone: %d allowed bars, want 2", n)
	}
	if n := len(find(hour, rect("s-allowed"))); n != 2 {
		t.Errorf("hour chart: %d allowed bars, want 2 (two minutes)", n)
	}
	if n := len(find(hour, rect("s-policy"))); n != 1 {
		t.Errorf("hour chart: %d policy bars, want 1", n)
	}
	if n := len(find(hour, rect("band"))); n != 1 {
		t.Errorf("hour chart: %d degraded bands, want 1 (two minutes in a row)", n)
	}
	if got := textOf(find(hour, func(n *html.Node) bool { return n.Data == "desc" })[0]); got != "137 checks in the last hour, 7 refused (5.1%)." {
		t.Errorf("hour chart says %q", got)
	}
	assertAxes(t, hour, "checks per minute", "time (UTC)")
	day := picture(t, ov.one("chart-day"), "chart-wide")
	if n := len(find(day, func(n *html.Node) bool { return n.Data == "path" })); n != 3 {
		t.Errorf("day chart: %d areas, want 3 (allowed, policy, ip)", n)
	}
	if n := len(find(day, rect("band"))); n != 2 {
		t.Errorf("day chart: %d degraded bands, want 2", n)
	}
	if got := ov.text("day-totals-ip"); !strings.HasPrefix(got, "refused: per-IP limit 3") {
		t.Errorf("day totals, ip: %q", got)
	}
	if n := len(ov.all("degraded-period")); n != 2 {
		t.Errorf("%d degraded periods, want 2", n)
	}
	bars := ov.one("refusals-by-layer")
	if got := textOf(find(bars, func(n *html.Node) bool { return n.Data == "desc" })[0]); got != "10 refused checks in all; most by tenant policy (7)." {
		t.Errorf("refusals by layer: %q", got)
	}
	if got := rowsText(ov.one("top-checks")); got != "Globex 90 0 | Acme Rockets 50 10" {
		t.Errorf("top by checks: %q", got)
	}
	if got := rowsText(ov.one("top-refused")); got != "Acme Rockets 50 10" {
		t.Errorf("top by refusals: %q", got)
	}
	if ov.header.Get("Cache-Control") != "no-store" || !strings.Contains(ov.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("headers %v", ov.header)
	}

	// Tenants: plan, effective plan, billing and the month's checks against
	// the allotment.
	list := b.get("/admin/tenants").mustStatus(http.StatusOK)
	rows := list.all("tenant-row")
	if len(rows) != 2 {
		t.Fatalf("%d tenant rows", len(rows))
	}
	if attr(rows[0], "data-tenant-id") != acme.ID {
		t.Fatalf("first row %q, want Acme (by name)", attr(rows[0], "data-tenant-id"))
	}
	for id, want := range map[string]string{"plan": "starter", "effective-plan": "starter", "billing-status": "active", "month-usage": "47 of 100,000 (<0.1%)"} {
		if got := textOf(within(rows[0], id)[0]); got != want {
			t.Errorf("Acme %s: %q, want %q", id, got, want)
		}
	}
	if got := textOf(within(rows[1], "month-usage")[0]); got != "90 of 50,000,000 (<0.1%)" {
		t.Errorf("Globex usage %q", got)
	}

	// A tenant's page.
	tp := b.get("/admin/tenants/" + acme.ID).mustStatus(http.StatusOK)
	assertLabelled(t, tp)
	if got := tp.text("tenant-name"); got != "Acme Rockets" {
		t.Fatalf("name %q", got)
	}
	if n := len(find(picture(t, tp.one("chart-tenant-minutes"), "chart-wide"), func(n *html.Node) bool { return n.Data == "path" })); n != 3 {
		t.Errorf("minute chart: %d areas, want 3", n)
	}
	month := picture(t, tp.one("chart-tenant-month"), "chart-wide")
	assertAxes(t, month, "live checks", "day of "+now.Format("January 2006")+" (UTC)")
	if n := len(find(month, cls("allotment-line"))); n == 0 {
		t.Error("month chart: no allotment line")
	}
	if got := tp.text("month-usage"); got != "47 of 100,000 (<0.1%)" {
		t.Errorf("month usage %q", got)
	}
	if got := len(tp.all("key-row")); got != len(keys) {
		t.Errorf("%d key rows, want %d", got, len(keys))
	}
	pol := tp.one("policy-row")
	if got := textOf(pol); !strings.Contains(got, "sign-in-ip shadow 10 1m fixed_window subject open 5 vip-*: 100 (no expiry)") {
		t.Errorf("policy row %q", got)
	}
	if got := tp.text("stripe-customer-none"); got == "" {
		t.Error("no billing state for a tenant without a Stripe customer")
	}
	if href := attr(tp.one("tenant-audit-link"), "href"); href != "/admin/audit?tenant="+acme.ID {
		t.Errorf("audit link %q", href)
	}

	// Plans: the five rows, each its own form with a token.
	pl := b.get("/admin/plans").mustStatus(http.StatusOK)
	assertLabelled(t, pl)
	if n := len(pl.all("plan-row")); n != 5 {
		t.Errorf("%d plan rows", n)
	}

	// Audit: entries with their tenant's name, filterable.
	au := b.get("/admin/audit?tenant=" + acme.ID).mustStatus(http.StatusOK)
	if got := rowsText(au.one("audit")); !strings.Contains(got, "billing_changed Acme Rockets stripe after {plan: pro}") {
		t.Errorf("audit rows %q", got)
	}
	if n := len(b.get("/admin/audit?kind=admin_signed_in").all("audit-row")); n != 1 {
		t.Errorf("sign-ins audited: %d, want 1", n)
	}
	if b.get("/admin/audit?tenant="+globex.ID+"&kind=billing_changed").text("audit-empty") == "" {
		t.Error("no empty state for a filter that matches nothing")
	}
}

func TestEmptyStatesSayWhatToDo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	for path, ids := range map[string][]string{
		"/admin":                         {"overview-empty", "chart-hour-empty", "chart-day-empty", "refusals-by-layer-empty", "degraded-empty", "top-checks-empty", "top-refused-empty"},
		"/admin/tenants":                 {"tenants-empty"},
		"/admin/webhooks":                {"webhooks-unavailable"},
		"/admin/audit?kind=plan_changed": {"audit-empty"},
	} {
		p := b.get(path).mustStatus(http.StatusOK)
		for _, id := range ids {
			if p.text(id) == "" {
				t.Errorf("%s: no empty state %s", path, id)
			}
		}
	}
	tn, _ := e.tenantWith("Quiet", tenant.PlanStarter)
	tp := b.get("/admin/tenants/" + tn.ID).mustStatus(http.StatusOK)
	for _, id := range []string{"chart-tenant-minutes-empty", "refusals-tenant-empty", "policies-empty", "alerts-empty", "tenant-events-empty"} {
		if tp.text(id) == "" {
			t.Errorf("tenant page: no empty state %s", id)
		}
	}
	if !strings.Contains(b.get("/admin/tenants?q=nothing-like-it").text("tenants-empty"), "nothing-like-it") {
		t.Error("a search without matches does not say what was searched")
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	for _, path := range []string{"/admin/tenants/" + uuid.NewString(), "/admin/tenants/not-a-uuid", "/admin/no-such-page"} {
		p := b.get(path).mustStatus(http.StatusNotFound)
		if p.text("error-title") != "Not found" || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: %q %q", path, p.text("error-title"), p.header.Get("Content-Type"))
		}
	}
	// Signed out, nothing is told about what exists.
	e.browser().get("/admin/no-such-page").mustStatus(http.StatusSeeOther)
}

func TestTenantSearchAndPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	for i := range 30 {
		e.tenantWith(fmt.Sprintf("tenant %02d", i), tenant.PlanStarter)
	}
	odd, _ := e.tenantWith("100% pure_fun", tenant.PlanPro)
	b := e.browser()
	b.signIn("ops@example.com")
	p1 := b.get("/admin/tenants").mustStatus(http.StatusOK)
	if n := len(p1.all("tenant-row")); n != 25 {
		t.Fatalf("page 1: %d rows", n)
	}
	if p1.text("page-label") != "Page 1 of 2" || len(p1.all("prev-page")) != 0 {
		t.Fatalf("page 1 label %q", p1.text("page-label"))
	}
	next := attr(p1.one("next-page"), "href")
	p2 := b.get(next).mustStatus(http.StatusOK)
	if n := len(p2.all("tenant-row")); n != 6 {
		t.Fatalf("page 2: %d rows", n)
	}
	for q, want := range map[string]int{"TENANT 07": 1, "tenant": 30, "%": 1, "_": 1, odd.ID: 1, "zzz": 0} {
		p := b.get("/admin/tenants?q=" + url.QueryEscape(q)).mustStatus(http.StatusOK)
		if n := len(p.all("tenant-row")); n != min(want, 25) {
			t.Errorf("search %q: %d rows, want %d", q, n, min(want, 25))
		}
	}
}

var liveKey = regexp.MustCompile(`^tg_live_[0-9A-Za-z]{12}_[0-9A-Za-z]{32}$`)

func TestLimitsKeysAndPlansAreAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	other, otherKeys := e.tenantWith("Other", tenant.PlanStarter)
	b := e.browser()
	b.signIn("ops@example.com")
	path := "/admin/tenants/" + acme.ID
	csrf := b.csrf(path)

	// Limits: a post without the token changes nothing.
	b.post(path+"/limits", url.Values{"rate_limit_per_minute": {"5"}}).mustStatus(http.StatusForbidden)
	// A bad value is shown back with the reason, and changes nothing.
	p := b.post(path+"/limits", url.Values{"csrf": {csrf}, "rate_limit_per_minute": {"-3"}}).mustStatus(http.StatusBadRequest)
	if !strings.Contains(p.text("limits-error"), "Per-IP requests per minute") {
		t.Errorf("error %q", p.text("limits-error"))
	}
	if tn, _ := e.tenants.Tenant(ctx, acme.ID); tn.RateLimitPerMinute != 0 {
		t.Fatalf("a refused form changed the limit to %d", tn.RateLimitPerMinute)
	}
	p = b.post(path+"/limits", url.Values{"csrf": {csrf}, "rate_limit_per_minute": {"5"}, "quota_per_minute": {""}, "quota_per_hour": {"1,000"}}).mustStatus(http.StatusSeeOther)
	tn, _ := e.tenants.Tenant(ctx, acme.ID)
	if tn.RateLimitPerMinute != 5 || tn.QuotaPerMinute != nil || tn.QuotaPerHour == nil || *tn.QuotaPerHour != 1000 {
		t.Fatalf("limits stored: %+v", tn)
	}
	after := b.get(p.header.Get("Location")).mustStatus(http.StatusOK)
	if after.text("flash") == "" || !strings.Contains(after.text("limits-last-change"), "ops@example.com") {
		t.Errorf("after saving: flash %q, last change %q", after.text("flash"), after.text("limits-last-change"))
	}
	if got := after.inputValue("rate_limit_per_minute"); got != "5" {
		t.Errorf("form shows %q", got)
	}
	es, _ := e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kind: "tenant_limits_changed"})
	if len(es) != 1 || es[0].Actor != "ops@example.com" || fmt.Sprint(es[0].Detail["after"]) != "map[quota_per_hour:1000 quota_per_minute:<nil> rate_limit_per_minute:5]" ||
		fmt.Sprint(es[0].Detail["before"]) != "map[quota_per_hour:<nil> quota_per_minute:<nil> rate_limit_per_minute:<nil>]" {
		t.Fatalf("audit %+v", es)
	}

	// Keys: created, shown once; revoked.
	p = b.post(path+"/keys", url.Values{"csrf": {csrf}, "mode": {"live"}}).mustStatus(http.StatusOK)
	raw := p.text("new-key-value")
	if !liveKey.MatchString(raw) {
		t.Fatalf("new key %q", raw)
	}
	if strings.Contains(b.get(path).body, raw) {
		t.Fatal("the key shows again on the next visit")
	}
	prefix := strings.Split(raw, "_")[2]
	k, err := e.tenants.KeyByPrefix(ctx, prefix)
	if err != nil || k.TenantID != acme.ID {
		t.Fatalf("stored key %+v: %v", k, err)
	}
	b.post(path+"/keys/"+k.ID+"/revoke", url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	if k, _ = e.tenants.KeyByPrefix(ctx, prefix); k.RevokedAt == nil {
		t.Fatal("key not revoked")
	}
	// Another tenant's key is not revoked from this page.
	b.post(path+"/keys/"+otherKeys[0].ID+"/revoke", url.Values{"csrf": {csrf}}).mustStatus(http.StatusNotFound)
	if ks, _ := e.tenants.Keys(ctx, other.ID); ks[0].RevokedAt != nil {
		t.Fatal("another tenant's key was revoked")
	}
	kinds := map[string]int{}
	es, _ = e.audit.List(ctx, audit.Filter{TenantID: acme.ID})
	for _, en := range es {
		kinds[en.Kind]++
	}
	if kinds["key_created"] != 1 || kinds["key_revoked"] != 1 {
		t.Errorf("audit kinds %v", kinds)
	}

	// Plans: saved and audited; a bad row is shown back.
	pcsrf := b.csrf("/admin/plans")
	form := url.Values{"csrf": {pcsrf}, "ip_per_minute": {"700"}, "quota_per_minute": {"1300"}, "quota_per_hour": {"31000"}, "monthly_checks": {"120000"}, "stripe_price_id": {"price_starter"}}
	b.post("/admin/plans/starter", form).mustStatus(http.StatusSeeOther)
	st, _ := e.tenants.Plan(ctx, "starter")
	if st.IPPerMinute != 700 || st.QuotaPerMinute != 1300 || st.QuotaPerHour != 31000 || *st.MonthlyChecks != 120000 || st.StripePriceID != "price_starter" {
		t.Fatalf("starter %+v", st)
	}
	form.Set("unlimited", "1")
	form.Set("monthly_checks", "")
	b.post("/admin/plans/starter", form).mustStatus(http.StatusSeeOther)
	if st, _ = e.tenants.Plan(ctx, "starter"); st.MonthlyChecks != nil {
		t.Fatal("unlimited not saved")
	}
	bad := url.Values{"csrf": {pcsrf}, "ip_per_minute": {"0"}, "quota_per_minute": {"1"}, "quota_per_hour": {"1"}, "monthly_checks": {"1"}}
	p = b.post("/admin/plans/pro", bad).mustStatus(http.StatusBadRequest)
	if !strings.Contains(p.text("plan-error"), "Per-IP") {
		t.Errorf("plan error %q", p.text("plan-error"))
	}
	taken := url.Values{"csrf": {pcsrf}, "ip_per_minute": {"1"}, "quota_per_minute": {"1"}, "quota_per_hour": {"1"}, "monthly_checks": {"1"}, "stripe_price_id": {"price_starter"}}
	p = b.post("/admin/plans/pro", taken).mustStatus(http.StatusBadRequest)
	if !strings.Contains(p.text("plan-error"), "already sells another plan") {
		t.Errorf("plan error %q", p.text("plan-error"))
	}
	if pro, _ := e.tenants.Plan(ctx, "pro"); pro.IPPerMinute != 60000 {
		t.Fatal("a refused plan form changed the plan")
	}
	es, _ = e.audit.List(ctx, audit.Filter{Kind: "plan_changed"})
	if len(es) != 2 || es[0].Actor != "ops@example.com" || es[0].Detail["plan"] != "starter" {
		t.Fatalf("plan audit %+v", es)
	}

	// Every change was handed to the caches.
	want := []string{"tenant:" + acme.ID, "key:" + prefix, "plan:starter", "plan:starter"}
	if got := e.changes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v", got, want)
	}
}

// rect matches the SVG rectangles of class c.
// picture returns a chart's picture of class (chart-wide, chart-narrow).
func picture(t *testing.T, fig *html.Node, class string) *html.Node {
	t.Helper()
	has := cls(class)
	svgs := find(fig, func(n *html.Node) bool { return n.Data == "svg" && has(n) })
	if len(svgs) != 1 {
		t.Fatalf("%d pictures of class %s in chart %s, want 1", len(svgs), class, attr(fig, "data-testid"))
	}
	return svgs[0]
}

func rect(c string) func(*html.Node) bool {
	has := cls(c)
	return func(n *html.Node) bool { return n.Data == "rect" && has(n) }
}

func cls(c string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		for _, f := range strings.Fields(attr(n, "class")) {
			if f == c {
				return true
			}
		}
		return false
	}
}

// rowsText is the text of a table's body rows, joined by " | ".
func rowsText(table *html.Node) string {
	var rows []string
	for _, tr := range find(table, func(n *html.Node) bool { return n.Data == "tr" && n.Parent != nil && n.Parent.Data == "tbody" }) {
		rows = append(rows, textOf(tr))
	}
	return strings.Join(rows, " | ")
}

// assertAxes fails unless the chart's SVG labels its axes.
func assertAxes(t *testing.T, chart *html.Node, y, x string) {
	t.Helper()
	var labels []string
	for _, n := range find(chart, cls("axis-label")) {
		labels = append(labels, textOf(n))
	}
	if fmt.Sprint(labels) != fmt.Sprint([]string{x, y}) {
		t.Errorf("axis labels %q, want x %q and y %q", labels, x, y)
	}
	if len(find(chart, cls("tick"))) < 4 {
		t.Error("chart has fewer than four tick labels")
	}
}

// TestFloodsReadAsOneRow: a tenant's flood of new subjects shows on the
// audit page as its budget of refusal entries and one row that says in words
// how many more there were, and on the tenant's page as its budget of alerts
// and one row counting the other subjects, and the refusals of those past
// the watch budget.
func TestFloodsReadAsOneRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	ctx := context.Background()
	acme, _ := e.tenantWith("Acme Rockets", tenant.PlanStarter)
	rec, err := audit.NewRecorder(audit.RecorderConfig{Store: pgstore.NewAudit(e.pool), AuditBudget: 2, AlertBudget: 3, WatchBudget: 8})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute)
	var refs []admission.Refusal
	for i := range 10 {
		refs = append(refs, admission.Refusal{Layer: admission.LayerPolicy, Policy: "sign-in", Limit: 1, ResetAt: at.Add(time.Minute), Key: fmt.Sprintf("%032x", i), AlertAfter: 1})
	}
	rec.Observe(ctx, admission.Event{At: at.Add(10 * time.Second), TenantID: acme.ID, Outcome: admission.LayerPolicy, Refusals: refs})
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	b := e.browser()
	b.signIn("ops@example.com")
	// The refusals have a view of their own; the changes do not drown in them.
	for _, r := range b.get("/admin/audit?tenant=" + acme.ID).all("audit-row") {
		if k := attr(r, "data-kind"); k == audit.KindRefusal || k == audit.KindRefusalFlood {
			t.Errorf("the changes view lists a %s entry", k)
		}
	}
	au := b.get("/admin/audit?view=refusals&tenant=" + acme.ID).mustStatus(http.StatusOK)
	if n := len(find(au.one("audit"), func(n *html.Node) bool { return attr(n, "data-kind") == audit.KindRefusal })); n != 2 {
		t.Errorf("%d refusal rows, want the budget's 2", n)
	}
	want := fmt.Sprintf("flood 8 more first refusals from %s to %s UTC, past the budget of 2 entries a minute, are not listed one by one.",
		at.Format("15:04"), at.Add(time.Minute).Format("15:04"))
	if got := au.text("audit-flood"); got != want {
		t.Errorf("flood row says %q, want %q", got, want)
	}

	tp := b.get("/admin/tenants/" + acme.ID).mustStatus(http.StatusOK)
	if n := len(tp.all("alert-row")); n != 4 {
		t.Errorf("%d alert rows, want 3 subjects' and one aggregate", n)
	}
	if got := tp.text("alert-aggregate"); got != "5 more subjects, past the day's alert budget, and 2 refusals of subjects past its watch budget" {
		t.Errorf("aggregate alert says %q", got)
	}
}

// TestFailedPageSaysWhatFailed: a tenant's page whose traffic cannot be
// read is a 500 that shows the operator nothing of the cause, and the log
// line names the tenant and what could not be read.
func TestFailedPageSaysWhatFailed(t *testing.T) {
	t.Parallel()
	logs := &logbuf.Buffer{}
	// The traffic store's pool is closed: a real store that fails.
	closed, err := pgxpool.New(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	e := newEnv(t, func(c *dashboard.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.Traffic = pgstore.NewTraffic(closed)
	})
	e.admin("ops@example.com")
	tn, _ := e.tenantWith("Acme", tenant.PlanPro)
	b := e.browser()
	b.signIn("ops@example.com")
	p := b.get("/admin/tenants/" + tn.ID).mustStatus(http.StatusInternalServerError)
	if strings.Contains(p.body, "closed pool") {
		t.Errorf("the page shows the cause:\n%s", p.body)
	}
	if want := "tenant " + tn.ID + ": checks per minute: "; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs)
	}
}

// TestAuditFilters: the kind filter is a select of the kinds Tollgate
// writes; any other kind, or a view that is neither, is a 400 that says
// what is accepted. A refusal kind opens the refusals view.
func TestAuditFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	p := b.get("/admin/audit").mustStatus(http.StatusOK)
	var kinds []string
	for _, o := range find(p.root, func(n *html.Node) bool { return n.Data == "option" }) {
		kinds = append(kinds, attr(o, "value"))
	}
	for _, want := range []string{"", "policy_put", "override_deleted", dashboard.KindSignInFailed, "billing_changed"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("kind filter offers %q, lacks %q", kinds, want)
		}
	}
	if slices.Contains(kinds, audit.KindRefusal) {
		t.Errorf("the changes view's filter offers refusal kinds: %q", kinds)
	}
	for _, q := range []string{"kind=policy_changed", "kind=Refusal", "view=everything", "view=refusals&kind=plan_changed"} {
		p := b.get("/admin/audit?" + q)
		if p.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, p.status)
			continue
		}
		if msg := p.text("error-message"); !strings.Contains(msg, "kind") && !strings.Contains(msg, "view") {
			t.Errorf("%s: 400 says %q", q, msg)
		}
	}
	r := b.get("/admin/audit?kind=refusal_flood").mustStatus(http.StatusOK)
	if attr(r.one("audit-tab-refusals"), "aria-current") != "page" {
		t.Error("a refusal kind does not open the refusals view")
	}
}
