package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/internal/usage"
)

func TestTrafficQueries(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	ts, u, d := pgstore.NewTenants(pool), pgstore.NewUsage(pool), pgstore.NewTraffic(pool)
	a, _ := ts.CreateTenant(ctx, "Alpha 100%", tenant.PlanStarter)
	b, _ := ts.CreateTenant(ctx, "beta", tenant.PlanPro)
	month := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(day, hour, minute int) time.Time {
		return month.AddDate(0, 0, day-1).Add(time.Duration(hour)*time.Hour + time.Duration(minute)*time.Minute)
	}
	rows := []usage.Row{
		{TenantID: a.ID, Minute: at(1, 12, 0), Live: true, Checked: true, Outcome: "allowed", Count: 10},
		{TenantID: a.ID, Minute: at(2, 12, 0), Live: true, Checked: true, Outcome: "policy", Count: 4},
		{TenantID: a.ID, Minute: at(2, 12, 0), Live: true, Checked: true, Outcome: "ip", Count: 3},
		{TenantID: a.ID, Minute: at(2, 12, 1), Live: false, Checked: true, Outcome: "allowed", Count: 5},
		{TenantID: a.ID, Minute: at(2, 12, 1), Live: true, Checked: false, Outcome: "quota", Count: 2},
		{TenantID: b.ID, Minute: at(2, 12, 1), Live: true, Checked: true, Outcome: "allowed", Count: 50},
		// The previous month counts nowhere in this one.
		{TenantID: a.ID, Minute: month.Add(-time.Minute), Live: true, Checked: true, Outcome: "allowed", Count: 1000},
	}
	if err := u.AddUsage(ctx, uuid.NewString(), rows); err != nil {
		t.Fatal(err)
	}
	until := at(3, 0, 0)

	all, err := d.Traffic(ctx, "", month, until)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(all); got != fmt.Sprint([]traffic.MinuteCount{
		{Minute: at(1, 12, 0), Outcome: "allowed", Count: 10},
		{Minute: at(2, 12, 0), Outcome: "ip", Count: 3},
		{Minute: at(2, 12, 0), Outcome: "policy", Count: 4},
		{Minute: at(2, 12, 1), Outcome: "allowed", Count: 55},
	}) {
		t.Errorf("traffic of all (checks only, live and test): %v", got)
	}
	one, _ := d.Traffic(ctx, b.ID, month, until)
	if len(one) != 1 || one[0].Count != 50 {
		t.Errorf("traffic of beta: %v", one)
	}
	if none, err := d.Traffic(ctx, "not-a-uuid", month, until); err != nil || len(none) != 0 {
		t.Errorf("traffic of a non-id: %v %v", none, err)
	}

	days, err := d.DailyChecks(ctx, a.ID, month, until)
	if err != nil {
		t.Fatal(err)
	}
	// Live checks that count: allowed and policy, not ip, not test keys.
	if got := fmt.Sprint(days); got != fmt.Sprint([]traffic.DayCount{{Day: at(1, 0, 0), Count: 10}, {Day: at(2, 0, 0), Count: 4}}) {
		t.Errorf("daily checks: %v", got)
	}

	// Per day and outcome: the tenant's checks only (live and test), its
	// other tenants' and the previous month's not.
	daily, err := d.DailyTraffic(ctx, a.ID, month, until)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(daily); got != fmt.Sprint([]traffic.DayOutcome{
		{Day: at(1, 0, 0), Outcome: "allowed", Count: 10},
		{Day: at(2, 0, 0), Outcome: "allowed", Count: 5},
		{Day: at(2, 0, 0), Outcome: "ip", Count: 3},
		{Day: at(2, 0, 0), Outcome: "policy", Count: 4},
	}) {
		t.Errorf("daily traffic: %v", got)
	}
	if none, err := d.DailyTraffic(ctx, "not-a-uuid", month, until); err != nil || len(none) != 0 {
		t.Errorf("daily traffic of a non-id: %v %v", none, err)
	}

	byChecks, byRefusals, err := d.TopTenants(ctx, month, until, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(byChecks); got != fmt.Sprintf("[{%s beta 50 0} {%s Alpha 100%% 22 9}]", b.ID, a.ID) {
		t.Errorf("top by checks: %s", got)
	}
	if got := fmt.Sprint(byRefusals); got != fmt.Sprintf("[{%s Alpha 100%% 22 9}]", a.ID) {
		t.Errorf("top by refusals: %s", got)
	}

	for q, want := range map[string][]string{"": {"Alpha 100%", "beta"}, "100%": {"Alpha 100%"}, "%": {"Alpha 100%"}, "BET": {"beta"}, b.ID: {"beta"}, "_": nil} {
		got, total, err := d.SearchTenants(ctx, traffic.Search{Query: q, MonthStart: month, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
		}
		if fmt.Sprint(names) != fmt.Sprint(want) || total != len(want) {
			t.Errorf("search %q: %v (%d), want %v", q, names, total, want)
		}
	}
	page, total, _ := d.SearchTenants(ctx, traffic.Search{MonthStart: month, Offset: 1, Limit: 1})
	if len(page) != 1 || page[0].Name != "beta" || total != 2 || page[0].MonthChecks != 50 {
		t.Errorf("second page: %+v of %d", page, total)
	}
	first, _, _ := d.SearchTenants(ctx, traffic.Search{MonthStart: month, Limit: 1})
	if first[0].MonthChecks != 14 || first[0].Plan != tenant.PlanStarter {
		t.Errorf("alpha's month checks %d, want 14", first[0].MonthChecks)
	}

	// Degraded minutes add up across flushes and instances.
	m := at(2, 3, 0)
	for range 2 {
		if err := d.AddDegraded(ctx, map[time.Time]int64{m: 2, m.Add(time.Minute): 1}); err != nil {
			t.Fatal(err)
		}
	}
	dm, _ := d.DegradedMinutes(ctx, month, until)
	if got := fmt.Sprint(dm); got != fmt.Sprint([]traffic.Degraded{{Minute: m, Answers: 4}, {Minute: m.Add(time.Minute), Answers: 2}}) {
		t.Errorf("degraded minutes %s", got)
	}
	if err := d.PruneDegraded(ctx, m.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if dm, _ = d.DegradedMinutes(ctx, month, until); len(dm) != 1 {
		t.Errorf("after pruning: %v", dm)
	}
}
