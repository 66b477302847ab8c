package audit_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/audit"
)

// The planners of the days' alert and watch budgets are pure: these tests
// give them flushes and locked rows and read what they plan.
// recorder_test.go and bounds_test.go hold the same rules over the real
// store.

func day(t *testing.T, tenantID, start string) audit.Day {
	return audit.Day{TenantID: tenantID, Start: at(t, start).UTC()}
}

func TestDayOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, at, want string
	}{
		{"within a day", "2026-03-02T23:59:59.999Z", "2026-03-02T00:00:00Z"},
		{"at midnight", "2026-03-02T00:00:00Z", "2026-03-02T00:00:00Z"},
		{"another zone, a UTC day", "2026-03-01T21:30:00-05:00", "2026-03-02T00:00:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, want := audit.DayOf(at(t, tt.at)), at(t, tt.want)
			if !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("DayOf(%s) = %v, want %v in UTC", tt.at, got, want)
			}
		})
	}
}

func TestPlanCounts(t *testing.T) {
	t.Parallel()
	count := func(tenantID, key, hour string, n int64) audit.RefusalCount {
		return audit.RefusalCount{TenantID: tenantID, Policy: "sign-in", Key: key, Hour: at(t, hour), Count: n}
	}
	for _, tt := range []struct {
		name       string
		cs         []audit.RefusalCount
		wantCounts []audit.RefusalCount
		wantDays   []audit.Day
	}{
		{name: "nothing", wantCounts: []audit.RefusalCount{}},
		{
			name: "the days counted, by tenant then day",
			cs: []audit.RefusalCount{
				count(tenantB, "s1", "2026-03-02T10:00:00Z", 1), count(tenantA, "s2", "2026-03-02T23:00:00Z", 2),
				count(tenantA, "s3", "2026-03-01T05:00:00Z", 3), count(tenantA, alert.AggregateSubject, "2026-03-02T01:00:00Z", 4),
			},
			wantCounts: []audit.RefusalCount{
				count(tenantB, "s1", "2026-03-02T10:00:00Z", 1), count(tenantA, "s2", "2026-03-02T23:00:00Z", 2),
				count(tenantA, "s3", "2026-03-01T05:00:00Z", 3), count(tenantA, alert.AggregateSubject, "2026-03-02T01:00:00Z", 4),
			},
			wantDays: []audit.Day{
				day(t, tenantA, "2026-03-01T00:00:00Z"), day(t, tenantA, "2026-03-02T00:00:00Z"), day(t, tenantB, "2026-03-02T00:00:00Z"),
			},
		},
		{
			name:       "a count of no refusals is left out, and its day with it",
			cs:         []audit.RefusalCount{count(tenantA, "s1", "2026-03-02T10:00:00Z", 0), count(tenantA, "s2", "2026-03-03T10:00:00Z", 1)},
			wantCounts: []audit.RefusalCount{count(tenantA, "s2", "2026-03-03T10:00:00Z", 1)},
			wantDays:   []audit.Day{day(t, tenantA, "2026-03-03T00:00:00Z")},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := audit.PlanCounts(1000, tt.cs)
			if !reflect.DeepEqual(p.Counts, tt.wantCounts) {
				t.Errorf("Counts = %+v, want %+v", p.Counts, tt.wantCounts)
			}
			if !reflect.DeepEqual(p.Days, tt.wantDays) {
				t.Errorf("Days = %v, want %v", p.Days, tt.wantDays)
			}
		})
	}
}

func TestDayRooms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                 string
		budget               int
		raised, watched      int64
		wantAlerts, wantSubj int64
	}{
		{"untouched", 100, 0, 0, 100, 100},
		{"each budget spends its own", 100, 99, 40, 1, 60},
		{"spent", 100, 100, 100, 0, 0},
		{"spent past a budget lowered since", 100, 150, 130, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := audit.LockedDay{Day: day(t, tenantA, "2026-03-02T00:00:00Z"), Raised: tt.raised, Watched: tt.watched}
			if got := audit.PlanAlerts(tt.budget, nil).Room(l); got != tt.wantAlerts {
				t.Errorf("AlertPlan.Room = %d, want %d", got, tt.wantAlerts)
			}
			if got := audit.PlanCounts(tt.budget, nil).Room(l); got != tt.wantSubj {
				t.Errorf("CountPlan.Room = %d, want %d", got, tt.wantSubj)
			}
		})
	}
}

func TestPlanAlerts(t *testing.T) {
	t.Parallel()
	check := func(tenantID, policy, key, when string, alertAfter int64, shadow bool) audit.AlertCheck {
		return audit.AlertCheck{TenantID: tenantID, Policy: policy, Key: key, AlertAfter: alertAfter, At: at(t, when), Shadow: shadow}
	}
	utc := func(c audit.AlertCheck) audit.AlertCheck {
		c.At = c.At.UTC()
		return c
	}
	for _, tt := range []struct {
		name          string
		cs            []audit.AlertCheck
		wantDays      []audit.Day
		wantChecks    []audit.AlertCheck
		wantUnwatched []audit.Unwatched
	}{
		{name: "nothing", wantChecks: []audit.AlertCheck{}, wantUnwatched: []audit.Unwatched{}},
		{
			name:          "a check without alert_after names no day",
			cs:            []audit.AlertCheck{check(tenantA, "sign-in", "s1", "2026-03-02T10:00:00Z", 0, false)},
			wantChecks:    []audit.AlertCheck{},
			wantUnwatched: []audit.Unwatched{},
		},
		{
			name: "the aggregate subject names its policy's day, and is not checked",
			cs: []audit.AlertCheck{
				check(tenantA, "sign-in", alert.AggregateSubject, "2026-03-02T10:00:00Z", 5, false),
				check(tenantA, "sign-in", "s1", "2026-03-02T11:00:00Z", 5, false),
			},
			wantDays:   []audit.Day{day(t, tenantA, "2026-03-02T00:00:00Z")},
			wantChecks: []audit.AlertCheck{check(tenantA, "sign-in", "s1", "2026-03-02T11:00:00Z", 5, false)},
			wantUnwatched: []audit.Unwatched{{Day: day(t, tenantA, "2026-03-02T00:00:00Z"), Policy: "sign-in",
				FirstAt: at(t, "2026-03-02T10:00:00Z"), LastAt: at(t, "2026-03-02T11:00:00Z"), AlertAfter: 5}},
		},
		{
			name: "each policy's day spans its checks, with the alert_after and shadow of its first",
			cs: []audit.AlertCheck{
				check(tenantB, "search", "s1", "2026-03-02T12:00:00Z", 3, true),
				check(tenantA, "sign-in", "s2", "2026-03-02T09:00:00Z", 5, false),
				check(tenantB, "search", "s4", "2026-03-02T18:00:00Z", 6, false),
				check(tenantB, "search", "s3", "2026-03-02T08:00:00Z", 4, false),
				check(tenantA, "sign-in", "s5", "2026-03-01T22:00:00Z", 5, false),
			},
			wantDays: []audit.Day{
				day(t, tenantA, "2026-03-01T00:00:00Z"), day(t, tenantA, "2026-03-02T00:00:00Z"), day(t, tenantB, "2026-03-02T00:00:00Z"),
			},
			wantChecks: []audit.AlertCheck{
				check(tenantB, "search", "s1", "2026-03-02T12:00:00Z", 3, true),
				check(tenantA, "sign-in", "s2", "2026-03-02T09:00:00Z", 5, false),
				check(tenantB, "search", "s4", "2026-03-02T18:00:00Z", 6, false),
				check(tenantB, "search", "s3", "2026-03-02T08:00:00Z", 4, false),
				check(tenantA, "sign-in", "s5", "2026-03-01T22:00:00Z", 5, false),
			},
			wantUnwatched: []audit.Unwatched{
				{Day: day(t, tenantA, "2026-03-01T00:00:00Z"), Policy: "sign-in",
					FirstAt: at(t, "2026-03-01T22:00:00Z"), LastAt: at(t, "2026-03-01T22:00:00Z"), AlertAfter: 5},
				{Day: day(t, tenantA, "2026-03-02T00:00:00Z"), Policy: "sign-in",
					FirstAt: at(t, "2026-03-02T09:00:00Z"), LastAt: at(t, "2026-03-02T09:00:00Z"), AlertAfter: 5},
				{Day: day(t, tenantB, "2026-03-02T00:00:00Z"), Policy: "search",
					FirstAt: at(t, "2026-03-02T08:00:00Z"), LastAt: at(t, "2026-03-02T18:00:00Z"), AlertAfter: 3, Shadow: true},
			},
		},
		{
			name:       "a check in another zone falls in its UTC day, its At in UTC",
			cs:         []audit.AlertCheck{check(tenantA, "sign-in", "s1", "2026-03-01T21:30:00-05:00", 5, false)},
			wantDays:   []audit.Day{day(t, tenantA, "2026-03-02T00:00:00Z")},
			wantChecks: []audit.AlertCheck{utc(check(tenantA, "sign-in", "s1", "2026-03-01T21:30:00-05:00", 5, false))},
			wantUnwatched: []audit.Unwatched{{Day: day(t, tenantA, "2026-03-02T00:00:00Z"), Policy: "sign-in",
				FirstAt: at(t, "2026-03-02T02:30:00Z"), LastAt: at(t, "2026-03-02T02:30:00Z"), AlertAfter: 5}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := audit.PlanAlerts(100, tt.cs)
			if !reflect.DeepEqual(p.Days, tt.wantDays) {
				t.Errorf("Days = %v, want %v", p.Days, tt.wantDays)
			}
			if !reflect.DeepEqual(p.Checks, tt.wantChecks) {
				t.Errorf("Checks = %+v, want %+v", p.Checks, tt.wantChecks)
			}
			if !reflect.DeepEqual(p.Unwatched, tt.wantUnwatched) {
				t.Errorf("Unwatched = %+v, want %+v", p.Unwatched, tt.wantUnwatched)
			}
		})
	}
}
