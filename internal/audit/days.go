package audit

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/alert"
)

// The alert and watch budgets of a day, as pure planners: a Store locks
// the days a flush spends, gives the statements that count and raise each
// locked day's room, and writes what the plan lists, all in one
// transaction.

// DayOf is the UTC midnight of t's day: the day whose alert and watch
// budgets a refusal at t spends.
func DayOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// Day names the alert and watch budgets of one tenant's UTC day: the row a
// Store locks while a flush spends them.
type Day struct {
	TenantID string
	// Start is the UTC midnight.
	Start time.Time
}

// LockedDay is a Day as the Store read it under lock: the alerts raised
// and the subjects watched so far.
type LockedDay struct {
	Day
	Raised, Watched int64
}

// daysInLockOrder lists days by tenant, then day: the order in which a
// Store locks them, so that concurrent flushes cannot deadlock.
func daysInLockOrder(ds map[dayKey]Day) []Day {
	return slices.SortedFunc(maps.Values(ds), func(a, b Day) int {
		return cmp.Or(cmp.Compare(a.TenantID, b.TenantID), a.Start.Compare(b.Start))
	})
}

// CountPlan is the arithmetic of Store.CountRefusals. A Store applies it in
// one transaction: it locks Days, then runs the statement that counts
// Counts, each subject watched while its locked day has Room (which
// subjects a day watches already is the Store's to know).
type CountPlan struct {
	// Counts are the flush's counts of some refusals.
	Counts []RefusalCount
	// Days are those the counts fall in, in the order to lock them.
	Days   []Day
	budget int
}

// PlanCounts plans the counts cs under a watch budget of budget subjects a
// tenant and day. The Store has left out the counts of tenant ids it cannot
// hold, and spelled each tenant's id one way.
func PlanCounts(budget int, cs []RefusalCount) CountPlan {
	p := CountPlan{Counts: make([]RefusalCount, 0, len(cs)), budget: budget}
	days := map[dayKey]Day{}
	for _, c := range cs {
		if c.Count <= 0 {
			continue
		}
		d := Day{TenantID: c.TenantID, Start: DayOf(c.Hour)}
		days[dayKey{tenantID: d.TenantID, day: d.Start.Unix()}] = d
		p.Counts = append(p.Counts, c)
	}
	p.Days = daysInLockOrder(days)
	return p
}

// Room is the subjects l may still watch.
func (p CountPlan) Room(l LockedDay) int64 { return room(p.budget, l.Watched) }

// AlertPlan is the arithmetic of Store.RaiseAlerts. A Store applies it in
// one transaction: it locks Days, runs the statement that raises the alerts
// of Checks, each new alert while its locked day has Room (which subjects
// reach their AlertAfter is the Store's to know), then shows the unwatched
// refusals of each of Unwatched in its aggregate alert.
type AlertPlan struct {
	// Days are those the checks fall in, in the order to lock them.
	Days []Day
	// Checks are the subjects to check, their At in UTC: those of
	// policies that set AlertAfter, but AggregateSubject.
	Checks []AlertCheck
	// Unwatched are the policies and days checked, by tenant, day, then
	// policy.
	Unwatched []Unwatched
	budget    int
}

// Unwatched is one policy's day checked, whose aggregate alert shows the
// day's refusals of subjects past the watch budget: the first and last
// refusal checked that day, and the AlertAfter and Shadow of its first
// check.
type Unwatched struct {
	Day
	Policy          string
	FirstAt, LastAt time.Time
	AlertAfter      int64
	Shadow          bool
}

// PlanAlerts plans the checks cs under an alert budget of budget alerts a
// tenant and day. The Store has left out the checks of tenant ids it cannot
// hold, and spelled each tenant's id one way.
func PlanAlerts(budget int, cs []AlertCheck) AlertPlan {
	p := AlertPlan{Checks: make([]AlertCheck, 0, len(cs)), budget: budget}
	days := map[dayKey]Day{}
	type policyDay struct {
		dayKey
		policy string
	}
	unwatched := map[policyDay]*Unwatched{}
	for _, c := range cs {
		if c.AlertAfter <= 0 {
			continue
		}
		c.At = c.At.UTC()
		d := Day{TenantID: c.TenantID, Start: DayOf(c.At)}
		dk := dayKey{tenantID: d.TenantID, day: d.Start.Unix()}
		days[dk] = d
		if u := unwatched[policyDay{dk, c.Policy}]; u == nil {
			unwatched[policyDay{dk, c.Policy}] = &Unwatched{Day: d, Policy: c.Policy, FirstAt: c.At, LastAt: c.At, AlertAfter: c.AlertAfter, Shadow: c.Shadow}
		} else {
			u.FirstAt, u.LastAt = minTime(u.FirstAt, c.At), maxTime(u.LastAt, c.At)
		}
		if c.Key != alert.AggregateSubject {
			p.Checks = append(p.Checks, c)
		}
	}
	p.Days = daysInLockOrder(days)
	p.Unwatched = make([]Unwatched, 0, len(unwatched))
	for _, u := range unwatched {
		p.Unwatched = append(p.Unwatched, *u)
	}
	slices.SortFunc(p.Unwatched, func(a, b Unwatched) int {
		return cmp.Or(cmp.Compare(a.TenantID, b.TenantID), a.Start.Compare(b.Start), cmp.Compare(a.Policy, b.Policy))
	})
	return p
}

// Room is the alerts of their own l's subjects may still get.
func (p AlertPlan) Room(l LockedDay) int64 { return room(p.budget, l.Raised) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
