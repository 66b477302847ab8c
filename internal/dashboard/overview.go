package dashboard

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/web"
)

// topN is the length of the overview's top-tenant lists.
const topN = 5

// refreshEvery is how often the overview reloads itself when the operator
// asks it to (?refresh=30). It never does unasked: a page that reloads
// under its reader is a WCAG 2.2.1 failure (axe-core's meta-refresh rule),
// so the reload is a link the operator follows and can leave.
const refreshEvery = 30

// overview shows the last hour and day of /v1/check traffic by outcome,
// refusals by layer, degraded periods and the busiest tenants.
func (d *Dashboard) overview(c echo.Context, s *signedIn) error {
	ctx := c.Request().Context()
	now := d.now().UTC()
	until := now.Truncate(time.Minute).Add(time.Minute)
	dayFrom := until.Add(-24 * time.Hour)
	hourFrom := until.Add(-time.Hour)

	rows, err := d.cfg.Traffic.Traffic(ctx, "", dayFrom, until)
	if err != nil {
		return err
	}
	degraded, err := d.cfg.Traffic.DegradedMinutes(ctx, dayFrom, until)
	if err != nil {
		return err
	}
	byChecks, byRefusals, err := d.cfg.Traffic.TopTenants(ctx, dayFrom, until, topN)
	if err != nil {
		return err
	}

	v := web.OverviewView{Chrome: d.chrome(s, "Overview", "overview"), Now: now.Format("15:04"), RefreshEvery: refreshEvery}
	switch c.QueryParam("refresh") {
	case "":
	case strconv.Itoa(refreshEvery):
		v.RefreshSeconds = refreshEvery
	default:
		return badRequest(fmt.Sprintf("The overview refreshes every %d seconds (?refresh=%d) or not at all.", refreshEvery, refreshEvery))
	}
	if len(rows) == 0 {
		v.NoTraffic = "No checks in the last 24 hours. Create a tenant (tollgate tenants create --name NAME) and call POST /v1/check with its key, or start the server with `tollgate serve --demo` for a demo tenant with live traffic."
	}

	hourSeries, hourTotals := minuteSeries(rows, hourFrom, 60)
	v.Hour = web.Chart{
		ID: "chart-hour", Title: "Checks per minute, last hour", YUnit: "checks per minute", XLabel: "time (UTC)",
		Kind: web.StackedBars, Columns: 60, Series: hourSeries, XTicks: clockTicks(hourFrom, 60, 10*time.Minute),
		Bands: degradedBands(degraded, hourFrom, 60),
	}
	v.Hour.Summary = chartSummary(hourTotals, "in the last hour")
	v.HourTotals = outcomeTotals(hourTotals)

	daySeries, dayTotals := minuteSeries(rows, dayFrom, 24*60)
	v.Day = web.Chart{
		ID: "chart-day", Title: "Checks per minute, last 24 hours", YUnit: "checks per minute", XLabel: "time (UTC)",
		Kind: web.StackedArea, Columns: 24 * 60, Series: daySeries, XTicks: clockTicks(dayFrom, 24*60, 3*time.Hour),
		Bands: degradedBands(degraded, dayFrom, 24*60),
	}
	v.Day.Summary = chartSummary(dayTotals, "in the last 24 hours")
	v.DayTotals = outcomeTotals(dayTotals)
	if len(rows) == 0 {
		v.Hour.Empty = "No checks in the last hour."
		v.Day.Empty = "No checks in the last 24 hours."
	}
	v.Refusals = refusalBars("refusals-by-layer", "Refused checks by layer", "refused checks", dayTotals,
		"No refusals in the last 24 hours: every check was allowed.")
	v.Degraded = degradedPeriods(degraded)
	for _, t := range byChecks {
		v.TopChecks = append(v.TopChecks, topTenant(t))
	}
	for _, t := range byRefusals {
		v.TopRefused = append(v.TopRefused, topTenant(t))
	}
	return render(c, http.StatusOK, web.Overview(v))
}

func topTenant(t traffic.TenantTraffic) web.TopTenant {
	return web.TopTenant{Name: t.Name, Href: "/admin/tenants/" + t.TenantID, Checks: count(t.Checks), Refusals: count(t.Refusals)}
}
