package usage_test

import (
	"context"
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

// putPolicies makes the tenant's policies, rows as the API writes them.
func putPolicies(t *testing.T, pool *pgxpool.Pool, tenantID string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := pool.Exec(context.Background(),
			`INSERT INTO policies (tenant_id, name, "limit", "window", algorithm, scope, fail_mode) VALUES ($1, $2, 10, '1h', 'fixed_window', 'subject', 'open')`,
			tenantID, n); err != nil {
			t.Fatal(err)
		}
	}
}

func newPolicyRecorder(t *testing.T, pool *pgxpool.Pool, now func() time.Time) *usage.PolicyRecorder {
	t.Helper()
	r, err := usage.NewPolicyRecorder(usage.PolicyConfig{Store: pgstore.NewUsage(pool), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hours reads a tenant's hours through the store, as the usage pages do.
func hours(t *testing.T, r *usage.PolicyRecorder, tenantID string, from, until time.Time) []usage.PolicyHour {
	t.Helper()
	got, err := r.PolicyHours(context.Background(), tenantID, from, until)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkEvent is a check of tenantID at, whose items named pols, refused by
// refusedBy (enforced policies).
func checkEvent(tenantID string, at time.Time, pols []string, refusedBy ...string) admission.Event {
	e := admission.Event{At: at, TenantID: tenantID, Live: true, Checked: true, Outcome: admission.OutcomeAllowed, Policies: pols}
	for _, p := range refusedBy {
		e.Outcome = admission.LayerPolicy
		e.Refusals = append(e.Refusals, admission.Refusal{Layer: admission.LayerPolicy, Policy: p})
	}
	return e
}

// TestPolicyRecorderCounts checks what counts per policy and hour: each
// policy a check named once (twice named, once counted), refusals by
// enforced policies; not a shadow policy's would-be refusal, a check a
// ceiling refused, another route, a name that is no policy (the row is
// dropped, never made). PolicyDays sums the hours per UTC day.
func TestPolicyRecorderCounts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	a, b := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "starter")
	putPolicies(t, pool, a, "search", "login")
	putPolicies(t, pool, b, "search")
	r := newPolicyRecorder(t, pool, nil)
	ctx := context.Background()
	h0 := base.Add(-12 * time.Hour) // 00:00 UTC
	for i := range 5 {
		r.Observe(ctx, checkEvent(a, h0.Add(time.Duration(i)*time.Minute), []string{"search"}))
	}
	for range 3 {
		r.Observe(ctx, checkEvent(a, h0.Add(30*time.Minute), []string{"login", "search", "login"}, "login"))
	}
	r.Observe(ctx, checkEvent(a, h0.Add(2*time.Hour+time.Second), []string{"login"}, "login"))
	// Not counted: a shadow refusal (the check is), a ceiling's refusal, a
	// route that is no check, a name that is not a policy of a.
	shadow := checkEvent(a, h0.Add(2*time.Hour), []string{"search"})
	shadow.Refusals = []admission.Refusal{{Layer: admission.LayerPolicy, Policy: "search", Shadow: true}}
	r.Observe(ctx, shadow)
	ceiling := checkEvent(a, h0, []string{"search"})
	ceiling.Outcome, ceiling.Refusals = admission.LayerQuota, []admission.Refusal{{Layer: admission.LayerQuota}}
	r.Observe(ctx, ceiling)
	other := checkEvent(a, h0, []string{"search"})
	other.Checked = false
	r.Observe(ctx, other)
	r.Observe(ctx, checkEvent(a, h0, []string{"ghost"}))
	r.Observe(ctx, checkEvent(b, h0.Add(25*time.Hour), []string{"search"}, "search"))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	want := []usage.PolicyHour{
		{TenantID: a, Policy: "login", At: h0, Checks: 3, Refusals: 3},
		{TenantID: a, Policy: "login", At: h0.Add(2 * time.Hour), Checks: 1, Refusals: 1},
		{TenantID: a, Policy: "search", At: h0, Checks: 8},
		{TenantID: a, Policy: "search", At: h0.Add(2 * time.Hour), Checks: 1},
	}
	if got := hours(t, r, a, h0, h0.Add(48*time.Hour)); !slices.Equal(got, want) {
		t.Errorf("tenant a's hours:\n got %+v\nwant %+v", got, want)
	}
	wantB := []usage.PolicyHour{{TenantID: b, Policy: "search", At: h0.Add(25 * time.Hour), Checks: 1, Refusals: 1}}
	if got := hours(t, r, b, h0, h0.Add(48*time.Hour)); !slices.Equal(got, wantB) {
		t.Errorf("tenant b's hours:\n got %+v\nwant %+v", got, wantB)
	}
	days, err := r.PolicyDays(ctx, a, h0.Add(-24*time.Hour), h0.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	wantDays := []usage.PolicyHour{
		{TenantID: a, Policy: "login", At: h0, Checks: 4, Refusals: 4},
		{TenantID: a, Policy: "search", At: h0, Checks: 9},
	}
	if !slices.Equal(days, wantDays) {
		t.Errorf("tenant a's days:\n got %+v\nwant %+v", days, wantDays)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM policy_hours`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 5 {
		t.Errorf("policy_hours holds %d rows, want 5 (none for a name that is not a policy)", rows)
	}

	// A policy deleted takes its hours along; counts of it still in
	// memory are dropped at the flush, which still succeeds.
	r.Observe(ctx, checkEvent(a, h0, []string{"login", "search"}))
	if _, err := pool.Exec(ctx, `DELETE FROM policies WHERE tenant_id = $1 AND name = 'login'`, a); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("a flush naming a deleted policy: %v", err)
	}
	want = []usage.PolicyHour{
		{TenantID: a, Policy: "search", At: h0, Checks: 9},
		{TenantID: a, Policy: "search", At: h0.Add(2 * time.Hour), Checks: 1},
	}
	if got := hours(t, r, a, h0, h0.Add(48*time.Hour)); !slices.Equal(got, want) {
		t.Errorf("tenant a's hours after login was deleted:\n got %+v\nwant %+v", got, want)
	}
}

// TestPolicyRecorderFlushLostAfterCommitCountsOnce: a flush whose answer
// was lost after its commit is sent again under its id and counts once.
func TestPolicyRecorderFlushLostAfterCommitCountsOnce(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := pgtest.NewBehindProxy(t)
	tenant := pgtest.Tenant(t, direct, "starter")
	putPolicies(t, direct, tenant, "search")
	r := newPolicyRecorder(t, pool, nil)
	ctx := context.Background()
	for range 10 {
		r.Observe(ctx, checkEvent(tenant, base, []string{"search"}, "search"))
	}
	if err := pgtest.FlushLosingTheAnswer(t, direct, proxy, func() error { return r.Flush(ctx) }); err == nil {
		t.Fatal("Flush with the answer lost: got nil error")
	}
	reader := newPolicyRecorder(t, direct, nil)
	want := []usage.PolicyHour{{TenantID: tenant, Policy: "search", At: base, Checks: 10, Refusals: 10}}
	if got := hours(t, reader, tenant, base, base.Add(time.Hour)); !slices.Equal(got, want) {
		t.Fatalf("after the lost answer: %+v, want %+v", got, want)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	r.Observe(ctx, checkEvent(tenant, base, []string{"search"}))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want = []usage.PolicyHour{{TenantID: tenant, Policy: "search", At: base, Checks: 11, Refusals: 10}}
	if got := hours(t, reader, tenant, base, base.Add(time.Hour)); !slices.Equal(got, want) {
		t.Errorf("after the flush was sent again: %+v, want %+v", got, want)
	}
	if n := r.Pending(); n != 0 {
		t.Errorf("Pending() = %d, want 0", n)
	}
}

// TestPolicyRecorderPrunes: Prune forgets the hours older than
// PolicyRetention and keeps the others.
func TestPolicyRecorderPrunes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	putPolicies(t, pool, tenant, "search")
	now := base
	r := newPolicyRecorder(t, pool, func() time.Time { return now })
	ctx := context.Background()
	old, kept := base.Add(-usage.PolicyRetention-time.Hour), base.Add(-usage.PolicyRetention+time.Hour)
	r.Observe(ctx, checkEvent(tenant, old, []string{"search"}))
	r.Observe(ctx, checkEvent(tenant, kept, []string{"search"}))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hours(t, r, tenant, old, base); len(got) != 2 {
		t.Fatalf("before pruning: %+v, want 2 hours", got)
	}
	if err := r.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	want := []usage.PolicyHour{{TenantID: tenant, Policy: "search", At: kept, Checks: 1}}
	if got := hours(t, r, tenant, old, base); !slices.Equal(got, want) {
		t.Errorf("after pruning: %+v, want %+v", got, want)
	}
}

// TestPolicyRecordersSumOneHour: two instances counting the same hours of
// the same policies, flushing as they go, sum exactly.
func TestPolicyRecordersSumOneHour(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	tenant := pgtest.Tenant(t, pool, "starter")
	putPolicies(t, pool, tenant, "search", "login")
	a, b := newPolicyRecorder(t, pool, nil), newPolicyRecorder(t, pool, nil)
	stopA, stopB := bg.Run(a.Run), bg.Run(b.Run)
	const goroutines, events = 8, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rec := a
			if g%2 == 1 {
				rec = b
			}
			for i := range events {
				at := base.Add(time.Duration(i%3) * time.Hour)
				if i%4 == 0 {
					rec.Observe(context.Background(), checkEvent(tenant, at, []string{"search", "login"}, "login"))
				} else {
					rec.Observe(context.Background(), checkEvent(tenant, at, []string{"search"}))
				}
				if i%500 == 0 {
					if err := rec.Flush(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	want := map[[2]any][2]int64{}
	for g := range goroutines {
		_ = g
		for i := range events {
			at := base.Add(time.Duration(i%3) * time.Hour)
			s := want[[2]any{"search", at}]
			s[0]++
			want[[2]any{"search", at}] = s
			if i%4 == 0 {
				l := want[[2]any{"login", at}]
				l[0]++
				l[1]++
				want[[2]any{"login", at}] = l
			}
		}
	}
	got := hours(t, a, tenant, base, base.Add(3*time.Hour))
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for _, h := range got {
		if w := want[[2]any{h.Policy, h.At}]; w != [2]int64{h.Checks, h.Refusals} {
			t.Errorf("%s at %s: checks %d, refusals %d, want %d, %d", h.Policy, h.At, h.Checks, h.Refusals, w[0], w[1])
		}
	}
}
