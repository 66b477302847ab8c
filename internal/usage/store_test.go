package usage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/bg"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/usage"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type rowKey struct {
	tenant        string
	minute        time.Time
	live, checked bool
	outcome       string
}

// stored reads usage_minutes whole.
func stored(t *testing.T, pool *pgxpool.Pool) map[rowKey]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT tenant_id::text, minute, live, checked, outcome, checks FROM usage_minutes")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[rowKey]int64{}
	for rows.Next() {
		var k rowKey
		var n int64
		if err := rows.Scan(&k.tenant, &k.minute, &k.live, &k.checked, &k.outcome, &n); err != nil {
			t.Fatal(err)
		}
		k.minute = k.minute.UTC()
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func newRecorder(t *testing.T, pool *pgxpool.Pool, cfg usage.Config) *usage.Recorder {
	t.Helper()
	cfg.Store = pgstore.NewUsage(pool)
	r, err := usage.NewRecorder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var outcomes = []string{admission.OutcomeAllowed, admission.LayerPolicy, admission.LayerIP, admission.LayerQuota, admission.LayerAllotment, admission.LayerSandbox}

func TestConcurrentRecordersFlushExactTotals(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	testConcurrentTotals(t, func(g, i int) time.Time {
		return start.Add(time.Duration(i%5)*time.Minute + time.Duration(g)*time.Second)
	})
}

// TestConcurrentTotalsAsMinutesTurn: the newest minute moves on while other
// goroutines add to its counts without a lock and flushes fold them.
func TestConcurrentTotalsAsMinutesTurn(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	testConcurrentTotals(t, func(g, i int) time.Time {
		return start.Add(time.Duration(i/40)*time.Minute + time.Duration(g)*time.Millisecond)
	})
}

// testConcurrentTotals has 16 goroutines observe 3000 events each (at
// at(g, i)) into two recorders flushing every few milliseconds, and wants
// every event in usage_minutes exactly once.
func testConcurrentTotals(t *testing.T, at func(g, i int) time.Time) {
	pool := pgtest.Pool(t)
	tenants := []string{pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")}
	// Two instances on one database, flushing often, so that flushes race
	// each other and the events.
	a := newRecorder(t, pool, usage.Config{FlushEvery: 3 * time.Millisecond})
	b := newRecorder(t, pool, usage.Config{FlushEvery: 5 * time.Millisecond})
	stopA, stopB := bg.Run(a.Run), bg.Run(b.Run)

	const goroutines, events = 16, 3000
	event := func(g, i int) admission.Event {
		return admission.Event{
			At:       at(g, i),
			TenantID: tenants[(g+i)%len(tenants)],
			Live:     i%3 != 0,
			Checked:  i%4 != 0,
			Outcome:  outcomes[(g*7+i)%len(outcomes)],
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rec := a
			if g%2 == 1 {
				rec = b
			}
			for i := range events {
				rec.Observe(context.Background(), event(g, i))
			}
		})
	}
	wg.Wait()
	if err := stopA(); err != nil {
		t.Fatalf("instance a: Run: %v", err)
	}
	if err := stopB(); err != nil {
		t.Fatalf("instance b: Run: %v", err)
	}

	want := map[rowKey]int64{}
	for g := range goroutines {
		for i := range events {
			e := event(g, i)
			want[rowKey{e.TenantID, e.At.Truncate(time.Minute), e.Live, e.Checked, e.Outcome}]++
		}
	}
	got := stored(t, pool)
	if !maps.Equal(got, want) {
		var sumGot, sumWant int64
		for _, n := range got {
			sumGot += n
		}
		for _, n := range want {
			sumWant += n
		}
		t.Errorf("usage_minutes holds %d rows, %d events; want %d rows, %d events", len(got), sumGot, len(want), sumWant)
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%+v: got %d, want %d", k, got[k], n)
				break
			}
		}
	}
}

func TestGracefulStopFlushesEverything(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	// Run would not flush for an hour: only the final flush writes.
	r := newRecorder(t, pool, usage.Config{FlushEvery: time.Hour})
	stop := bg.Run(r.Run)
	at := time.Date(2026, 11, 15, 12, 0, 30, 0, time.UTC)
	for range 1234 {
		r.Observe(context.Background(), admission.Event{At: at, TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := map[rowKey]int64{{tenant, at.Truncate(time.Minute), true, true, admission.OutcomeAllowed}: 1234}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() after Run = %d, want 0", got)
	}
}

func TestFlushDropsUnknownTenants(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, usage.Config{})
	at := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{tenant, "not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		r.Observe(context.Background(), admission.Event{At: at, TenantID: id, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	want := map[rowKey]int64{{tenant, at, true, true, admission.OutcomeAllowed}: 1}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestUsageCountsChecksAndSandbox(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant, other := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	r := newRecorder(t, pool, usage.Config{})
	ctx := context.Background()

	type flush struct {
		n int
		e admission.Event
	}
	ev := func(at time.Time, tenant string, live, checked bool, outcome string) admission.Event {
		return admission.Event{At: at, TenantID: tenant, Live: live, Checked: checked, Outcome: outcome}
	}
	flushes := []flush{
		// Live checks this month: allowed and refused by a policy count.
		{7, ev(now.Add(-time.Hour), tenant, true, true, admission.OutcomeAllowed)},
		{3, ev(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), tenant, true, true, admission.LayerPolicy)},
		// Refused by ceilings: refusals, not checks.
		{4, ev(now, tenant, true, true, admission.LayerQuota)},
		{2, ev(now, tenant, true, true, admission.LayerAllotment)},
		// Other routes: not checks; their refusals still count by layer.
		{5, ev(now, tenant, true, false, admission.OutcomeAllowed)},
		{6, ev(now, tenant, true, false, admission.LayerIP)},
		// Last month's live checks: no.
		{8, ev(time.Date(2026, 10, 31, 23, 59, 59, 0, time.UTC), tenant, true, true, admission.OutcomeAllowed)},
		// Test checks in the last 30 days, last month included: sandbox.
		{9, ev(now.Add(-20*24*time.Hour), tenant, false, true, admission.OutcomeAllowed)},
		{1, ev(now.Add(-29*24*time.Hour), tenant, false, true, admission.LayerPolicy)},
		{2, ev(now, tenant, false, true, admission.LayerSandbox)},
		// Test checks older than 30 days, test calls of other routes: no.
		{10, ev(now.Add(-31*24*time.Hour), tenant, false, true, admission.OutcomeAllowed)},
		{11, ev(now, tenant, false, false, admission.OutcomeAllowed)},
		// Another tenant's: no.
		{12, ev(now, other, true, true, admission.OutcomeAllowed)},
		{13, ev(now, other, false, true, admission.OutcomeAllowed)},
	}
	// Half of each flush reaches the table, half stays in memory: the
	// report adds them.
	for _, b := range flushes {
		for range b.n / 2 {
			r.Observe(ctx, b.e)
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range flushes {
		for range b.n - b.n/2 {
			r.Observe(ctx, b.e)
		}
	}
	rep, err := r.Usage(ctx, tenant, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.ChecksUsed, int64(7+3); got != want {
		t.Errorf("ChecksUsed = %d, want %d", got, want)
	}
	if got, want := rep.SandboxUsed, int64(9+1); got != want {
		t.Errorf("SandboxUsed = %d, want %d", got, want)
	}
	wantRefusals := map[string]int64{admission.LayerPolicy: 3, admission.LayerQuota: 4, admission.LayerAllotment: 2, admission.LayerIP: 6, admission.LayerSandbox: 2}
	if !maps.Equal(rep.Refusals, wantRefusals) {
		t.Errorf("Refusals = %v, want %v", rep.Refusals, wantRefusals)
	}
	if want := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC); !rep.PeriodStart.Equal(want) {
		t.Errorf("PeriodStart = %v, want %v", rep.PeriodStart, want)
	}
	if want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !rep.PeriodEnd.Equal(want) {
		t.Errorf("PeriodEnd = %v, want %v", rep.PeriodEnd, want)
	}
	if rep.Alerts == nil || len(rep.Alerts) != 0 {
		t.Errorf("Alerts = %#v, want an empty list", rep.Alerts)
	}

	// After a flush the answer is the same.
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := r.Usage(ctx, tenant, now)
	if err != nil {
		t.Fatal(err)
	}
	if again.ChecksUsed != rep.ChecksUsed || again.SandboxUsed != rep.SandboxUsed || !maps.Equal(again.Refusals, rep.Refusals) {
		t.Errorf("after flushing: %+v, before: %+v", again, rep)
	}
}

func TestUsageDuringFlushesCountsEachEventOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	r := newRecorder(t, pool, usage.Config{FlushEvery: time.Millisecond})
	stop := bg.Run(r.Run)
	defer stop()
	ctx := context.Background()
	// Reports run while Run flushes: none may see an event twice or miss
	// one observed before it started.
	var observed int64
	for i := range 200 {
		for range 10 {
			r.Observe(ctx, admission.Event{At: now, TenantID: tenant, Live: true, Checked: true, Outcome: admission.OutcomeAllowed})
		}
		observed += 10
		rep, err := r.Usage(ctx, tenant, now)
		if err != nil {
			t.Fatal(err)
		}
		if rep.ChecksUsed != observed {
			t.Fatalf("report %d: ChecksUsed = %d, want %d", i, rep.ChecksUsed, observed)
		}
	}
}

func TestUsageOfUnknownTenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	r := newRecorder(t, pool, usage.Config{})
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "nope"} {
		t.Run(id, func(t *testing.T) {
			rep, err := r.Usage(context.Background(), id, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if rep.ChecksUsed != 0 || rep.SandboxUsed != 0 || len(rep.Refusals) != 0 {
				t.Errorf("report = %+v, want zeros", rep)
			}
		})
	}
}

// TestReportJSONNames keeps the report's JSON names, which /v1/usage may
// serve as they are.
func TestReportJSONNames(t *testing.T) {
	t.Parallel()
	rep := usage.Report{Refusals: map[string]int64{}}
	got := fmt.Sprintf("%v", jsonKeys(t, rep))
	want := "[alerts checks_used period_end period_start refusals sandbox_since sandbox_used tenant_id]"
	if got != want {
		t.Errorf("JSON keys = %s, want %s", got, want)
	}
}

func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

func TestAddUsageAppliesAFlushOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	st := pgstore.NewUsage(pool)
	ctx := context.Background()
	minute := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	rows := []usage.Row{{TenantID: tenant, Minute: minute, Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Count: 5}}
	const id = "0b7f3a52-4e2c-4b8e-9d0a-5f1c2e3d4a5b"
	if applied, err := st.FlushApplied(ctx, id); err != nil || applied {
		t.Fatalf("FlushApplied before = %t, %v; want false", applied, err)
	}
	// Sent again, as after an error that hid its commit: counted once.
	for range 3 {
		if err := st.AddUsage(ctx, id, rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddUsage(ctx, "1b7f3a52-4e2c-4b8e-9d0a-5f1c2e3d4a5b", rows); err != nil {
		t.Fatal(err)
	}
	if applied, err := st.FlushApplied(ctx, id); err != nil || !applied {
		t.Fatalf("FlushApplied after = %t, %v; want true", applied, err)
	}
	want := map[rowKey]int64{{tenant, minute, true, true, admission.OutcomeAllowed}: 10}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
	if err := st.AddUsage(ctx, "not-a-uuid", rows); err == nil {
		t.Error("AddUsage with a flush id that is not a UUID: got nil error")
	}
	// Pruning forgets old flush ids only.
	if err := st.PruneFlushes(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if applied, err := st.FlushApplied(ctx, id); err != nil || !applied {
		t.Errorf("FlushApplied after pruning older ids = %t, %v; want true", applied, err)
	}
	if err := st.PruneFlushes(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if applied, err := st.FlushApplied(ctx, id); err != nil || applied {
		t.Errorf("FlushApplied after pruning = %t, %v; want false", applied, err)
	}
}
