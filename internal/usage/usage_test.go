package usage

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/gate"
)

func TestCountsAsCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome string
		want    bool
	}{
		{gate.OutcomeAllowed, true},
		{gate.LayerPolicy, true},
		{gate.LayerInstance, false},
		{gate.LayerIP, false},
		{gate.LayerQuota, false},
		{gate.LayerAllotment, false},
		{gate.LayerSandbox, false},
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

// fakeStore records AddUsage calls. While failing is set it fails them;
// while lost is set it applies them and then fails, as a connection lost
// before the answer would.
type fakeStore struct {
	mu      sync.Mutex
	failing bool
	lost    bool
	applied map[string]bool
	rows    map[Row]int64 // Count zeroed in the key
}

func newFakeStore() *fakeStore { return &fakeStore{rows: map[Row]int64{}, applied: map[string]bool{}} }

func (s *fakeStore) AddUsage(_ context.Context, id string, rows []Row) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errors.New("database down")
	}
	if s.applied[id] {
		return nil
	}
	s.applied[id] = true
	if s.lost {
		defer func() { s.lost = false }()
		defer s.add(rows)
		return errors.New("connection lost")
	}
	return s.add(rows)
}

func (s *fakeStore) add(rows []Row) error {
	seen := map[Row]bool{}
	for _, r := range rows {
		n := r.Count
		r.Count = 0
		if seen[r] {
			return errors.New("row named twice in one call")
		}
		seen[r] = true
		s.rows[r] += n
	}
	return nil
}

func (s *fakeStore) UsageTotals(context.Context, string, time.Time, time.Time) ([]Total, error) {
	return nil, nil
}

func (s *fakeStore) BatchApplied(_ context.Context, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[id], nil
}

func (s *fakeStore) PruneBatches(context.Context, time.Time) error { return nil }

func (s *fakeStore) setLost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = true
}

func (s *fakeStore) setFailing(f bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = f
}

func (s *fakeStore) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.rows {
		n += c
	}
	return n
}

var base = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

func TestFailedFlushKeepsCounts(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r, err := NewRecorder(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		r.Observe(ctx, gate.Event{At: base.Add(time.Duration(i) * time.Second), TenantID: "t1", Live: true, Checked: true, Outcome: "allowed"})
	}
	st.setFailing(true)
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush with the store down: got nil error")
	}
	r.Observe(ctx, gate.Event{At: base, TenantID: "t1", Live: true, Checked: true, Outcome: "allowed"})
	if got := r.Pending(); got != 2 {
		t.Errorf("Pending() after a failed flush = %d, want 2 (a row failed, a row new)", got)
	}
	st.setFailing(false)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := st.total(); got != 11 {
		t.Errorf("flushed %d events, want 11", got)
	}
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() after a good flush = %d, want 0", got)
	}
}

func TestFlushLostAfterCommitCountsOnce(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r, err := NewRecorder(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 10 {
		r.Observe(ctx, gate.Event{At: base, TenantID: "t1", Live: true, Checked: true, Outcome: "allowed"})
	}
	st.setLost()
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush with the answer lost: got nil error")
	}
	r.Observe(ctx, gate.Event{At: base, TenantID: "t1", Live: true, Checked: true, Outcome: "allowed"})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := st.total(); got != 11 {
		t.Errorf("flushed %d events, want 11", got)
	}
}

func TestPendingStaysBounded(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.setFailing(true)
	const maxPending = 50
	r, err := NewRecorder(Config{Store: st, MaxPending: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// 200 minutes of 3 tenants: 600 rows against a cap of 50, with a
	// failing flush every 20 minutes.
	for m := range 200 {
		for _, tenant := range []string{"a", "b", "c"} {
			r.Observe(ctx, gate.Event{At: base.Add(time.Duration(m) * time.Minute), TenantID: tenant, Checked: true, Outcome: "allowed"})
		}
		// New rows, and a failed batch of as many at most.
		if got := r.Pending(); got > 2*maxPending {
			t.Fatalf("Pending() = %d after minute %d, want at most %d", got, m, 2*maxPending)
		}
		if m%20 == 19 {
			_ = r.Flush(ctx)
		}
	}
	st.setFailing(false)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// What was kept is the first failed batch and the newest minutes.
	for m := 200 - maxPending/3 + 1; m < 200; m++ {
		for _, tenant := range []string{"a", "b", "c"} {
			row := Row{TenantID: tenant, Minute: base.Add(time.Duration(m) * time.Minute), Checked: true, Outcome: "allowed"}
			if st.rows[row] != 1 {
				t.Errorf("row %+v lost, want it kept", row)
			}
		}
	}
	if got := st.total(); got > 2*maxPending {
		t.Errorf("flushed %d events, want at most %d", got, 2*maxPending)
	}
}

func TestAtTheCapTheOldestMinuteGoes(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r, err := NewRecorder(Config{Store: st, MaxPending: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	observe := func(tenant string, minute int) {
		r.Observe(ctx, gate.Event{At: base.Add(time.Duration(minute) * time.Minute), TenantID: tenant, Checked: true, Outcome: "allowed"})
	}
	observe("a", 10)
	observe("b", 10)
	observe("c", 10)
	// Older than all held: dropped itself.
	observe("d", 5)
	// A new row of a held minute at the cap: there is no older minute to drop.
	observe("d", 10)
	if got := r.Pending(); got != 3 {
		t.Fatalf("Pending() = %d, want 3", got)
	}
	// Newer: the oldest minute goes.
	observe("e", 20)
	observe("a", 20)
	if got := r.Pending(); got != 2 {
		t.Fatalf("Pending() = %d, want 2", got)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[Row]int64{
		{TenantID: "e", Minute: base.Add(20 * time.Minute), Checked: true, Outcome: "allowed"}: 1,
		{TenantID: "a", Minute: base.Add(20 * time.Minute), Checked: true, Outcome: "allowed"}: 1,
	}
	if !maps.Equal(st.rows, want) {
		t.Errorf("flushed %v, want %v", st.rows, want)
	}
}

func TestObserveIgnoresEventsWithoutTenant(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r, err := NewRecorder(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	r.Observe(context.Background(), gate.Event{At: base, Outcome: gate.LayerInstance})
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() = %d, want 0", got)
	}
}

func TestObserveEmptyOutcomeAndZeroTime(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r, err := NewRecorder(Config{Store: st, Now: func() time.Time { return base.Add(90 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	r.Observe(context.Background(), gate.Event{TenantID: "t", Live: true, Checked: true})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := Row{TenantID: "t", Minute: base.Add(time.Minute), Live: true, Checked: true, Outcome: gate.OutcomeAllowed}
	if got := st.rows[want]; got != 1 {
		t.Errorf("rows = %v, want one count of %+v", st.rows, want)
	}
}

func TestNewRecorderNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := NewRecorder(Config{}); err == nil {
		t.Error("NewRecorder without a store: got nil error")
	}
}
