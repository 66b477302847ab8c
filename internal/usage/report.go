package usage

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
)

// Report is a tenant's usage at an instant.
type Report struct {
	TenantID string `json:"tenant_id"`
	// PeriodStart and PeriodEnd bound the calendar month (UTC) of the
	// instant: [PeriodStart, PeriodEnd).
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	// ChecksUsed counts this period's live /v1/check calls that passed the
	// service's ceilings: what the monthly allotment counts.
	ChecksUsed int64 `json:"checks_used"`
	// SandboxUsed counts the test-key /v1/check calls that passed the
	// ceilings in the minutes from SandboxSince (30 days back, truncated to
	// the minute) to the instant.
	SandboxUsed  int64     `json:"sandbox_used"`
	SandboxSince time.Time `json:"sandbox_since"`
	// Refusals counts this period's refused requests, live and test, of
	// every route, by the layer that refused: instance, ip, quota,
	// allotment, sandbox, policy. Never nil.
	Refusals map[string]int64 `json:"refusals"`
	// Alerts lists the alerts raised in the last AlertWindow, latest first.
	// Never nil.
	Alerts []alert.Alert `json:"alerts"`
}

// Usage returns tenantID's report at now: the Store's counts plus this
// Recorder's unflushed ones (those of other instances appear once they
// flush, within FlushEvery).
func (r *Recorder) Usage(ctx context.Context, tenantID string, now time.Time) (Report, error) {
	p := periodOf(now)
	rep := Report{
		TenantID:     tenantID,
		PeriodStart:  p.monthStart,
		PeriodEnd:    p.monthEnd,
		SandboxSince: p.rollStart,
		Refusals:     map[string]int64{},
		Alerts:       []alert.Alert{},
	}
	if r.alerts != nil {
		alerts, err := r.alerts.Alerts(ctx, tenantID, now.Add(-r.alertWindow), maxAlerts)
		if err != nil {
			return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
		}
		if alerts != nil {
			rep.Alerts = alerts
		}
	}

	r.flushes.mu.RLock()
	defer r.flushes.mu.RUnlock()
	month, err := r.store.UsageTotals(ctx, tenantID, p.monthStart, p.monthEnd)
	if err != nil {
		return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
	}
	roll, err := r.store.UsageTotals(ctx, tenantID, p.rollStart, p.rollEnd)
	if err != nil {
		return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
	}
	for _, t := range month {
		rep.addMonth(t)
	}
	for _, t := range roll {
		rep.addRolling(t)
	}
	if b := r.flushes.sends.Held(); b != nil {
		// A failed flush may have been applied all the same.
		applied, err := r.store.FlushApplied(ctx, b.ID)
		if err != nil {
			return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
		}
		if !applied {
			rep.addPending(b.Items.counts, tenantID, p)
		}
	}
	r.counts.read(func(ms minutes) { rep.addPending(ms, tenantID, p) })
	return rep, nil
}

// addPending adds tenantID's counts held in memory.
func (rep *Report) addPending(ms minutes, tenantID string, p period) {
	for m, b := range ms {
		inMonth, inRoll := p.contains(m)
		if !inMonth && !inRoll {
			continue
		}
		for c, n := range b {
			if c.tenantID != tenantID {
				continue
			}
			t := Total{Live: c.live, Checked: c.checked, Outcome: c.outcome, Count: n}
			if inMonth {
				rep.addMonth(t)
			}
			if inRoll {
				rep.addRolling(t)
			}
		}
	}
}

// addMonth adds a total of minutes in the calendar month.
func (rep *Report) addMonth(t Total) {
	if t.Live && t.Checked && CountsAsCheck(t.Outcome) {
		rep.ChecksUsed += t.Count
	}
	if t.Outcome != admission.OutcomeAllowed {
		rep.Refusals[t.Outcome] += t.Count
	}
}

// addRolling adds a total of minutes in the sandbox's rolling window.
func (rep *Report) addRolling(t Total) {
	if !t.Live && t.Checked && CountsAsCheck(t.Outcome) {
		rep.SandboxUsed += t.Count
	}
}

// period holds the minute ranges of a report, each [start, end).
type period struct {
	monthStart, monthEnd time.Time
	rollStart, rollEnd   time.Time
}

// periodOf returns the calendar month (UTC) of now, and the sandbox's
// rolling window: the minutes from the one 30 days before now up to now's,
// inclusive.
func periodOf(now time.Time) period {
	now = now.UTC()
	ms := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return period{
		monthStart: ms,
		monthEnd:   ms.AddDate(0, 1, 0),
		rollStart:  now.Add(-SandboxWindow).Truncate(time.Minute),
		rollEnd:    now.Truncate(time.Minute).Add(time.Minute),
	}
}

// contains reports whether the minute starting at m (Unix seconds) is in the
// month and in the rolling window.
func (p period) contains(m int64) (inMonth, inRolling bool) {
	return m >= p.monthStart.Unix() && m < p.monthEnd.Unix(),
		m >= p.rollStart.Unix() && m < p.rollEnd.Unix()
}
