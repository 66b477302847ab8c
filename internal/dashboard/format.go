package dashboard

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/web"
)

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

const (
	timeFormat = "2006-01-02 15:04 UTC"
	dayFormat  = "2 Jan"
)

// when writes an instant for a table, in UTC; the zero time is "never".
func when(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(timeFormat)
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return when(*t)
}

func count(n int64) string { return web.Count(n) }

// share writes part of total as a percentage.
func share(part, total int64) string {
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

// statusClass colours a billing status: in good standing, retrying, or
// held to starter.
func statusClass(status string) string {
	switch status {
	case tenant.StatusActive, tenant.StatusTrialing, "":
		return "b-good"
	case tenant.StatusPastDue:
		return "b-warn"
	}
	return "b-bad"
}

// usageBar draws used against an allotment; nil is unlimited.
func usageBar(used int64, allotment *int64) web.UsageBar {
	u := web.UsageBar{Used: count(used)}
	if allotment == nil {
		u.Label = count(used) + " (unlimited)"
		return u
	}
	a := *allotment
	u.Allotment = count(a)
	u.Percent = min(float64(used)/float64(a)*100, 100)
	u.Over = used >= a
	u.Label = fmt.Sprintf("%s of %s (%s)", count(used), count(a), share(used, a))
	return u
}

// minuteSeries turns per-minute counts into one series per outcome over
// the columns from `from`, one a minute; outcomes without any count are left
// out. It also returns the totals per outcome, in chart order.
func minuteSeries(rows []traffic.MinuteCount, from time.Time, columns int) ([]web.Series, map[string]int64) {
	values := map[string][]float64{}
	totals := map[string]int64{}
	for _, r := range rows {
		i := int(r.Minute.Sub(from) / time.Minute)
		if i < 0 || i >= columns {
			continue
		}
		if values[r.Outcome] == nil {
			values[r.Outcome] = make([]float64, columns)
		}
		values[r.Outcome][i] += float64(r.Count)
		totals[r.Outcome] += r.Count
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

// outcomeTotals lists totals in chart order with their shares.
func outcomeTotals(totals map[string]int64) []web.OutcomeTotal {
	var all int64
	for _, n := range totals {
		all += n
	}
	var out []web.OutcomeTotal
	for _, o := range outcomes {
		if n, ok := totals[o.name]; ok {
			out = append(out, web.OutcomeTotal{Outcome: o.name, Label: o.label, Class: o.class, Count: count(n), Share: share(n, all)})
		}
	}
	return out
}

// clockTicks labels the minute columns from `from` every `every`.
func clockTicks(from time.Time, columns int, every time.Duration) []web.Tick {
	var ts []web.Tick
	for i := range columns {
		t := from.Add(time.Duration(i) * time.Minute)
		if t.Sub(t.Truncate(every)) == 0 {
			ts = append(ts, web.Tick{Column: i, Label: t.UTC().Format("15:04")})
		}
	}
	return ts
}

// refusalBars draws refusal totals by layer, largest first.
func refusalBars(id, title, unit string, totals map[string]int64, empty string) web.HBars {
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
	h.Summary = fmt.Sprintf("%s %s in all; most by %s (%s).", count(all), unit, h.Rows[0].Label, count(h.Rows[0].Value))
	return h
}

func sortBars(rows []web.HBar) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j].Value > rows[j-1].Value; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}
