package usageview

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/web"
)

// PolicySource reads a tenant's checks and refusals per policy
// (*usage.PolicyRecorder).
type PolicySource interface {
	PolicyHours(ctx context.Context, tenantID string, from, until time.Time) ([]usage.PolicyHour, error)
	PolicyDays(ctx context.Context, tenantID string, from, until time.Time) ([]usage.PolicyHour, error)
}

// Policy charts' spans and bound.
const (
	policyHours = 24
	policyDays  = 30
	// MaxPolicyCharts bounds the policies whose charts a page draws (a
	// tenant may hold a thousand): the most checked in 30 days. The table
	// lists every policy checked.
	MaxPolicyCharts = 10
)

// PolicyCharts reads tenantID's checks and refusals per policy from src and
// builds them (PolicyUsage) as at now: per hour over the 24 UTC hours up
// to now's, per day over the 30 UTC days up to today. id is the data-testid
// of the whole and the prefix of its charts' ids.
func PolicyCharts(ctx context.Context, src PolicySource, tenantID string, now time.Time, id string) (web.PolicyUsage, error) {
	now = now.UTC()
	until := now.Truncate(time.Hour).Add(time.Hour)
	hourFrom := until.Add(-policyHours * time.Hour)
	dayFrom := now.Truncate(24*time.Hour).AddDate(0, 0, 1-policyDays)
	hours, err := src.PolicyHours(ctx, tenantID, hourFrom, until)
	if err != nil {
		return web.PolicyUsage{}, fmt.Errorf("checks per policy and hour: %w", err)
	}
	days, err := src.PolicyDays(ctx, tenantID, dayFrom, until)
	if err != nil {
		return web.PolicyUsage{}, fmt.Errorf("checks per policy and day: %w", err)
	}
	return PolicyUsage(id, hours, days, hourFrom, dayFrom), nil
}

// policyTotals is one policy's sums and columns.
type policyTotals struct {
	name                     string
	checks24h, refusals24h   int64
	checks30d, refusals30d   int64
	hourChecks, hourRefusals []float64
	dayChecks, dayRefusals   []float64
}

// PolicyUsage builds a tenant's checks and refusals per policy: hours are
// per hour over the 24 hours from hourFrom, days per UTC day over the 30
// days from dayFrom (rows outside are left out). Policies are listed most
// checked in 30 days first, then by name; the first MaxPolicyCharts get
// charts.
func PolicyUsage(id string, hours, days []usage.PolicyHour, hourFrom, dayFrom time.Time) web.PolicyUsage {
	byName := map[string]*policyTotals{}
	get := func(name string) *policyTotals {
		p := byName[name]
		if p == nil {
			p = &policyTotals{name: name,
				hourChecks: make([]float64, policyHours), hourRefusals: make([]float64, policyHours),
				dayChecks: make([]float64, policyDays), dayRefusals: make([]float64, policyDays)}
			byName[name] = p
		}
		return p
	}
	for _, h := range hours {
		i := int(h.At.Sub(hourFrom) / time.Hour)
		if i < 0 || i >= policyHours {
			continue
		}
		p := get(h.Policy)
		p.hourChecks[i] += float64(h.Checks)
		p.hourRefusals[i] += float64(h.Refusals)
		p.checks24h += h.Checks
		p.refusals24h += h.Refusals
	}
	for _, d := range days {
		i := int(d.At.Sub(dayFrom) / (24 * time.Hour))
		if i < 0 || i >= policyDays {
			continue
		}
		p := get(d.Policy)
		p.dayChecks[i] += float64(d.Checks)
		p.dayRefusals[i] += float64(d.Refusals)
		p.checks30d += d.Checks
		p.refusals30d += d.Refusals
	}
	v := web.PolicyUsage{ID: id}
	if len(byName) == 0 {
		v.Empty = "No check named a policy in the last 30 days. Each policy's checks and refusals show here, per hour and per day, once POST /v1/check names it."
		return v
	}
	ps := make([]*policyTotals, 0, len(byName))
	for _, p := range byName {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *policyTotals) int {
		return cmp.Or(cmp.Compare(b.checks30d, a.checks30d), cmp.Compare(b.checks24h, a.checks24h), cmp.Compare(a.name, b.name))
	})
	for i, p := range ps {
		v.Rows = append(v.Rows, web.PolicyUsageRow{
			Policy: p.name, Checks24h: count(p.checks24h), Refusals24h: count(p.refusals24h), RefusalShare24h: Share(p.refusals24h, p.checks24h),
			Checks30d: count(p.checks30d), Refusals30d: count(p.refusals30d),
		})
		if i < MaxPolicyCharts {
			prefix := id + "-" + strconv.Itoa(i)
			v.Charts = append(v.Charts, web.PolicyCharts{Policy: p.name,
				Hours: policyHourChart(prefix+"-hours", p, hourFrom), Days: policyDayChart(prefix+"-days", p, dayFrom)})
		}
	}
	if len(ps) > MaxPolicyCharts {
		v.Note = fmt.Sprintf("Charts of the %d most checked policies of %d.", MaxPolicyCharts, len(ps))
	}
	return v
}

// policySeries stacks a policy's refusals on what it allowed.
func policySeries(checks, refusals []float64) []web.Series {
	allowed := make([]float64, len(checks))
	for i := range checks {
		allowed[i] = max(0, checks[i]-refusals[i])
	}
	return []web.Series{
		{Name: "allowed by this policy", Class: "s-allowed", Values: allowed},
		{Name: "refused by this policy", Class: "s-policy", Values: refusals},
	}
}

func policyHourChart(id string, p *policyTotals, hourFrom time.Time) web.Chart {
	c := web.Chart{
		ID: id, Title: p.name + ": checks per hour, last 24 hours", YUnit: "checks per hour", XLabel: "hour (UTC)",
		Kind: web.StackedBars, Columns: policyHours, Series: policySeries(p.hourChecks, p.hourRefusals),
		Summary: fmt.Sprintf("%s: %s checks in the last 24 hours, %s refused by it (%s).", p.name, count(p.checks24h), count(p.refusals24h), Share(p.refusals24h, p.checks24h)),
	}
	for i := 0; i < policyHours; i += 6 {
		c.XTicks = append(c.XTicks, web.Tick{Column: i, Label: hourFrom.Add(time.Duration(i) * time.Hour).Format("15:04")})
	}
	if p.checks24h == 0 {
		c.Empty = p.name + ": no checks in the last 24 hours."
	}
	return c
}

func policyDayChart(id string, p *policyTotals, dayFrom time.Time) web.Chart {
	c := web.Chart{
		ID: id, Title: p.name + ": checks per day, last 30 days", YUnit: "checks per day", XLabel: "day (UTC)",
		Kind: web.StackedBars, Columns: policyDays, Series: policySeries(p.dayChecks, p.dayRefusals),
		Summary: fmt.Sprintf("%s: %s checks in the last 30 days, %s refused by it (%s).", p.name, count(p.checks30d), count(p.refusals30d), Share(p.refusals30d, p.checks30d)),
	}
	for i := 0; i < policyDays; i += 5 {
		c.XTicks = append(c.XTicks, web.Tick{Column: i, Label: dayFrom.AddDate(0, 0, i).Format(dayFormat)})
	}
	return c
}
