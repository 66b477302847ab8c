package audit_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/tollgate/tollgate/internal/testkit/bg"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/usage"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newRecorder(t *testing.T, pool *pgxpool.Pool, cfg audit.RecorderConfig) *audit.Recorder {
	t.Helper()
	cfg.Store = pgstore.NewAudit(pool)
	r, err := audit.NewRecorder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func refusalEntries(t *testing.T, pool *pgxpool.Pool, tenantID string) []audit.Entry {
	t.Helper()
	es, err := audit.NewLog(pgstore.NewAudit(pool)).List(context.Background(), audit.Filter{TenantID: tenantID, Kind: audit.KindRefusal, Limit: audit.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// refusalTotals returns a tenant's refusal entries and the refusals its
// flood entries count.
func refusalTotals(t *testing.T, pool *pgxpool.Pool, tenantID string) (entries, flood int64) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE kind = 'refusal'),
		coalesce(sum((detail->>'refusals')::bigint) FILTER (WHERE kind = 'refusal_flood'), 0)::bigint
		FROM audit WHERE tenant_id = $1`, tenantID).Scan(&entries, &flood)
	if err != nil {
		t.Fatal(err)
	}
	return entries, flood
}

var t0 = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

func TestFirstRefusalOncePerWindowAcrossInstances(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	// Two instances; each remembers few windows, so that both keep asking
	// the database, which must still write one entry per window.
	a := newRecorder(t, pool, audit.RecorderConfig{FlushEvery: 2 * time.Millisecond, MaxSeen: 1})
	b := newRecorder(t, pool, audit.RecorderConfig{FlushEvery: 3 * time.Millisecond, MaxSeen: 1})
	stopA, stopB := bg.Run(a.Run), bg.Run(b.Run)

	end := t0.Add(time.Minute)
	ref := admission.Refusal{Layer: admission.LayerPolicy, Policy: "sign-in", Limit: 10, Window: time.Minute, ResetAt: end, Key: "digest-1", Shadow: true}
	other := admission.Refusal{Layer: admission.LayerIP, Limit: 600, ResetAt: end, Key: "v1/check:t:iphash"}
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			rec := a
			if g%2 == 1 {
				rec = b
			}
			for i := range 100 {
				rec.Observe(context.Background(), admission.Event{At: t0.Add(time.Duration(i) * time.Millisecond), TenantID: tenant, Outcome: admission.LayerPolicy, Refusals: []admission.Refusal{ref}})
				// Another key between, so that a MaxSeen of 1 forgets.
				rec.Observe(context.Background(), admission.Event{At: t0, TenantID: tenant, Outcome: admission.LayerIP, Refusals: []admission.Refusal{other}})
			}
		})
	}
	// The database's rule on its own: many statements race on one window.
	st := pgstore.NewAudit(pool)
	var written sync.Map
	for g := range 20 {
		wg.Go(func() {
			n, err := st.RecordFirstRefusals(context.Background(), audit.FirstRefusalFlush{
				ID: uuid.NewString(), Budget: audit.DefaultAuditBudget,
				Refusals: []audit.FirstRefusal{{
					TenantID: tenant, Key: "digest-2", WindowEnd: end, At: t0, Detail: map[string]any{"key": "digest-2", "g": g},
				}},
			})
			if err != nil {
				t.Error(err)
			}
			written.Store(g, n)
		})
	}
	wg.Wait()
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	var total int64
	written.Range(func(_, v any) bool { total += v.(int64); return true })
	if total != 1 {
		t.Errorf("20 racing RecordFirstRefusals wrote %d entries, want 1", total)
	}

	es := refusalEntries(t, pool, tenant)
	byKey := map[string][]audit.Entry{}
	for _, e := range es {
		byKey[fmt.Sprint(e.Detail["key"])] = append(byKey[fmt.Sprint(e.Detail["key"])], e)
	}
	if len(es) != 3 || len(byKey["digest-1"]) != 1 || len(byKey["v1/check:t:iphash"]) != 1 || len(byKey["digest-2"]) != 1 {
		t.Fatalf("refusal entries = %+v, want one per key", es)
	}
	e := byKey["digest-1"][0]
	if e.Actor != audit.ActorTollgate || e.Kind != audit.KindRefusal || e.TenantID != tenant {
		t.Errorf("entry = %+v, want actor tollgate, kind refusal, tenant %s", e, tenant)
	}
	want := map[string]any{"layer": "policy", "scope": "", "policy": "sign-in", "limit": json.Number("10"), "key": "digest-1",
		"window_end": "2026-11-15T12:01:00Z", "degraded": false, "shadow": true}
	if fmt.Sprint(e.Detail) != fmt.Sprint(want) {
		t.Errorf("detail = %v, want %v", e.Detail, want)
	}

	// The next window of the same key gets its entry.
	for _, rec := range []*audit.Recorder{a, b} {
		next := ref
		next.ResetAt = end.Add(time.Minute)
		rec.Observe(context.Background(), admission.Event{At: end, TenantID: tenant, Refusals: []admission.Refusal{next}})
		if err := rec.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, e := range refusalEntries(t, pool, tenant) {
		if e.Detail["key"] == "digest-1" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("entries of digest-1 after a new window = %d, want 2", n)
	}
}

func TestAlertsAfterNRefusalsIn24Hours(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	a := newRecorder(t, pool, audit.RecorderConfig{})
	b := newRecorder(t, pool, audit.RecorderConfig{})
	ctx := context.Background()
	refuse := func(rec *audit.Recorder, at time.Time, key string) {
		ref := admission.Refusal{Layer: admission.LayerPolicy, Policy: "failed-sign-in", Limit: 8, Window: 15 * time.Minute,
			ResetAt: at.Truncate(15 * time.Minute).Add(15 * time.Minute), Key: key, AlertAfter: 5}
		rec.Observe(ctx, admission.Event{At: at, TenantID: tenant, Outcome: admission.LayerPolicy, Refusals: []admission.Refusal{ref}})
	}
	flush := func(recs ...*audit.Recorder) {
		t.Helper()
		for _, r := range recs {
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	alerts := func() []alert.Alert {
		t.Helper()
		as, err := a.Alerts(ctx, tenant, t0.Add(-48*time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		return as
	}

	// Three refusals 30 hours ago are out of the 24 hours that count.
	for i := range 3 {
		refuse(a, t0.Add(-30*time.Hour+time.Duration(i)*time.Minute), "subject-1")
	}
	flush(a)
	// Four within 24 hours, over two instances and two hours: no alert.
	refuse(a, t0.Add(-23*time.Hour), "subject-1")
	refuse(b, t0.Add(-90*time.Minute), "subject-1")
	refuse(b, t0.Add(-10*time.Minute), "subject-1")
	refuse(a, t0.Add(-time.Minute), "subject-1")
	// Another subject refused often is its own count.
	for i := range 4 {
		refuse(b, t0.Add(time.Duration(i)*time.Second), "subject-2")
	}
	flush(a, b)
	if as := alerts(); len(as) != 0 {
		t.Fatalf("alerts after 4 refusals = %+v, want none", as)
	}

	// The fifth raises the alert.
	refuse(b, t0, "subject-1")
	flush(b)
	as := alerts()
	want := alert.Alert{Policy: "failed-sign-in", Subjects: 1, SubjectKey: "subject-1", Count: 5, AlertAfter: 5, FirstAt: t0, LastAt: t0}
	if len(as) != 1 || as[0] != want {
		t.Fatalf("alerts after 5 refusals = %+v, want [%+v]", as, want)
	}

	// A sixth the same day updates it.
	refuse(a, t0.Add(30*time.Minute), "subject-1")
	flush(a)
	as = alerts()
	want.Count, want.LastAt = 6, t0.Add(30*time.Minute)
	if len(as) != 1 || as[0] != want {
		t.Fatalf("alerts after 6 refusals = %+v, want [%+v]", as, want)
	}

	// The usage report lists it.
	u, err := usage.NewRecorder(usage.Config{Store: pgstore.NewUsage(pool), Alerts: a})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := u.Usage(ctx, tenant, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Alerts) != 1 || rep.Alerts[0] != want {
		t.Errorf("usage report alerts = %+v, want [%+v]", rep.Alerts, want)
	}
	// Alerts are per tenant.
	if as, err := a.Alerts(ctx, pgtest.Tenant(t, pool, "starter"), t0.Add(-48*time.Hour), 0); err != nil || len(as) != 0 {
		t.Errorf("another tenant's alerts = %+v, %v; want none", as, err)
	}
}

func TestPruneDeletesExpiredRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	now := t0
	r := newRecorder(t, pool, audit.RecorderConfig{Now: func() time.Time { return now }})
	ctx := context.Background()
	for i, at := range []time.Time{t0.Add(-72 * time.Hour), t0.Add(-2 * time.Hour), t0} {
		ref := admission.Refusal{Layer: admission.LayerPolicy, Policy: "p", ResetAt: at.Add(time.Minute), Key: fmt.Sprint("k", i), AlertAfter: 100}
		r.Observe(ctx, admission.Event{At: at, TenantID: tenant, Refusals: []admission.Refusal{ref}})
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(table string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Windows ended over an hour ago go; hourly counts older than two days go.
	if got := count("refusal_windows"); got != 1 {
		t.Errorf("refusal_windows rows = %d, want 1", got)
	}
	if got := count("refusal_hours"); got != 2 {
		t.Errorf("refusal_hours rows = %d, want 2", got)
	}
	// The audit entries stay.
	if got := len(refusalEntries(t, pool, tenant)); got != 3 {
		t.Errorf("refusal entries = %d, want 3", got)
	}
}

func TestLogRecordAndList(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant, other := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")
	log := audit.NewLog(pgstore.NewAudit(pool))
	ctx := context.Background()
	record := func(e audit.Entry) {
		t.Helper()
		if err := log.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		record(audit.Entry{TenantID: tenant, Actor: "admin:ada", Kind: "plan_changed", Detail: map[string]any{"n": i, "to": "pro"}})
	}
	record(audit.Entry{TenantID: tenant, Actor: "admin:ada", Kind: "key_revoked", Detail: map[string]any{"key_id": "k_1"}})
	record(audit.Entry{TenantID: other, Actor: "stripe", Kind: "plan_changed"})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	record(audit.Entry{At: at, Actor: "operator", Kind: "plans_set"})

	list := func(f audit.Filter) []audit.Entry {
		t.Helper()
		es, err := log.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	if es := list(audit.Filter{}); len(es) != 8 {
		t.Errorf("all entries = %d, want 8", len(es))
	} else if es[0].Kind != "plans_set" || !es[0].At.Equal(at) || es[0].TenantID != "" || len(es[0].Detail) != 0 {
		t.Errorf("newest entry = %+v, want the service-wide plans_set at %v", es[0], at)
	}
	if es := list(audit.Filter{TenantID: tenant, Kind: "plan_changed"}); len(es) != 5 {
		t.Errorf("tenant's plan_changed entries = %d, want 5", len(es))
	}
	if es := list(audit.Filter{Kind: "plan_changed"}); len(es) != 6 {
		t.Errorf("plan_changed entries = %d, want 6", len(es))
	}
	// Paging: two at a time, newest first, no entry twice or missed.
	var ns []string
	var before int64
	for {
		page := list(audit.Filter{TenantID: tenant, Kind: "plan_changed", Limit: 2, Before: before})
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			ns = append(ns, fmt.Sprint(e.Detail["n"]))
		}
		before = page[len(page)-1].ID
	}
	if got := fmt.Sprint(ns); got != "[4 3 2 1 0]" {
		t.Errorf("paged entries = %s, want [4 3 2 1 0]", got)
	}
	if es := list(audit.Filter{TenantID: "not-a-uuid"}); len(es) != 0 {
		t.Errorf("entries of a non-UUID tenant = %d, want 0", len(es))
	}

	bad := []struct {
		name string
		e    audit.Entry
	}{
		{"no actor", audit.Entry{Kind: "x"}},
		{"no kind", audit.Entry{Actor: "x"}},
		{"unknown tenant", audit.Entry{TenantID: "00000000-0000-0000-0000-000000000000", Actor: "x", Kind: "x"}},
		{"tenant not a UUID", audit.Entry{TenantID: "t_1", Actor: "x", Kind: "x"}},
		{"detail not JSON", audit.Entry{Actor: "x", Kind: "x", Detail: map[string]any{"f": func() {}}}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := log.Record(ctx, tt.e); !errors.Is(err, audit.ErrInvalid) {
				t.Errorf("Record = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestRecorderDropsUnknownTenants(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	r := newRecorder(t, pool, audit.RecorderConfig{})
	ctx := context.Background()
	for _, id := range []string{tenant, "00000000-0000-0000-0000-000000000000", "nope"} {
		ref := admission.Refusal{Layer: admission.LayerPolicy, Policy: "p", ResetAt: t0.Add(time.Minute), Key: "k", AlertAfter: 1}
		r.Observe(ctx, admission.Event{At: t0, TenantID: id, Refusals: []admission.Refusal{ref}})
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := len(refusalEntries(t, pool, tenant)); got != 1 {
		t.Errorf("refusal entries = %d, want 1", got)
	}
	if as, err := r.Alerts(ctx, tenant, t0.Add(-time.Hour), 0); err != nil || len(as) != 1 {
		t.Errorf("alerts = %+v, %v; want one", as, err)
	}
}

func TestCountRefusalsAppliesAFlushOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	st := pgstore.NewAudit(pool)
	ctx := context.Background()
	cs := []audit.RefusalCount{{TenantID: tenant, Policy: "p", Key: "k", Hour: t0, Count: 3}}
	const id = "2b7f3a52-4e2c-4b8e-9d0a-5f1c2e3d4a5b"
	for range 3 {
		if _, err := st.CountRefusals(ctx, id, audit.DefaultWatchBudget, cs); err != nil {
			t.Fatal(err)
		}
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT refusals FROM refusal_hours").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("refusals = %d, want 3", n)
	}
}

func TestPruneDeletesOldAlerts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	ctx := context.Background()
	// One alert per age, in days before t0, as RaiseAlerts would have left it.
	for _, days := range []int{200, 91, 89, 0} {
		last := t0.Add(-time.Duration(days) * 24 * time.Hour)
		_, err := pool.Exec(ctx, `INSERT INTO alerts (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow)
			VALUES ($1, 'p', $2, $3::timestamptz::date, $3, $3, 5, 5, false)`, tenant, fmt.Sprint("k", days), last)
		if err != nil {
			t.Fatal(err)
		}
	}
	subjects := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT subject_key FROM alerts ORDER BY last_at")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			out = append(out, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		name      string
		retention time.Duration
		want      []string
	}{
		// Alerts whose latest refusal is over 90 days old go.
		{name: "default retention", want: []string{"k89", "k0"}},
		{name: "one day", retention: 24 * time.Hour, want: []string{"k0"}},
	}
	// The steps share one database and run in order: each prunes what the
	// previous left.
	for _, tt := range tests {
		r := newRecorder(t, pool, audit.RecorderConfig{Now: func() time.Time { return t0 }, AlertRetention: tt.retention})
		if err := r.Prune(ctx); err != nil {
			t.Fatalf("%s: Prune: %v", tt.name, err)
		}
		if got := subjects(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: alerts after Prune = %v, want %v", tt.name, got, tt.want)
		}
	}
}
