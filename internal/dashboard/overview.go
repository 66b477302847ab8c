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

// chartSummary says a chart's totals in a sentence.
func chartSummary(totals map[string]int64, span string) string {
	var all, refused int64
	for o, n := range totals {
		all += n
		if o != "allowed" {
			refused += n
		}
	}
	return fmt.Sprintf("%s checks %s, %s refused (%s).", count(all), span, count(refused), share(refused, all))
}

// degradedBands shades the degraded minutes among the columns from `from`,
// runs of consecutive minutes as one band.
func degradedBands(ds []traffic.Degraded, from time.Time, columns int) []web.Band {
	var bands []web.Band
	for _, p := range runs(ds) {
		a := int(p.from.Sub(from) / time.Minute)
		b := int(p.to.Sub(from)/time.Minute) + 1
		if b <= 0 || a >= columns {
			continue
		}
		bands = append(bands, web.Band{From: max(a, 0), To: min(b, columns),
			Label: fmt.Sprintf("degraded %s to %s: %s answers", p.from.UTC().Format("15:04"), p.to.Add(time.Minute).UTC().Format("15:04"), count(p.answers))})
	}
	return bands
}

// period is a run of consecutive degraded minutes: from the first minute's
// start to the last minute's start.
type period struct {
	from, to time.Time
	minutes  int
	answers  int64
}

func runs(ds []traffic.Degraded) []period {
	var ps []period
	for _, d := range ds {
		if n := len(ps); n > 0 && d.Minute.Sub(ps[n-1].to) == time.Minute {
			ps[n-1].to = d.Minute
			ps[n-1].minutes++
			ps[n-1].answers += d.Answers
			continue
		}
		ps = append(ps, period{from: d.Minute, to: d.Minute, minutes: 1, answers: d.Answers})
	}
	return ps
}

// degradedPeriods lists the runs, newest first.
func degradedPeriods(ds []traffic.Degraded) []web.DegradedPeriod {
	ps := runs(ds)
	out := make([]web.DegradedPeriod, 0, len(ps))
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		out = append(out, web.DegradedPeriod{
			From: p.from.UTC().Format("2 Jan 15:04"), To: p.to.Add(time.Minute).UTC().Format("2 Jan 15:04"),
			Minutes: count(int64(p.minutes)), Answers: count(p.answers),
		})
	}
	return out
}
