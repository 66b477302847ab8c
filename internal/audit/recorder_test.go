package audit_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/bg"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// The Recorder's tests below run over the real PostgreSQL store; where the
// store must fail, the link to the database is cut for real, and where what
// the Recorder sends matters, the real store is wrapped to count it.

// countingStore is the real store, counting what the Recorder sends it.
type countingStore struct {
	*pgstore.Audit

	mu         sync.Mutex
	firsts     int // first refusals sent
	counts     int // hourly counts sent
	checks     int // alert checks sent
	raiseCalls int
}

func (s *countingStore) RecordFirstRefusals(ctx context.Context, b audit.FirstRefusalFlush) (int64, error) {
	s.mu.Lock()
	s.firsts += len(b.Refusals)
	s.mu.Unlock()
	return s.Audit.RecordFirstRefusals(ctx, b)
}

func (s *countingStore) CountRefusals(ctx context.Context, flushID string, budget int, cs []audit.RefusalCount) ([]audit.Watch, error) {
	s.mu.Lock()
	s.counts += len(cs)
	s.mu.Unlock()
	return s.Audit.CountRefusals(ctx, flushID, budget, cs)
}

func (s *countingStore) RaiseAlerts(ctx context.Context, budget int, cs []audit.AlertCheck) (int64, error) {
	s.mu.Lock()
	s.checks += len(cs)
	s.raiseCalls++
	s.mu.Unlock()
	return s.Audit.RaiseAlerts(ctx, budget, cs)
}

// sent returns the first refusals, counts and checks sent so far, and the
// calls of RaiseAlerts.
func (s *countingStore) sent() (firsts, counts, checks, raiseCalls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firsts, s.counts, s.checks, s.raiseCalls
}

// newCountingRecorder returns a Recorder over the real store on pool,
// counted, with the clock stopped at t0 unless cfg has one.
func newCountingRecorder(t *testing.T, pool *pgxpool.Pool, cfg audit.RecorderConfig) (*audit.Recorder, *countingStore) {
	t.Helper()
	st := &countingStore{Audit: pgstore.NewAudit(pool)}
	cfg.Store = st
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0 }
	}
	r, err := audit.NewRecorder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, st
}

type hourRow struct {
	tenant, policy, key string
	hour                time.Time
}

// hours reads refusal_hours whole.
func hours(t *testing.T, pool *pgxpool.Pool) map[hourRow]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT tenant_id::text, policy, subject_key, hour, refusals FROM refusal_hours")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[hourRow]int64{}
	for rows.Next() {
		var k hourRow
		var n int64
		if err := rows.Scan(&k.tenant, &k.policy, &k.key, &k.hour, &n); err != nil {
			t.Fatal(err)
		}
		k.hour = k.hour.UTC()
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// alertsOf reads a tenant's alerts, latest first.
func alertsOf(t *testing.T, pool *pgxpool.Pool, tenant string) []alert.Alert {
	t.Helper()
	as, err := pgstore.NewAudit(pool).ListAlerts(context.Background(), tenant, time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range as {
		as[i].FirstAt, as[i].LastAt = as[i].FirstAt.UTC(), as[i].LastAt.UTC()
	}
	return as
}

// count returns the rows of a table.
func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func policyRefusal(key string, resetAt time.Time, alertAfter int64) admission.Refusal {
	return admission.Refusal{Layer: admission.LayerPolicy, Policy: "sign-in", Limit: 10, Window: time.Minute, ResetAt: resetAt, Key: key, AlertAfter: alertAfter}
}

func TestRefusalDetail(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 11, 15, 12, 1, 0, 0, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		ref  admission.Refusal
		want map[string]any
	}{
		{
			name: "policy",
			ref:  admission.Refusal{Layer: admission.LayerPolicy, Policy: "sign-in", Limit: 10, Key: "k1", Shadow: true},
			want: map[string]any{"layer": "policy", "scope": "", "policy": "sign-in", "limit": int64(10), "key": "k1",
				"window_end": "2026-11-15T11:01:00Z", "degraded": false, "shadow": true},
		},
		{
			name: "quota, degraded",
			ref:  admission.Refusal{Layer: admission.LayerQuota, Scope: "minute", Limit: 1200, Key: "q", Degraded: true},
			want: map[string]any{"layer": "quota", "scope": "minute", "policy": "", "limit": int64(1200), "key": "q",
				"window_end": "2026-11-15T11:01:00Z", "degraded": true, "shadow": false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := audit.RefusalDetail(tt.ref, end)
			if !maps.Equal(got, tt.want) {
				t.Errorf("RefusalDetail = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRecorderQueuesFirstRefusalOfAWindowOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant, other := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")
	r, st := newCountingRecorder(t, pool, audit.RecorderConfig{})
	ctx := context.Background()
	end1, end2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for range 1000 {
		r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Outcome: admission.LayerPolicy, Refusals: []admission.Refusal{policyRefusal("k", end1, 0)}})
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Still the same window after a flush; then a new window; then the same
	// key for another tenant.
	r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal("k", end1, 0)}})
	r.Observe(ctx, admission.Event{At: t0.Add(time.Minute), TenantID: tenant, Refusals: []admission.Refusal{policyRefusal("k", end2, 0)}})
	r.Observe(ctx, admission.Event{At: t0.Add(time.Minute), TenantID: other, Refusals: []admission.Refusal{policyRefusal("k", end2, 0)}})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The Recorder sent each window once: the database did not have to
	// turn away the rest.
	firsts, counts, checks, _ := st.sent()
	if firsts != 3 {
		t.Errorf("first refusals sent = %d, want 3", firsts)
	}
	windows := func(tenant string) []string {
		var out []string
		for _, e := range refusalEntries(t, pool, tenant) {
			out = append(out, fmt.Sprint(e.Detail["key"], "@", e.Detail["window_end"]))
		}
		return out
	}
	if got, want := windows(tenant), []string{"k@2026-11-15T12:02:00Z", "k@2026-11-15T12:01:00Z"}; !slices.Equal(got, want) {
		t.Errorf("tenant's refusal entries = %v, want %v", got, want)
	}
	if got, want := windows(other), []string{"k@2026-11-15T12:02:00Z"}; !slices.Equal(got, want) {
		t.Errorf("other tenant's refusal entries = %v, want %v", got, want)
	}
	if counts != 0 || checks != 0 || count(t, pool, "refusal_hours") != 0 || count(t, pool, "alerts") != 0 {
		t.Errorf("alert_after 0 counted refusals: %d counts and %d checks sent, %v stored", counts, checks, hours(t, pool))
	}
}

func TestRecorderObserveIgnoresEventsWithoutTenantOrRefusals(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r, _ := newCountingRecorder(t, pool, audit.RecorderConfig{})
	r.Observe(context.Background(), admission.Event{At: t0, Outcome: admission.LayerIP, Refusals: []admission.Refusal{{Layer: admission.LayerIP, Key: "ip", ResetAt: t0}}})
	r.Observe(context.Background(), admission.Event{At: t0, TenantID: tenant, Outcome: admission.OutcomeAllowed})
	if f, c, k, s := r.Pending(); f+c+k+s != 0 {
		t.Errorf("Pending() = %d, %d, %d, %d; want zeros", f, c, k, s)
	}
}

func TestRecorderCountsOnlyPolicyRefusalsWithAlertAfter(t *testing.T) {
	t.Parallel()
	// An alert_after of 3 and three refusals: a check sent raises an alert
	// that shows what it held.
	tests := []struct {
		name   string
		ref    admission.Refusal
		counts bool
	}{
		{"policy with alert_after", policyRefusal("k", t0.Add(time.Minute), 3), true},
		{"shadow policy with alert_after", func() admission.Refusal { f := policyRefusal("k", t0.Add(time.Minute), 3); f.Shadow = true; return f }(), true},
		{"policy without alert_after", policyRefusal("k", t0.Add(time.Minute), 0), false},
		{"quota", admission.Refusal{Layer: admission.LayerQuota, Scope: "minute", Key: "q", ResetAt: t0.Add(time.Minute), AlertAfter: 3}, false},
		{"global policy without key", policyRefusal("", t0.Add(time.Minute), 3), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			tenant := pgtest.Tenant(t, pool, "starter")
			r, st := newCountingRecorder(t, pool, audit.RecorderConfig{})
			ctx := context.Background()
			for i := range 3 {
				r.Observe(ctx, admission.Event{At: t0.Add(time.Duration(i) * time.Second), TenantID: tenant, Refusals: []admission.Refusal{tt.ref}})
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			_, counts, checks, _ := st.sent()
			if !tt.counts {
				if counts != 0 || checks != 0 || count(t, pool, "refusal_hours") != 0 || count(t, pool, "alerts") != 0 {
					t.Errorf("counted: %d counts and %d checks sent, %v stored", counts, checks, hours(t, pool))
				}
				return
			}
			wantHours := map[hourRow]int64{{tenant, "sign-in", tt.ref.Key, t0}: 3}
			if got := hours(t, pool); !maps.Equal(got, wantHours) {
				t.Errorf("refusal_hours = %v, want %v", got, wantHours)
			}
			// The check is the latest refusal's.
			wantAlert := alert.Alert{Policy: "sign-in", Subjects: 1, SubjectKey: tt.ref.Key, Count: 3, AlertAfter: 3,
				FirstAt: t0.Add(2 * time.Second), LastAt: t0.Add(2 * time.Second), Shadow: tt.ref.Shadow}
			if got := alertsOf(t, pool, tenant); len(got) != 1 || got[0] != wantAlert {
				t.Errorf("alerts = %+v, want [%+v]", got, wantAlert)
			}
			if checks != 1 {
				t.Errorf("checks sent = %d, want 1", checks)
			}
		})
	}
}

func TestRecorderFailedFlushKeepsEverything(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenant := pgtest.Tenant(t, direct, "starter")
	r, _ := newCountingRecorder(t, pool, audit.RecorderConfig{})
	ctx := context.Background()
	for i := range 4 {
		r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal(fmt.Sprint("k", i%2), t0.Add(time.Minute), 2)}})
	}
	proxy.Cut()
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush with the database cut off: got nil error")
	}
	r.Observe(ctx, admission.Event{At: t0.Add(time.Second), TenantID: tenant, Refusals: []admission.Refusal{policyRefusal("k0", t0.Add(time.Minute), 2)}})
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range refusalEntries(t, direct, tenant) {
		keys = append(keys, fmt.Sprint(e.Detail["key"]))
	}
	if slices.Sort(keys); !slices.Equal(keys, []string{"k0", "k1"}) {
		t.Errorf("refusal entries of keys %v, want k0 and k1", keys)
	}
	wantHours := map[hourRow]int64{{tenant, "sign-in", "k0", t0}: 3, {tenant, "sign-in", "k1", t0}: 2}
	if got := hours(t, direct); !maps.Equal(got, wantHours) {
		t.Errorf("refusal_hours = %v, want %v", got, wantHours)
	}
	// k0's check is at its latest refusal.
	wantAlerts := []alert.Alert{
		{Policy: "sign-in", Subjects: 1, SubjectKey: "k0", Count: 3, AlertAfter: 2, FirstAt: t0.Add(time.Second), LastAt: t0.Add(time.Second)},
		{Policy: "sign-in", Subjects: 1, SubjectKey: "k1", Count: 2, AlertAfter: 2, FirstAt: t0, LastAt: t0},
	}
	if got := alertsOf(t, direct, tenant); !slices.Equal(got, wantAlerts) {
		t.Errorf("alerts = %+v, want %+v", got, wantAlerts)
	}
}

func TestRecorderCountsLostAfterCommitCountOnce(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenant := pgtest.Tenant(t, direct, "starter")
	r, st := newCountingRecorder(t, pool, audit.RecorderConfig{})
	ctx := context.Background()
	// The key's first refusal is written first, so that the flush below
	// sends counts alone: its flush is the one whose answer is lost.
	refuse := func() {
		r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal("k", t0.Add(time.Minute), 5)}})
	}
	refuse()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		refuse()
	}
	if err := pgtest.FlushLosingTheAnswer(t, direct, proxy, func() error { return r.Flush(ctx) }); err == nil {
		t.Fatal("Flush with the answer lost: got nil error")
	}
	if _, _, _, calls := st.sent(); calls != 1 {
		t.Errorf("RaiseAlerts called %d times, want only the first flush's: not before the counts were known to be written", calls)
	}
	want := map[hourRow]int64{{tenant, "sign-in", "k", t0}: 4}
	if got := hours(t, direct); !maps.Equal(got, want) {
		t.Fatalf("refusal_hours after the lost answer = %v, want %v", got, want)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	refuse()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want = map[hourRow]int64{{tenant, "sign-in", "k", t0}: 5}
	if got := hours(t, direct); !maps.Equal(got, want) {
		t.Errorf("refusal_hours = %v, want %v", got, want)
	}
	if _, _, checks, _ := st.sent(); checks != 2 {
		t.Errorf("checks sent = %d, want two: the first flush's and the last's", checks)
	}
	wantAlert := alert.Alert{Policy: "sign-in", Subjects: 1, SubjectKey: "k", Count: 5, AlertAfter: 5, FirstAt: t0, LastAt: t0}
	if got := alertsOf(t, direct, tenant); len(got) != 1 || got[0] != wantAlert {
		t.Errorf("alerts = %+v, want [%+v]", got, wantAlert)
	}
}

func TestRecorderSeenMapStaysBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	const maxSeen = 100
	var now atomic.Int64 // Unix nanoseconds; Run reads it on its goroutine
	now.Store(t0.UnixNano())
	r, _ := newCountingRecorder(t, pool, audit.RecorderConfig{
		MaxSeen: maxSeen, FlushEvery: time.Millisecond,
		Now: func() time.Time { return time.Unix(0, now.Load()).UTC() },
	})
	ctx := context.Background()
	for i := range 10_000 {
		r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal(fmt.Sprint("k", i), t0.Add(time.Minute), 0)}})
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
	// Forgetting windows never loses a first refusal: every key is written,
	// one by one or in the minute's flood entry.
	if entries, flood := refusalTotals(t, pool, tenant); entries+flood != 10_000 || entries != audit.DefaultAuditBudget {
		t.Errorf("refusal entries %d and flood refusals %d, want %d and the rest of 10000", entries, flood, audit.DefaultAuditBudget)
	}
	// Once their windows end, Run's sweep forgets them.
	now.Store(t0.Add(time.Minute).UnixNano())
	stop := bg.Run(r.Run)
	pgtest.WaitFor(t, "the ended windows to be forgotten", func() bool {
		_, _, _, seen := r.Pending()
		return seen == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRecorderPendingStaysBoundedWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenant := pgtest.Tenant(t, direct, "starter")
	const maxPending = 50
	r, _ := newCountingRecorder(t, pool, audit.RecorderConfig{MaxPending: maxPending})
	ctx := context.Background()
	proxy.Cut()
	for i := range 2000 {
		r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal(fmt.Sprint("k", i), t0.Add(time.Minute), 3)}})
		if i%100 == 0 {
			if err := r.Flush(ctx); err == nil {
				t.Fatalf("Flush after %d keys with the database cut off: got nil error", i+1)
			}
		}
		// Counts may hold a failed flush besides: up to twice the bound.
		if f, c, k, _ := r.Pending(); f > maxPending || c > 2*maxPending || k > maxPending {
			t.Fatalf("Pending() = %d, %d, %d after %d keys, want at most %d, %d, %d", f, c, k, i+1, maxPending, 2*maxPending, maxPending)
		}
	}
	// A first refusal that found no room was counted: once the database is
	// back, every one of the 2,000 is in the log, one by one or in the
	// minute's flood entry, and none twice.
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if entries, flood := refusalTotals(t, direct, tenant); entries+flood != 2000 {
		t.Errorf("refusal entries %d and flood refusals %d, want 2000 in all", entries, flood)
	}
	r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal("k1999", t0.Add(time.Minute), 3)}})
	if f, _, _, _ := r.Pending(); f != 0 {
		t.Errorf("pending first refusals = %d, want 0: k1999 was counted before", f)
	}
}

func TestNewRecorderNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := audit.NewRecorder(audit.RecorderConfig{}); err == nil {
		t.Error("NewRecorder without a store: got nil error")
	}
}
