package usageview_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/usageview"
	"github.com/tollgate/tollgate/web"
)

func TestPolicyUsage(t *testing.T) {
	t.Parallel()
	hourFrom := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	dayFrom := time.Date(2026, 11, 7, 0, 0, 0, 0, time.UTC)
	h := func(p string, at time.Time, checks, refusals int64) usage.PolicyHour {
		return usage.PolicyHour{Policy: p, At: at, Checks: checks, Refusals: refusals}
	}
	t.Run("nothing checked", func(t *testing.T) {
		t.Parallel()
		v := usageview.PolicyUsage("pu", nil, nil, hourFrom, dayFrom)
		if v.Empty == "" || len(v.Rows) != 0 || len(v.Charts) != 0 {
			t.Errorf("got %+v, want the empty state", v)
		}
	})
	t.Run("totals, columns and order", func(t *testing.T) {
		t.Parallel()
		hours := []usage.PolicyHour{
			h("login", hourFrom, 4, 3),
			h("login", hourFrom.Add(23*time.Hour), 2, 0),
			h("login", hourFrom.Add(24*time.Hour), 100, 100), // past the 24 hours
			h("search", hourFrom.Add(5*time.Hour), 7, 0),
		}
		days := []usage.PolicyHour{
			h("login", dayFrom.AddDate(0, 0, 29), 6, 3),
			h("login", dayFrom.AddDate(0, 0, 2), 10, 1),
			h("search", dayFrom.AddDate(0, 0, 29), 7, 0),
			h("search", dayFrom.AddDate(0, 0, -1), 50, 0), // before the 30 days
			h("old", dayFrom.AddDate(0, 0, 1), 1, 1),
		}
		v := usageview.PolicyUsage("pu", hours, days, hourFrom, dayFrom)
		want := []web.PolicyUsageRow{
			{Policy: "login", Checks24h: "6", Refusals24h: "3", RefusalShare24h: "50%", Checks30d: "16", Refusals30d: "4"},
			{Policy: "search", Checks24h: "7", Refusals24h: "0", RefusalShare24h: "0%", Checks30d: "7", Refusals30d: "0"},
			{Policy: "old", Checks24h: "0", Refusals24h: "0", RefusalShare24h: "0%", Checks30d: "1", Refusals30d: "1"},
		}
		if !slices.Equal(v.Rows, want) {
			t.Errorf("rows:\n got %+v\nwant %+v", v.Rows, want)
		}
		if len(v.Charts) != 3 || v.Note != "" {
			t.Fatalf("%d charts, note %q; want 3, none", len(v.Charts), v.Note)
		}
		login := v.Charts[0]
		if login.Policy != "login" || login.Hours.ID != "pu-0-hours" || login.Days.ID != "pu-0-days" {
			t.Errorf("the first charts: %s, %s, %s", login.Policy, login.Hours.ID, login.Days.ID)
		}
		allowed, refused := login.Hours.Series[0].Values, login.Hours.Series[1].Values
		if allowed[0] != 1 || refused[0] != 3 || allowed[23] != 2 || refused[23] != 0 {
			t.Errorf("login's hours: allowed %v, refused %v", allowed, refused)
		}
		if d := login.Days.Series[1].Values; d[2] != 1 || d[29] != 3 {
			t.Errorf("login's refusals per day: %v", d)
		}
		if v.Charts[2].Hours.Empty == "" {
			t.Errorf("old's hour chart has no empty state, with no check in 24 hours")
		}
	})
	t.Run("charts of the most checked only", func(t *testing.T) {
		t.Parallel()
		var days []usage.PolicyHour
		for i := range usageview.MaxPolicyCharts + 3 {
			days = append(days, h(fmt.Sprintf("p%02d", i), dayFrom, int64(i+1), 0))
		}
		v := usageview.PolicyUsage("pu", nil, days, hourFrom, dayFrom)
		if len(v.Rows) != usageview.MaxPolicyCharts+3 || len(v.Charts) != usageview.MaxPolicyCharts || v.Note == "" {
			t.Fatalf("%d rows, %d charts, note %q", len(v.Rows), len(v.Charts), v.Note)
		}
		if first := v.Charts[0].Policy; first != fmt.Sprintf("p%02d", usageview.MaxPolicyCharts+2) {
			t.Errorf("the first chart is %s's, want the most checked", first)
		}
	})
}
