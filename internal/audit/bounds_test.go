package audit_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// rowsOf counts a tenant's rows in table.
func rowsOf(t *testing.T, pool *pgxpool.Pool, table, tenantID string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE tenant_id = $1", tenantID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// refusalsCounted sums a tenant's hourly refusal counts, its subjects' own
// and the aggregates'.
func refusalsCounted(t *testing.T, pool *pgxpool.Pool, tenantID string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT coalesce(sum(refusals), 0)::bigint FROM refusal_hours WHERE tenant_id = $1", tenantID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAlertFloodWritesBoundedRowsPerDay: 12,800 new subjects of a policy
// with alert_after, refused in two hours of one day, leave at most the
// day's watch budget of subjects with counts of their own (and of alerts'
// bookkeeping), whatever the number of subjects; every refusal is still
// counted.
func TestAlertFloodWritesBoundedRowsPerDay(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, audit.RecorderConfig{Now: func() time.Time { return t0 }})
	flush := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), audit.DefaultFlushTimeout)
		defer cancel()
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	flood(r, tenant, "a", 200, 32, t0.Add(10*time.Second))
	flush()
	flood(r, tenant, "b", 200, 32, t0.Add(2*time.Hour))
	flush()

	const watch = audit.DefaultWatchBudget
	if n := rowsOf(t, pool, "refusal_hours", tenant); n != watch+2 {
		t.Errorf("refusal_hours rows = %d, want %d (the watch budget and one aggregate per hour)", n, watch+2)
	}
	if n := rowsOf(t, pool, "alert_overflow", tenant); n != watch-audit.DefaultAlertBudget {
		t.Errorf("alert_overflow rows = %d, want %d", n, watch-audit.DefaultAlertBudget)
	}
	if n := rowsOf(t, pool, "alerts", tenant); n != audit.DefaultAlertBudget+1 {
		t.Errorf("alerts rows = %d, want %d", n, audit.DefaultAlertBudget+1)
	}
	if n := refusalsCounted(t, pool, tenant); n != 12800 {
		t.Errorf("refusals counted = %d, want 12800", n)
	}
	_, agg := ownAlerts(t, pool, tenant)
	if len(agg) != 1 || agg[0].Subjects != watch-audit.DefaultAlertBudget || agg[0].Unwatched != 12800-watch {
		t.Errorf("aggregates = %+v, want one counting %d subjects and %d unwatched refusals", agg, watch-audit.DefaultAlertBudget, 12800-watch)
	}
}

// TestWatchedSubjectsKeepCounting: a subject watched before the day's
// watch budget is spent keeps its own count, and reaches its alert, however
// many subjects come after it; one that came after counts in the aggregate
// and raises none. Its instance, told the day is full, sends the latecomers
// as one aggregate count.
func TestWatchedSubjectsKeepCounting(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r, st := newCountingRecorder(t, pool, audit.RecorderConfig{WatchBudget: 3})
	ctx := context.Background()
	refuse := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			r.Observe(ctx, admission.Event{At: t0, TenantID: tenant, Refusals: []admission.Refusal{policyRefusal(k, t0.Add(time.Minute), 3)}})
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refuse("a", "b", "c", "d", "e")
	refuse("a", "d")
	_, sentBefore, _, _ := st.sent()
	refuse("a", "d", "f", "g", "h")
	if _, sent, _, _ := st.sent(); sent-sentBefore != 2 {
		t.Errorf("counts sent once the day was full = %d, want 2 (a's and the aggregate)", sent-sentBefore)
	}
	want := map[hourRow]int64{
		{tenant, "sign-in", "a", t0}: 3, {tenant, "sign-in", "b", t0}: 1, {tenant, "sign-in", "c", t0}: 1,
		{tenant, "sign-in", alert.AggregateSubject, t0}: 2 + 1 + 4,
	}
	if got := hours(t, pool); !maps.Equal(got, want) {
		t.Errorf("refusal_hours = %v, want %v", got, want)
	}
	as := alertsOf(t, pool, tenant)
	if len(as) != 2 || as[0].SubjectKey+as[1].SubjectKey != "a"+alert.AggregateSubject && as[0].SubjectKey+as[1].SubjectKey != alert.AggregateSubject+"a" {
		t.Fatalf("alerts = %+v, want a's and an aggregate", as)
	}
	for _, a := range as {
		if a.SubjectKey == alert.AggregateSubject && (a.Subjects != 0 || a.Count != 0 || a.Unwatched != 7) {
			t.Errorf("aggregate = %+v, want no subject past the alert budget and 7 unwatched refusals", a)
		}
	}
}

// TestWatchBudgetIsSharedByInstances: three instances flooding one tenant's
// day at once, with subjects partly in common, watch one budget of subjects
// between them and count every refusal once.
func TestWatchBudgetIsSharedByInstances(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	var wg sync.WaitGroup
	for i := range 3 {
		r := newRecorder(t, pool, audit.RecorderConfig{Now: func() time.Time { return t0 }})
		wg.Go(func() {
			for round := range 8 {
				at := t0.Add(time.Duration(round) * time.Second)
				flood(r, tenant, "shared", 2, 32, at)
				flood(r, tenant, fmt.Sprintf("own%d-%d", i, round), 3, 32, at)
				if err := r.Flush(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	const watch = audit.DefaultWatchBudget
	var watched, aggregates, spent int
	if err := pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE subject_key <> '*'), count(*) FILTER (WHERE subject_key = '*'),
		(SELECT watched FROM alert_days WHERE tenant_id = $1)
		FROM refusal_hours WHERE tenant_id = $1`, tenant).Scan(&watched, &aggregates, &spent); err != nil {
		t.Fatal(err)
	}
	if watched != watch || aggregates != 1 || spent != watch {
		t.Errorf("watched subjects %d, aggregate rows %d, budget spent %d; want %d, 1, %d", watched, aggregates, spent, watch, watch)
	}
	// 3 instances x 8 rounds x (64 shared + 96 own) refusals.
	if n := refusalsCounted(t, pool, tenant); n != 3*8*160 {
		t.Errorf("refusals counted = %d, want %d", n, 3*8*160)
	}
}

// TestResetFloodIsBoundedAcrossInstances: three instances noting 600
// counter resets of one tenant in one minute, from live and test keys at
// once, write one audit budget of entries per key kind between them and
// one flood entry each that counts the rest exactly; the next minute has a
// budget of its own.
func TestResetFloodIsBoundedAcrossInstances(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	const budget = 20
	var wg sync.WaitGroup
	var recs []*audit.Recorder
	for i := range 3 {
		r := newRecorder(t, pool, audit.RecorderConfig{AuditBudget: budget, Now: func() time.Time { return t0 }})
		recs = append(recs, r)
		wg.Go(func() {
			for round := range 4 {
				for j := range 50 {
					at := t0.Add(time.Duration(round*10+j%10) * time.Second)
					for _, sandbox := range []bool{false, true} {
						r.Note(audit.Entry{At: at, TenantID: tenant, Actor: "tenant api", Kind: audit.KindCounterReset,
							Detail: map[string]any{"policy": "login", "subject_key": fmt.Sprint(i, round, j), "sandbox": sandbox}}, sandbox)
					}
				}
				if err := r.Flush(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	totals := func(sandbox bool) (entries, floods, counted int64) {
		t.Helper()
		err := pool.QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE kind = 'counter_reset'),
			count(*) FILTER (WHERE kind = 'counter_reset_flood'),
			coalesce(sum((detail->>'entries')::bigint) FILTER (WHERE kind = 'counter_reset_flood'), 0)::bigint
			FROM audit WHERE tenant_id = $1 AND (detail->>'sandbox')::boolean = $2`, tenant, sandbox).Scan(&entries, &floods, &counted)
		if err != nil {
			t.Fatal(err)
		}
		return entries, floods, counted
	}
	for _, sandbox := range []bool{false, true} {
		if e, f, c := totals(sandbox); e != budget || f != 1 || c != 600-budget {
			t.Errorf("sandbox %v: %d entries and %d flood entries counting %d, want %d, 1 and %d", sandbox, e, f, c, budget, 600-budget)
		}
	}
	r := recs[0]
	r.Note(audit.Entry{At: t0.Add(time.Minute), TenantID: tenant, Actor: "tenant api", Kind: audit.KindCounterReset, Detail: map[string]any{"sandbox": false}}, false)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e, f, c := totals(false); e != budget+1 || f != 1 || c != 600-budget {
		t.Errorf("next minute: %d entries and %d flood entries counting %d, want %d, 1 and %d", e, f, c, budget+1, 600-budget)
	}
}
