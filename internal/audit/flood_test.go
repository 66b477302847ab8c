package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// flood observes checks refusals, each of items new subjects, of a policy
// with alert_after 1: every refusal is the first of its key and window, and
// every subject reaches its alert at once. Subjects are named by prefix, so
// that two floods with one prefix refuse the same subjects.
func flood(r *audit.Recorder, tenant, prefix string, checks, items int, at time.Time) {
	for c := range checks {
		refs := make([]admission.Refusal, items)
		for i := range refs {
			// Keys as long as the gate's: "p:<policy>:" and a 128-bit digest.
			sum := sha256.Sum256(fmt.Appendf(nil, "%s-%d-%d", prefix, c, i))
			refs[i] = policyRefusal("p:sign-in:"+hex.EncodeToString(sum[:16]), at.Truncate(time.Minute).Add(time.Minute), 1)
		}
		r.Observe(context.Background(), admission.Event{At: at, TenantID: tenant, Outcome: admission.LayerPolicy, Refusals: refs})
	}
}

// floodEntries returns a tenant's refusal_flood entries, newest first.
func floodEntries(t *testing.T, pool *pgxpool.Pool, tenantID string) []audit.Entry {
	t.Helper()
	es, err := audit.NewLog(pgstore.NewAudit(pool)).List(context.Background(), audit.Filter{TenantID: tenantID, Kind: audit.KindRefusalFlood, Limit: audit.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// ownAlerts splits a tenant's alerts into its subjects' own and the
// aggregates.
func ownAlerts(t *testing.T, pool *pgxpool.Pool, tenantID string) (own []alert.Alert, aggregates []alert.Alert) {
	t.Helper()
	as, err := pgstore.NewAudit(pool).ListAlerts(context.Background(), tenantID, time.Time{}, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.SubjectKey == alert.AggregateSubject {
			aggregates = append(aggregates, a)
		} else {
			own = append(own, a)
		}
	}
	return own, aggregates
}

// TestRefusalFloodWritesBoundedRows: 200 checks of 32 new subjects each, in
// one minute, write the minute's budget of refusal entries and one flood
// entry with the exact number of the rest; the day's budget of alerts and
// one aggregate alert counting the rest.
func TestRefusalFloodWritesBoundedRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, audit.RecorderConfig{Now: func() time.Time { return t0 }})
	ctx := context.Background()
	// Each flush has the time Run gives it: a flood must not make the
	// statements that bound it too slow to finish (a quadratic join once
	// did, and its alerts were never raised).
	flush := func() {
		t.Helper()
		fctx, cancel := context.WithTimeout(ctx, audit.DefaultFlushTimeout)
		defer cancel()
		if err := r.Flush(fctx); err != nil {
			t.Fatal(err)
		}
	}
	flood(r, tenant, "a", 200, 32, t0.Add(10*time.Second))
	flush()

	if entries, past := refusalTotals(t, pool, tenant); entries != audit.DefaultAuditBudget || past != 6400-audit.DefaultAuditBudget {
		t.Errorf("refusal entries %d and flood refusals %d, want %d and %d", entries, past, audit.DefaultAuditBudget, 6400-audit.DefaultAuditBudget)
	}
	fl := floodEntries(t, pool, tenant)
	if len(fl) != 1 {
		t.Fatalf("flood entries = %+v, want one", fl)
	}
	wantDetail := map[string]any{"window_start": "2026-11-15T12:00:00Z", "window_end": "2026-11-15T12:01:00Z",
		"refusals": json.Number("6350"), "budget": json.Number("50")}
	if fmt.Sprint(fl[0].Detail) != fmt.Sprint(wantDetail) || fl[0].Actor != audit.ActorTollgate {
		t.Errorf("flood entry = %+v, want detail %v by %s", fl[0], wantDetail, audit.ActorTollgate)
	}
	if n := count(t, pool, "audit"); n != audit.DefaultAuditBudget+1 {
		t.Errorf("audit rows = %d, want %d", n, audit.DefaultAuditBudget+1)
	}
	// Of the subjects, the day's watch budget is counted one by one: those
	// past the alert budget are counted in the aggregate, and the refusals
	// of the rest too, without their subjects.
	const pastAlerts, unwatched = audit.DefaultWatchBudget - audit.DefaultAlertBudget, 6400 - audit.DefaultWatchBudget
	own, agg := ownAlerts(t, pool, tenant)
	if len(own) != audit.DefaultAlertBudget || len(agg) != 1 || agg[0].Subjects != pastAlerts || agg[0].Count != pastAlerts || agg[0].Unwatched != unwatched {
		t.Errorf("%d alerts of their own and aggregates %+v; want %d and one counting %d subjects and %d unwatched refusals", len(own), agg, audit.DefaultAlertBudget, pastAlerts, unwatched)
	}

	// More of the same minute add to its flood entry; subjects refused
	// again are not counted twice; the next minute has a budget of its own.
	flood(r, tenant, "b", 10, 32, t0.Add(50*time.Second))
	flood(r, tenant, "a", 200, 32, t0.Add(50*time.Second))
	flush()
	if entries, past := refusalTotals(t, pool, tenant); entries != audit.DefaultAuditBudget || past != 6720-audit.DefaultAuditBudget {
		t.Errorf("after 320 more: refusal entries %d and flood refusals %d, want %d and %d", entries, past, audit.DefaultAuditBudget, 6720-audit.DefaultAuditBudget)
	}
	flood(r, tenant, "c", 1, 20, t0.Add(70*time.Second))
	flush()
	if entries, past := refusalTotals(t, pool, tenant); entries != audit.DefaultAuditBudget+20 || past != 6720-audit.DefaultAuditBudget {
		t.Errorf("next minute: refusal entries %d and flood refusals %d, want %d and %d", entries, past, audit.DefaultAuditBudget+20, 6720-audit.DefaultAuditBudget)
	}
	if fl := floodEntries(t, pool, tenant); len(fl) != 1 {
		t.Errorf("flood entries = %d, want still one", len(fl))
	}
	// The 340 new subjects are past the watch budget; of the 6,400 refused
	// again, those past it add their refusals again.
	own, agg = ownAlerts(t, pool, tenant)
	if want := int64(unwatched + 340 + unwatched); len(own) != audit.DefaultAlertBudget || len(agg) != 1 || agg[0].Subjects != pastAlerts || agg[0].Unwatched != want {
		t.Errorf("%d alerts of their own and aggregates %+v; want %d and one counting %d subjects and %d unwatched refusals", len(own), agg, audit.DefaultAlertBudget, pastAlerts, want)
	}
	// A subject with an alert of its own keeps updating it past the budget.
	sub := own[len(own)-1].SubjectKey
	r.Observe(ctx, admission.Event{At: t0.Add(2 * time.Hour), TenantID: tenant, Refusals: []admission.Refusal{policyRefusal(sub, t0.Add(2*time.Hour+time.Minute), 1)}})
	flush()
	own, _ = ownAlerts(t, pool, tenant)
	if own[0].SubjectKey != sub || !own[0].LastAt.Equal(t0.Add(2*time.Hour)) || own[0].Count != 3 {
		t.Errorf("latest alert = %+v, want %s's, updated at %v with 3 refusals", own[0], sub, t0.Add(2*time.Hour))
	}

	// The next UTC day has a budget of its own.
	day2 := t0.Add(24 * time.Hour)
	flood(r, tenant, "d", 1, 5, day2)
	flush()
	own, agg = ownAlerts(t, pool, tenant)
	if len(own) != audit.DefaultAlertBudget+5 || len(agg) != 1 {
		t.Errorf("next day: %d alerts of their own and %d aggregates, want %d and 1", len(own), len(agg), audit.DefaultAlertBudget+5)
	}
}

// TestFloodBudgetsAreSharedByInstances: two instances flooding one tenant in
// one minute, at the same time, with subjects partly in common, write one
// budget of entries and of alerts between them, and count every other first
// refusal and subject once.
func TestFloodBudgetsAreSharedByInstances(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	// Every subject is watched: the watch budget's own sharing is
	// TestWatchBudgetIsSharedByInstances.
	cfg := audit.RecorderConfig{AuditBudget: 30, AlertBudget: 40, WatchBudget: 10_000, Now: func() time.Time { return t0 }}
	a, b := newRecorder(t, pool, cfg), newRecorder(t, pool, cfg)
	var wg sync.WaitGroup
	for i, r := range []*audit.Recorder{a, b} {
		wg.Go(func() {
			for round := range 10 {
				// "shared" subjects are refused by both instances.
				flood(r, tenant, "shared", 2, 32, t0.Add(time.Duration(round)*time.Second))
				flood(r, tenant, fmt.Sprintf("own%d-%d", i, round), 3, 32, t0.Add(time.Duration(round)*time.Second))
				if err := r.Flush(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Distinct first refusals: 64 shared, and 2 instances x 10 rounds x 96.
	const distinct = 64 + 2*10*96
	if entries, past := refusalTotals(t, pool, tenant); entries != 30 || past != distinct-30 {
		t.Errorf("refusal entries %d and flood refusals %d, want 30 and %d", entries, past, distinct-30)
	}
	if fl := floodEntries(t, pool, tenant); len(fl) != 1 {
		t.Errorf("flood entries = %d, want 1", len(fl))
	}
	own, agg := ownAlerts(t, pool, tenant)
	if len(own) != 40 || len(agg) != 1 || agg[0].Subjects != distinct-40 {
		t.Errorf("%d alerts of their own and aggregates %+v; want 40 and one counting %d subjects", len(own), agg, distinct-40)
	}
}

// TestFloodingTenantDoesNotCrowdOutAnother: a tenant that refuses more new
// keys between two flushes than the whole queue holds leaves room for
// another tenant's first refusal, and its own are all counted.
func TestFloodingTenantDoesNotCrowdOutAnother(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	a, b := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, audit.RecorderConfig{MaxPending: 1000, Now: func() time.Time { return t0 }})
	ctx := context.Background()
	flood(r, a, "a", 100, 32, t0)
	r.Observe(ctx, admission.Event{At: t0, TenantID: b, Outcome: admission.LayerPolicy, Refusals: []admission.Refusal{policyRefusal("b-key", t0.Add(time.Minute), 1)}})
	if f, c, k, _ := r.Pending(); f > 101 || c > 101 || k > 101 {
		t.Errorf("Pending() = %d, %d, %d; want at most a's share (100) and b's one", f, c, k)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if es := refusalEntries(t, pool, b); len(es) != 1 {
		t.Errorf("tenant b's refusal entries = %d, want its one first refusal", len(es))
	}
	if as := alertsOf(t, pool, b); len(as) != 1 {
		t.Errorf("tenant b's alerts = %+v, want one", as)
	}
	if entries, past := refusalTotals(t, pool, a); entries+past != 3200 {
		t.Errorf("tenant a: refusal entries %d and flood refusals %d, want 3200 in all", entries, past)
	}

	// A queue full of many tenants' writes still takes a first write of
	// one more tenant.
	r = newRecorder(t, pool, audit.RecorderConfig{MaxPending: 100, MaxPendingPerTenant: 50, Now: func() time.Time { return t0 }})
	flood(r, a, "a2", 2, 32, t0)
	flood(r, b, "b2", 2, 32, t0)
	c := pgtest.Tenant(t, pool, "starter")
	flood(r, c, "c2", 1, 1, t0)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if es := refusalEntries(t, pool, c); len(es) != 1 {
		t.Errorf("tenant c's refusal entries beside a full queue = %d, want 1", len(es))
	}
}

// TestRecordFirstRefusalsAppliesAFlushOnce: a flush sent again after an
// error that left its fate unknown writes and counts nothing more.
func TestRecordFirstRefusalsAppliesAFlushOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	st := pgstore.NewAudit(pool)
	ctx := context.Background()
	b := audit.FirstRefusalFlush{ID: uuid.NewString(), Budget: 2,
		Overflow: []audit.RefusalOverflow{{TenantID: tenant, Minute: t0, At: t0.Add(time.Second), Count: 7}}}
	for i := range 3 {
		b.Refusals = append(b.Refusals, audit.FirstRefusal{TenantID: tenant, Key: fmt.Sprint("k", i), WindowEnd: t0.Add(time.Minute), At: t0, Detail: map[string]any{"i": i}})
	}
	for try := range 3 {
		n, err := st.RecordFirstRefusals(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{true: 2, false: 0}[try == 0]; n != want {
			t.Errorf("try %d wrote %d entries, want %d", try, n, want)
		}
	}
	if entries, past := refusalTotals(t, pool, tenant); entries != 2 || past != 8 {
		t.Errorf("refusal entries %d and flood refusals %d, want 2 and 8", entries, past)
	}
}

func TestPruneDeletesOldAuditEntries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		retention time.Duration
		want      string
	}{
		{name: "default, 90 days", want: "[1 89]"},
		{name: "30 days", retention: 30 * 24 * time.Hour, want: "[1]"},
		{name: "a year", retention: 365 * 24 * time.Hour, want: "[1 89 91]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			tenant := pgtest.Tenant(t, pool, "starter")
			ctx := context.Background()
			log := audit.NewLog(pgstore.NewAudit(pool))
			// Entries of every kind, each its age in days before t0.
			for _, days := range []int{400, 91, 89, 1} {
				err := log.Record(ctx, audit.Entry{At: t0.Add(-time.Duration(days) * 24 * time.Hour), TenantID: tenant, Actor: "admin:ada", Kind: fmt.Sprint("kind-", days), Detail: map[string]any{"days": days}})
				if err != nil {
					t.Fatal(err)
				}
			}
			r := newRecorder(t, pool, audit.RecorderConfig{Now: func() time.Time { return t0 }, AuditRetention: tt.retention})
			if err := r.Prune(ctx); err != nil {
				t.Fatal(err)
			}
			es, err := log.List(ctx, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range es {
				got = append(got, fmt.Sprint(e.Detail["days"]))
			}
			if fmt.Sprint(got) != tt.want {
				t.Errorf("entries left after Prune (age in days) = %v, want %s", got, tt.want)
			}
		})
	}
}
