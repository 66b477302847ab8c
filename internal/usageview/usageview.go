// Package usageview builds the views of a tenant's usage that both the
// operator dashboard's tenant page and the tenants' console show: the
// month's usage bar, the checks per minute and per day, refusals by layer,
// alerts, budgets and degraded periods. Both consoles share these builders
// and web's chart components, not copies of them.
package usageview

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/web"
)

const (
	timeFormat = "2006-01-02 15:04 UTC"
	dayFormat  = "2 Jan"
)

func count(n int64) string { return web.Count(n) }

// outcomes are the usage outcomes in the order charts stack them, with
// their words and colours.
var outcomes = []struct{ name, label, class string }{
	{admission.OutcomeAllowed, "allowed", "s-allowed"},
	{admission.LayerPolicy, "refused by a tenant policy", "s-policy"},
	{admission.LayerIP, "refused: per-IP limit", "s-ip"},
	{admission.LayerQuota, "refused: tenant quota", "s-quota"},
	{admission.LayerAllotment, "refused: monthly allotment", "s-allotment"},
	{admission.LayerSandbox, "refused: sandbox allotment", "s-sandbox"},
	{admission.LayerInstance, "refused: instance ceiling", "s-instance"},
}

// layerLabel names a refusing layer briefly, for bar labels.
func layerLabel(outcome string) string {
	switch outcome {
	case admission.LayerPolicy:
		return "tenant policy"
	case admission.LayerIP:
		return "per-IP"
	case admission.LayerQuota:
		return "tenant quota"
	case admission.LayerAllotment:
		return "allotment"
	case admission.LayerSandbox:
		return "sandbox"
	case admission.LayerInstance:
		return "instance"
	}
	return outcome
}

func outcomeClass(outcome string) string {
	for _, o := range outcomes {
		if o.name == outcome {
			return o.class
		}
	}
	return "s-policy"
}

// When writes an instant for a table, in UTC; the zero time is "never".
func When(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(timeFormat)
}

// WhenPtr writes an instant that may be missing: nil is "never".
func WhenPtr(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return When(*t)
}

// Share writes part of total as a percentage.
func Share(part, total int64) string {
	if total <= 0 {
		return "0%"
	}
	p := float64(part) / float64(total) * 100
	switch {
	case p == 0:
		return "0%"
	case p < 0.1:
		return "<0.1%"
	case p < 10:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// UsageBar draws used against an allotment; nil is unlimited.
func UsageBar(used int64, allotment *int64) web.UsageBar {
	u := web.UsageBar{Used: count(used)}
	if allotment == nil {
		u.Label = count(used) + " (unlimited)"
		return u
	}
	a := *allotment
	u.Allotment = count(a)
	u.Percent = min(float64(used)/float64(a)*100, 100)
	u.Over = used >= a
	u.Label = fmt.Sprintf("%s of %s (%s)", count(used), count(a), Share(used, a))
	return u
}

// MinuteSeries turns per-minute counts into one series per outcome over
// the columns from `from`, one a minute; outcomes without any count are left
// out. It also returns the totals per outcome, in chart order.
func MinuteSeries(rows []traffic.MinuteCount, from time.Time, columns int) ([]web.Series, map[string]int64) {
	return outcomeSeries(len(rows), func(i int) (time.Time, string, int64) { return rows[i].Minute, rows[i].Outcome, rows[i].Count }, from, columns, time.Minute)
}

// DaySeries is MinuteSeries of per-day counts: one column a UTC day from
// `from`.
func DaySeries(rows []traffic.DayOutcome, from time.Time, columns int) ([]web.Series, map[string]int64) {
	return outcomeSeries(len(rows), func(i int) (time.Time, string, int64) { return rows[i].Day, rows[i].Outcome, rows[i].Count }, from, columns, 24*time.Hour)
}

// outcomeSeries buckets n rows (row gives each one's instant, outcome and
// count) into columns of step from `from`, one series per outcome.
func outcomeSeries(n int, row func(int) (time.Time, string, int64), from time.Time, columns int, step time.Duration) ([]web.Series, map[string]int64) {
	values := map[string][]float64{}
	totals := map[string]int64{}
	for k := range n {
		at, outcome, c := row(k)
		i := int(at.Sub(from) / step)
		if i < 0 || i >= columns {
			continue
		}
		if values[outcome] == nil {
			values[outcome] = make([]float64, columns)
		}
		values[outcome][i] += float64(c)
		totals[outcome] += c
	}
	var out []web.Series
	for _, o := range outcomes {
		if v := values[o.name]; v != nil {
			out = append(out, web.Series{Name: o.label, Class: o.class, Values: v})
			delete(values, o.name)
		}
	}
	// An outcome this dashboard does not know yet still shows.
	for name, v := range values {
		out = append(out, web.Series{Name: name, Class: "s-policy", Values: v})
	}
	return out, totals
}

// OutcomeTotals lists totals in chart order with their shares.
func OutcomeTotals(totals map[string]int64) []web.OutcomeTotal {
	var all int64
	for _, n := range totals {
		all += n
	}
	var out []web.OutcomeTotal
	for _, o := range outcomes {
		if n, ok := totals[o.name]; ok {
			out = append(out, web.OutcomeTotal{Outcome: o.name, Label: o.label, Class: o.class, Count: count(n), Share: Share(n, all)})
		}
	}
	return out
}

// ClockTicks labels the minute columns from `from` every `every`.
func ClockTicks(from time.Time, columns int, every time.Duration) []web.Tick {
	var ts []web.Tick
	for i := range columns {
		t := from.Add(time.Duration(i) * time.Minute)
		if t.Sub(t.Truncate(every)) == 0 {
			ts = append(ts, web.Tick{Column: i, Label: t.UTC().Format("15:04")})
		}
	}
	return ts
}

// RefusalBars draws refusal totals by layer, largest first.
func RefusalBars(id, title, unit string, totals map[string]int64, empty string) web.HBars {
	h := web.HBars{ID: id, Title: title, Unit: unit}
	var all int64
	for _, o := range outcomes[1:] {
		if n := totals[o.name]; n > 0 {
			h.Rows = append(h.Rows, web.HBar{Label: layerLabel(o.name), Value: n, Class: o.class})
			all += n
		}
	}
	for name, n := range totals {
		if name != admission.OutcomeAllowed && outcomeClass(name) == "s-policy" && name != admission.LayerPolicy && n > 0 {
			h.Rows = append(h.Rows, web.HBar{Label: name, Value: n, Class: "s-policy"})
			all += n
		}
	}
	if len(h.Rows) == 0 {
		h.Empty = empty
		return h
	}
	sortBars(h.Rows)
	h.Summary = fmt.Sprintf("%s %s in all; most by %s (%s).", count(all), unitOf(all, unit), h.Rows[0].Label, count(h.Rows[0].Value))
	return h
}

// unitOf is unit, a plural such as "refused requests", as n counts it:
// singular for one.
func unitOf(n int64, unit string) string {
	if n == 1 {
		return strings.TrimSuffix(unit, "s")
	}
	return unit
}

func sortBars(rows []web.HBar) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j].Value > rows[j-1].Value; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// ChartSummary says a chart's totals in a sentence.
func ChartSummary(totals map[string]int64, span string) string {
	var all, refused int64
	for o, n := range totals {
		all += n
		if o != "allowed" {
			refused += n
		}
	}
	return fmt.Sprintf("%s checks %s, %s refused (%s).", count(all), span, count(refused), Share(refused, all))
}

// DegradedBands shades the degraded minutes among the columns from `from`,
// runs of consecutive minutes as one band.
func DegradedBands(ds []traffic.Degraded, from time.Time, columns int) []web.Band {
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

// DegradedPeriods lists the runs, newest first.
func DegradedPeriods(ds []traffic.Degraded) []web.DegradedPeriod {
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

// AlertRows shows a tenant's alerts; an aggregate alert counts the subjects
// past the day's alert budget.
func AlertRows(alerts []alert.Alert) []web.AlertRow {
	var rows []web.AlertRow
	for _, a := range alerts {
		row := web.AlertRow{
			Policy: a.Policy, Subject: shortDigest(a.SubjectKey), Count: count(a.Count), AlertAfter: count(a.AlertAfter),
			First: When(a.FirstAt), Last: When(a.LastAt), Shadow: a.Shadow,
		}
		if a.SubjectKey == alert.AggregateSubject {
			row.Aggregate = true
			row.Subject = count(a.Subjects) + " more subjects, past the day's alert budget"
			if a.Unwatched > 0 {
				row.Subject += ", and " + count(a.Unwatched) + " refusals of subjects past its watch budget"
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// shortDigest shortens a counter-key digest for display; the whole key is
// in its title.
func shortDigest(k string) string {
	if i := strings.LastIndexByte(k, ':'); i >= 0 {
		k = k[i+1:]
	}
	if len(k) > 16 {
		return k[:16] + "…"
	}
	return k
}

// MonthChart draws this month's live checks, cumulative by day, against the
// allotment: where the tenant stands, and how fast it gets there.
func MonthChart(days []traffic.DayCount, ms, now time.Time, allotment *int64) web.Chart {
	n := ms.AddDate(0, 1, 0).Sub(ms) / (24 * time.Hour)
	columns := int(n)
	today := int(now.Sub(ms) / (24 * time.Hour))
	perDay := make([]float64, columns)
	var total int64
	for _, d := range days {
		if i := int(d.Day.Sub(ms) / (24 * time.Hour)); i >= 0 && i < columns {
			perDay[i] += float64(d.Count)
			total += d.Count
		}
	}
	cum := make([]float64, columns)
	run := 0.0
	for i := 0; i <= today && i < columns; i++ {
		run += perDay[i]
		cum[i] = run
	}
	c := web.Chart{
		ID: "chart-tenant-month", Title: "Live checks this month, cumulative, against the allotment",
		YUnit: "live checks", XLabel: "day of " + ms.Format("January 2006") + " (UTC)",
		Kind: web.StackedBars, Columns: columns,
		Series: []web.Series{{Name: "live checks so far", Class: "s-checks", Values: cum}},
	}
	for i := 0; i < columns; i++ {
		if day := i + 1; day == 1 || day%5 == 0 {
			c.XTicks = append(c.XTicks, web.Tick{Column: i, Label: ms.AddDate(0, 0, i).Format(dayFormat)})
		}
	}
	if allotment != nil {
		c.Lines = []web.RefLine{{Value: float64(*allotment), Label: "allotment " + count(*allotment), Class: "allotment-line"}}
		c.Summary = fmt.Sprintf("%s live checks so far this month, %s of the allotment of %s.", count(total), Share(total, *allotment), count(*allotment))
	} else {
		c.Summary = fmt.Sprintf("%s live checks so far this month; the plan has no monthly cap.", count(total))
	}
	return c
}

// BudgetView shows the budget p as bs says it stands.
func BudgetView(p policy.Policy, bs map[string]gate.Budget) *web.BudgetView {
	if p.Scope != policy.ScopeGlobal {
		return &web.BudgetView{Note: "a budget of " + p.Unit + " per subject: GET /v1/usage?subject= shows one"}
	}
	b, ok := bs[p.Name]
	if !ok {
		return &web.BudgetView{Note: "budget: unavailable"}
	}
	amount := func(n int64) string { return count(n) + " " + p.Unit }
	v := &web.BudgetView{Spent: amount(b.Spent), Reserved: amount(b.Reserved), Left: amount(b.Left)}
	if b.Limit > 0 {
		v.Meter = min(1, float64(b.Limit-b.Left)/float64(b.Limit))
	}
	return v
}
