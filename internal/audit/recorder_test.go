package audit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/gate"
)

var t0 = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// fakeStore keeps what a Recorder writes and fails while failing is set.
type fakeStore struct {
	mu      sync.Mutex
	failing bool
	lost    bool // the next CountRefusals applies, then fails
	applied map[string]bool
	firsts  []FirstRefusal
	counts  map[RefusalCount]int64 // Count zeroed in the key
	checks  []AlertCheck
}

func newFakeStore() *fakeStore {
	return &fakeStore{counts: map[RefusalCount]int64{}, applied: map[string]bool{}}
}

var errDown = errors.New("database down")

func (s *fakeStore) RecordFirstRefusals(_ context.Context, rs []FirstRefusal) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return 0, errDown
	}
	s.firsts = append(s.firsts, rs...)
	return int64(len(rs)), nil
}

func (s *fakeStore) CountRefusals(_ context.Context, id string, cs []RefusalCount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errDown
	}
	if s.applied[id] {
		return nil
	}
	s.applied[id] = true
	for _, c := range cs {
		n := c.Count
		c.Count = 0
		s.counts[c] += n
	}
	if s.lost {
		// Applied, but the answer never came.
		s.lost = false
		return errDown
	}
	return nil
}

func (s *fakeStore) RaiseAlerts(_ context.Context, cs []AlertCheck) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return 0, errDown
	}
	s.checks = append(s.checks, cs...)
	return 0, nil
}

func (s *fakeStore) ListAlerts(context.Context, string, time.Time, int) ([]Alert, error) {
	return nil, nil
}

func (s *fakeStore) PruneRefusals(context.Context, time.Time, time.Time, time.Time) error {
	return nil
}

func (s *fakeStore) setFailing(f bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = f
}

func newTestRecorder(t *testing.T, st Store, cfg RecorderConfig) *Recorder {
	t.Helper()
	cfg.Store = st
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0 }
	}
	r, err := NewRecorder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func policyRefusal(key string, resetAt time.Time, alertAfter int64) gate.Refusal {
	return gate.Refusal{Layer: gate.LayerPolicy, Policy: "sign-in", Limit: 10, Window: time.Minute, ResetAt: resetAt, Key: key, AlertAfter: alertAfter}
}

func TestRefusalDetail(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 11, 15, 12, 1, 0, 0, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		ref  gate.Refusal
		want map[string]any
	}{
		{
			name: "policy",
			ref:  gate.Refusal{Layer: gate.LayerPolicy, Policy: "sign-in", Limit: 10, Key: "k1", Shadow: true},
			want: map[string]any{"layer": "policy", "scope": "", "policy": "sign-in", "limit": int64(10), "key": "k1",
				"window_end": "2026-11-15T11:01:00Z", "degraded": false, "shadow": true},
		},
		{
			name: "quota, degraded",
			ref:  gate.Refusal{Layer: gate.LayerQuota, Scope: "minute", Limit: 1200, Key: "q", Degraded: true},
			want: map[string]any{"layer": "quota", "scope": "minute", "policy": "", "limit": int64(1200), "key": "q",
				"window_end": "2026-11-15T11:01:00Z", "degraded": true, "shadow": false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := RefusalDetail(tt.ref, end)
			if !maps.Equal(got, tt.want) {
				t.Errorf("RefusalDetail = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestObserveQueuesFirstRefusalOfAWindowOnce(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r := newTestRecorder(t, st, RecorderConfig{})
	ctx := context.Background()
	end1, end2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for range 1000 {
		r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Outcome: gate.LayerPolicy, Refusals: []gate.Refusal{policyRefusal("k", end1, 0)}})
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Still the same window after a flush; then a new window; then the same
	// key for another tenant.
	r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal("k", end1, 0)}})
	r.Observe(ctx, gate.Event{At: t0.Add(time.Minute), TenantID: "t", Refusals: []gate.Refusal{policyRefusal("k", end2, 0)}})
	r.Observe(ctx, gate.Event{At: t0.Add(time.Minute), TenantID: "u", Refusals: []gate.Refusal{policyRefusal("k", end2, 0)}})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	type got struct {
		tenant, key string
		end         time.Time
	}
	var gots []got
	for _, f := range st.firsts {
		gots = append(gots, got{f.TenantID, f.Key, f.WindowEnd})
	}
	want := []got{{"t", "k", end1}, {"t", "k", end2}, {"u", "k", end2}}
	if fmt.Sprint(gots) != fmt.Sprint(want) {
		t.Errorf("first refusals = %v, want %v", gots, want)
	}
	if len(st.counts) != 0 || len(st.checks) != 0 {
		t.Errorf("alert_after 0 counted refusals: %v, %v", st.counts, st.checks)
	}
}

func TestObserveIgnoresEventsWithoutTenantOrRefusals(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r := newTestRecorder(t, st, RecorderConfig{})
	r.Observe(context.Background(), gate.Event{At: t0, Outcome: gate.LayerIP, Refusals: []gate.Refusal{{Layer: gate.LayerIP, Key: "ip", ResetAt: t0}}})
	r.Observe(context.Background(), gate.Event{At: t0, TenantID: "t", Outcome: gate.OutcomeAllowed})
	if f, c, k, s := r.Pending(); f+c+k+s != 0 {
		t.Errorf("Pending() = %d, %d, %d, %d; want zeros", f, c, k, s)
	}
}

func TestObserveCountsOnlyPolicyRefusalsWithAlertAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ref    gate.Refusal
		counts bool
	}{
		{"policy with alert_after", policyRefusal("k", t0.Add(time.Minute), 5), true},
		{"shadow policy with alert_after", func() gate.Refusal { f := policyRefusal("k", t0.Add(time.Minute), 5); f.Shadow = true; return f }(), true},
		{"policy without alert_after", policyRefusal("k", t0.Add(time.Minute), 0), false},
		{"quota", gate.Refusal{Layer: gate.LayerQuota, Scope: "minute", Key: "q", ResetAt: t0.Add(time.Minute), AlertAfter: 5}, false},
		{"global policy without key", func() gate.Refusal { f := policyRefusal("", t0.Add(time.Minute), 5); return f }(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newFakeStore()
			r := newTestRecorder(t, st, RecorderConfig{})
			ctx := context.Background()
			for i := range 3 {
				r.Observe(ctx, gate.Event{At: t0.Add(time.Duration(i) * time.Second), TenantID: "t", Refusals: []gate.Refusal{tt.ref}})
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if !tt.counts {
				if len(st.counts) != 0 || len(st.checks) != 0 {
					t.Errorf("counted: %v, %v", st.counts, st.checks)
				}
				return
			}
			wantCount := RefusalCount{TenantID: "t", Policy: "sign-in", Key: tt.ref.Key, Hour: t0}
			if got := st.counts[wantCount]; got != 3 || len(st.counts) != 1 {
				t.Errorf("counts = %v, want 3 of %+v", st.counts, wantCount)
			}
			wantCheck := AlertCheck{TenantID: "t", Policy: "sign-in", Key: tt.ref.Key, AlertAfter: 5, At: t0.Add(2 * time.Second), Shadow: tt.ref.Shadow}
			if len(st.checks) != 1 || st.checks[0] != wantCheck {
				t.Errorf("checks = %+v, want [%+v]", st.checks, wantCheck)
			}
		})
	}
}

func TestFailedFlushKeepsEverything(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r := newTestRecorder(t, st, RecorderConfig{})
	ctx := context.Background()
	for i := range 4 {
		r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal(fmt.Sprint("k", i%2), t0.Add(time.Minute), 3)}})
	}
	st.setFailing(true)
	if err := r.Flush(ctx); !errors.Is(err, errDown) {
		t.Fatalf("Flush with the store down = %v, want %v", err, errDown)
	}
	r.Observe(ctx, gate.Event{At: t0.Add(time.Second), TenantID: "t", Refusals: []gate.Refusal{policyRefusal("k0", t0.Add(time.Minute), 3)}})
	st.setFailing(false)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.firsts) != 2 {
		t.Errorf("first refusals = %+v, want k0 and k1", st.firsts)
	}
	c0 := RefusalCount{TenantID: "t", Policy: "sign-in", Key: "k0", Hour: t0}
	c1 := RefusalCount{TenantID: "t", Policy: "sign-in", Key: "k1", Hour: t0}
	if st.counts[c0] != 3 || st.counts[c1] != 2 {
		t.Errorf("counts = %v, want k0: 3, k1: 2", st.counts)
	}
	if len(st.checks) != 2 || !st.checks[0].At.Equal(t0.Add(time.Second)) {
		t.Errorf("checks = %+v, want k0 at its latest refusal, then k1", st.checks)
	}
}

func TestCountsLostAfterCommitCountOnce(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	r := newTestRecorder(t, st, RecorderConfig{})
	ctx := context.Background()
	for range 3 {
		r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal("k", t0.Add(time.Minute), 3)}})
	}
	st.mu.Lock()
	st.lost = true
	st.mu.Unlock()
	if err := r.Flush(ctx); !errors.Is(err, errDown) {
		t.Fatalf("Flush with the answer lost = %v, want %v", err, errDown)
	}
	if len(st.checks) != 0 {
		t.Errorf("alerts checked before the counts were known to be written: %+v", st.checks)
	}
	r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal("k", t0.Add(time.Minute), 3)}})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := RefusalCount{TenantID: "t", Policy: "sign-in", Key: "k", Hour: t0}
	if got := st.counts[c]; got != 4 {
		t.Errorf("counted %d refusals, want 4", got)
	}
	if len(st.checks) != 1 {
		t.Errorf("checks = %+v, want one", st.checks)
	}
}

func TestSeenMapStaysBounded(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	const maxSeen = 100
	now := t0
	r := newTestRecorder(t, st, RecorderConfig{MaxSeen: maxSeen, Now: func() time.Time { return now }})
	ctx := context.Background()
	for i := range 10_000 {
		r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal(fmt.Sprint("k", i), t0.Add(time.Minute), 0)}})
		if _, _, _, seen := r.Pending(); seen > maxSeen {
			t.Fatalf("seen = %d after %d keys, want at most %d", seen, i+1, maxSeen)
		}
		if i%500 == 0 {
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Forgetting windows never loses a first refusal: every key is written.
	if len(st.firsts) != 10_000 {
		t.Errorf("first refusals = %d, want 10000", len(st.firsts))
	}
	// Once their windows end, a sweep forgets them.
	now = t0.Add(time.Minute)
	r.mu.Lock()
	r.sweepLocked(now)
	r.mu.Unlock()
	if _, _, _, seen := r.Pending(); seen != 0 {
		t.Errorf("seen = %d after the windows ended, want 0", seen)
	}
}

func TestPendingStaysBoundedWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.setFailing(true)
	const maxPending = 50
	r := newTestRecorder(t, st, RecorderConfig{MaxPending: maxPending})
	ctx := context.Background()
	for i := range 2000 {
		r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal(fmt.Sprint("k", i), t0.Add(time.Minute), 3)}})
		if i%100 == 0 {
			_ = r.Flush(ctx)
		}
		// Counts may hold a failed batch besides: up to twice the bound.
		if f, c, k, _ := r.Pending(); f > maxPending || c > 2*maxPending || k > maxPending {
			t.Fatalf("Pending() = %d, %d, %d after %d keys, want at most %d, %d, %d", f, c, k, i+1, maxPending, 2*maxPending, maxPending)
		}
	}
	// A key dropped for want of room is not remembered as seen: its next
	// refusal, once there is room, is queued.
	st.setFailing(false)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.Observe(ctx, gate.Event{At: t0, TenantID: "t", Refusals: []gate.Refusal{policyRefusal("k1999", t0.Add(time.Minute), 3)}})
	if f, _, _, _ := r.Pending(); f != 1 {
		t.Errorf("pending first refusals = %d, want 1", f)
	}
}

func TestNewRecorderNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := NewRecorder(RecorderConfig{}); err == nil {
		t.Error("NewRecorder without a store: got nil error")
	}
}
