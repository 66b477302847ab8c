package usage

import (
	"maps"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
)

func TestCountsAsCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome string
		want    bool
	}{
		{admission.OutcomeAllowed, true},
		{admission.LayerPolicy, true},
		{admission.LayerInstance, false},
		{admission.LayerIP, false},
		{admission.LayerQuota, false},
		{admission.LayerAllotment, false},
		{admission.LayerSandbox, false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			t.Parallel()
			if got := CountsAsCheck(tt.outcome); got != tt.want {
				t.Errorf("CountsAsCheck(%q) = %t, want %t", tt.outcome, got, tt.want)
			}
		})
	}
}

func TestPeriodOf(t *testing.T) {
	t.Parallel()
	utc := func(y int, m time.Month, d, h, min, s int) time.Time {
		return time.Date(y, m, d, h, min, s, 0, time.UTC)
	}
	tests := []struct {
		name                 string
		now                  time.Time
		monthStart, monthEnd time.Time
		rollStart, rollEnd   time.Time
	}{
		{
			name:       "mid month",
			now:        utc(2026, 11, 15, 12, 30, 45),
			monthStart: utc(2026, 11, 1, 0, 0, 0), monthEnd: utc(2026, 12, 1, 0, 0, 0),
			rollStart: utc(2026, 10, 16, 12, 30, 0), rollEnd: utc(2026, 11, 15, 12, 31, 0),
		},
		{
			name:       "december rolls into the next year",
			now:        utc(2026, 12, 31, 23, 59, 59),
			monthStart: utc(2026, 12, 1, 0, 0, 0), monthEnd: utc(2027, 1, 1, 0, 0, 0),
			rollStart: utc(2026, 12, 1, 23, 59, 0), rollEnd: utc(2027, 1, 1, 0, 0, 0),
		},
		{
			name:       "first instant of a month",
			now:        utc(2027, 3, 1, 0, 0, 0),
			monthStart: utc(2027, 3, 1, 0, 0, 0), monthEnd: utc(2027, 4, 1, 0, 0, 0),
			rollStart: utc(2027, 1, 30, 0, 0, 0), rollEnd: utc(2027, 3, 1, 0, 1, 0),
		},
		{
			name:       "another zone is read as UTC",
			now:        time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("UTC+1", 3600)),
			monthStart: utc(2026, 11, 1, 0, 0, 0), monthEnd: utc(2026, 12, 1, 0, 0, 0),
			rollStart: utc(2026, 10, 31, 23, 30, 0), rollEnd: utc(2026, 11, 30, 23, 31, 0),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := periodOf(tt.now)
			want := period{tt.monthStart, tt.monthEnd, tt.rollStart, tt.rollEnd}
			if p != want {
				t.Errorf("periodOf(%v) =\n %+v, want\n %+v", tt.now, p, want)
			}
		})
	}
}

func TestReportAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		total           Total
		month, rolling  bool
		checks, sandbox int64
		refusals        map[string]int64
	}{
		{"live check allowed", Total{Live: true, Checked: true, Outcome: "allowed", Count: 3}, true, true, 3, 0, map[string]int64{}},
		{"live check refused by a policy", Total{Live: true, Checked: true, Outcome: "policy", Count: 2}, true, true, 2, 0, map[string]int64{"policy": 2}},
		{"live check refused by the quota", Total{Live: true, Checked: true, Outcome: "quota", Count: 4}, true, true, 0, 0, map[string]int64{"quota": 4}},
		{"live other route", Total{Live: true, Checked: false, Outcome: "allowed", Count: 5}, true, true, 0, 0, map[string]int64{}},
		{"live other route refused by ip", Total{Live: true, Checked: false, Outcome: "ip", Count: 5}, true, true, 0, 0, map[string]int64{"ip": 5}},
		{"test check allowed", Total{Live: false, Checked: true, Outcome: "allowed", Count: 6}, true, true, 0, 6, map[string]int64{}},
		{"test check refused by sandbox", Total{Live: false, Checked: true, Outcome: "sandbox", Count: 1}, true, true, 0, 0, map[string]int64{"sandbox": 1}},
		{"test check before the month", Total{Live: false, Checked: true, Outcome: "allowed", Count: 7}, false, true, 0, 7, map[string]int64{}},
		{"live check before the rolling window", Total{Live: true, Checked: true, Outcome: "allowed", Count: 7}, true, false, 7, 0, map[string]int64{}},
		{"test other route", Total{Live: false, Checked: false, Outcome: "allowed", Count: 8}, true, true, 0, 0, map[string]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := Report{Refusals: map[string]int64{}}
			if tt.month {
				rep.addMonth(tt.total)
			}
			if tt.rolling {
				rep.addRolling(tt.total)
			}
			if rep.ChecksUsed != tt.checks || rep.SandboxUsed != tt.sandbox || !maps.Equal(rep.Refusals, tt.refusals) {
				t.Errorf("got checks %d, sandbox %d, refusals %v; want %d, %d, %v",
					rep.ChecksUsed, rep.SandboxUsed, rep.Refusals, tt.checks, tt.sandbox, tt.refusals)
			}
		})
	}
}

func TestMinuteOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		at   time.Time
		want int64
	}{
		{"start of a minute", time.Unix(120, 0), 120},
		{"within a minute", time.Unix(179, 999_999_999), 120},
		{"other zone", time.Unix(179, 0).In(time.FixedZone("x", 5*3600+30*60)), 120},
		{"before 1970", time.Unix(-1, 0), -60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := minuteOf(tt.at); got != tt.want {
				t.Errorf("minuteOf(%v) = %d, want %d", tt.at, got, tt.want)
			}
		})
	}
}
