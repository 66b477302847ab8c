package usage_test

import (
	"context"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/faultnet"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/pgtest"
	"github.com/tollgate/tollgate/internal/usage"
)

// The Recorder's tests below run over the real PostgreSQL store; where the
// store must fail, the link to the database is cut for real.

var base = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// newFaultyDB returns a pool on a migrated database of the test's own that
// goes through a proxy the test can cut, the proxy, and a pool straight to
// the database for reading the tables and arranging faults.
func newFaultyDB(t *testing.T) (viaProxy *pgxpool.Pool, proxy *faultnet.Proxy, direct *pgxpool.Pool) {
	t.Helper()
	dsn := pgtest.New(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy = faultnet.New(t, u.Host)
	u.Host = proxy.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	// A connection the proxy cut is found dead when acquired, not by the
	// statement a test makes after Restore.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	viaProxy, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaProxy.Close)
	direct, err = pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	return viaProxy, proxy, direct
}

// waitFor polls cond until it holds, failing the test after 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// flushLosingTheAnswer runs flush, over a pool behind proxy, so that the
// statement applying a batch (the one inserting into applied_batches)
// commits but its answer never comes back: a trigger makes the statement
// wait on an advisory lock the test holds, the proxy is cut while it waits,
// then the lock is released and the statement commits into a closed
// connection. It returns flush's error once that commit is done; the proxy
// stays cut.
func flushLosingTheAnswer(t *testing.T, direct *pgxpool.Pool, proxy *faultnet.Proxy, flush func() error) error {
	t.Helper()
	ctx := context.Background()
	const lock = 7_000_001
	for _, sql := range []string{
		`CREATE FUNCTION test_wait_for_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_advisory_xact_lock(7000001); RETURN NULL; END $$`,
		`CREATE TRIGGER test_wait_for_lock AFTER INSERT ON applied_batches
		 FOR EACH ROW EXECUTE FUNCTION test_wait_for_lock()`,
	} {
		if _, err := direct.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if _, err := direct.Exec(ctx, "DROP TRIGGER test_wait_for_lock ON applied_batches; DROP FUNCTION test_wait_for_lock()"); err != nil {
			t.Error(err)
		}
	}()
	hold, err := direct.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_lock($1)", lock); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- flush() }()
	waitFor(t, "the batch's statement to wait on the lock", func() bool {
		var waiting bool
		err := direct.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND objid = $1 AND NOT granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, lock).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	proxy.Cut()
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock); err != nil {
		t.Fatal(err)
	}
	flushErr := <-done
	// The waiting statement was granted the lock on its release; taking it
	// again waits for that statement's transaction to commit.
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_lock($1), pg_advisory_unlock($1)", lock); err != nil {
		t.Fatal(err)
	}
	return flushErr
}

// checks is a count of live checks allowed in minute m (minutes after base).
func checks(tenant string, m int) rowKey {
	return rowKey{tenant, base.Add(time.Duration(m) * time.Minute), true, true, gate.OutcomeAllowed}
}

func TestRecorderFailedFlushKeepsCounts(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := newFaultyDB(t)
	tenant := newTenant(t, direct)
	r := newRecorder(t, pool, usage.Config{})
	ctx := context.Background()
	for i := range 10 {
		r.Observe(ctx, gate.Event{At: base.Add(time.Duration(i) * time.Second), TenantID: tenant, Live: true, Checked: true, Outcome: gate.OutcomeAllowed})
	}
	proxy.Cut()
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush with the database cut off: got nil error")
	}
	r.Observe(ctx, gate.Event{At: base, TenantID: tenant, Live: true, Checked: true, Outcome: gate.OutcomeAllowed})
	if got := r.Pending(); got != 2 {
		t.Errorf("Pending() after a failed flush = %d, want 2 (a row failed, a row new)", got)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[rowKey]int64{checks(tenant, 0): 11}
	if got := stored(t, direct); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() after a good flush = %d, want 0", got)
	}
}

func TestRecorderFlushLostAfterCommitCountsOnce(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := newFaultyDB(t)
	tenant := newTenant(t, direct)
	r := newRecorder(t, pool, usage.Config{})
	ctx := context.Background()
	for range 10 {
		r.Observe(ctx, gate.Event{At: base, TenantID: tenant, Live: true, Checked: true, Outcome: gate.OutcomeAllowed})
	}
	if err := flushLosingTheAnswer(t, direct, proxy, func() error { return r.Flush(ctx) }); err == nil {
		t.Fatal("Flush with the answer lost: got nil error")
	}
	// The batch is in the table all the same.
	if got, want := stored(t, direct), (map[rowKey]int64{checks(tenant, 0): 10}); !maps.Equal(got, want) {
		t.Fatalf("usage_minutes after the lost answer = %v, want %v", got, want)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	r.Observe(ctx, gate.Event{At: base, TenantID: tenant, Live: true, Checked: true, Outcome: gate.OutcomeAllowed})
	// The report, too, counts the batch once while it waits to be sent
	// again.
	rep, err := r.Usage(ctx, tenant, base)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ChecksUsed != 11 {
		t.Errorf("ChecksUsed before the batch is sent again = %d, want 11", rep.ChecksUsed)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(t, direct), (map[rowKey]int64{checks(tenant, 0): 11}); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestRecorderPendingStaysBounded(t *testing.T) {
	t.Parallel()
	pool, proxy, direct := newFaultyDB(t)
	tenants := []string{newTenant(t, direct), newTenant(t, direct), newTenant(t, direct)}
	const maxPending = 50
	r := newRecorder(t, pool, usage.Config{MaxPending: maxPending})
	ctx := context.Background()
	proxy.Cut()
	// 200 minutes of 3 tenants: 600 rows against a cap of 50, with a
	// failing flush every 20 minutes.
	for m := range 200 {
		for _, tenant := range tenants {
			r.Observe(ctx, gate.Event{At: base.Add(time.Duration(m) * time.Minute), TenantID: tenant, Checked: true, Outcome: gate.OutcomeAllowed})
		}
		// New rows, and a failed batch of as many at most.
		if got := r.Pending(); got > 2*maxPending {
			t.Fatalf("Pending() = %d after minute %d, want at most %d", got, m, 2*maxPending)
		}
		if m%20 == 19 {
			if err := r.Flush(ctx); err == nil {
				t.Fatalf("Flush after minute %d with the database cut off: got nil error", m)
			}
		}
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := stored(t, direct)
	// What was kept is the first failed batch and the newest minutes.
	for m := 200 - maxPending/3 + 1; m < 200; m++ {
		for _, tenant := range tenants {
			k := rowKey{tenant, base.Add(time.Duration(m) * time.Minute), false, true, gate.OutcomeAllowed}
			if got[k] != 1 {
				t.Errorf("row %+v = %d, want it kept, 1", k, got[k])
			}
		}
	}
	var total int64
	for _, n := range got {
		total += n
	}
	if total > 2*maxPending {
		t.Errorf("flushed %d events, want at most %d", total, 2*maxPending)
	}
}

func TestRecorderAtTheCapTheOldestMinuteGoes(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	a, b, c, d, e := newTenant(t, pool), newTenant(t, pool), newTenant(t, pool), newTenant(t, pool), newTenant(t, pool)
	r := newRecorder(t, pool, usage.Config{MaxPending: 3})
	ctx := context.Background()
	observe := func(tenant string, minute int) {
		r.Observe(ctx, gate.Event{At: base.Add(time.Duration(minute) * time.Minute), TenantID: tenant, Checked: true, Outcome: gate.OutcomeAllowed})
	}
	observe(a, 10)
	observe(b, 10)
	observe(c, 10)
	// Older than all held: dropped itself.
	observe(d, 5)
	// A new row of a held minute at the cap: there is no older minute to drop.
	observe(d, 10)
	if got := r.Pending(); got != 3 {
		t.Fatalf("Pending() = %d, want 3", got)
	}
	// Newer: the oldest minute goes.
	observe(e, 20)
	observe(a, 20)
	if got := r.Pending(); got != 2 {
		t.Fatalf("Pending() = %d, want 2", got)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[rowKey]int64{
		{e, base.Add(20 * time.Minute), false, true, gate.OutcomeAllowed}: 1,
		{a, base.Add(20 * time.Minute), false, true, gate.OutcomeAllowed}: 1,
	}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestRecorderObserveIgnoresEventsWithoutTenant(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	r := newRecorder(t, pool, usage.Config{})
	r.Observe(context.Background(), gate.Event{At: base, Outcome: gate.LayerInstance})
	if got := r.Pending(); got != 0 {
		t.Errorf("Pending() = %d, want 0", got)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, pool); len(got) != 0 {
		t.Errorf("usage_minutes = %v, want no rows", got)
	}
}

func TestRecorderObserveEmptyOutcomeAndZeroTime(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	tenant := newTenant(t, pool)
	r := newRecorder(t, pool, usage.Config{Now: func() time.Time { return base.Add(90 * time.Second) }})
	r.Observe(context.Background(), gate.Event{TenantID: tenant, Live: true, Checked: true})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[rowKey]int64{checks(tenant, 1): 1}
	if got := stored(t, pool); !maps.Equal(got, want) {
		t.Errorf("usage_minutes = %v, want %v", got, want)
	}
}

func TestNewRecorderNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := usage.NewRecorder(usage.Config{}); err == nil {
		t.Error("NewRecorder without a store: got nil error")
	}
}
