package pgtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/testkit/faultnet"
)

// NewBehindProxy returns a pool on a migrated database of the test's own that
// goes through a proxy the test can cut, the proxy, and a pool straight to
// the database for reading the tables and arranging faults.
func NewBehindProxy(t *testing.T) (viaProxy *pgxpool.Pool, proxy *faultnet.Proxy, direct *pgxpool.Pool) {
	t.Helper()
	dsn := New(t)
	proxied, proxy := Proxied(t, dsn)
	cfg, err := pgxpool.ParseConfig(proxied)
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
	return viaProxy, proxy, PoolAt(t, dsn)
}

// Proxied returns dsn with its host replaced by a proxy to it that the test
// can cut, and the proxy.
func Proxied(t testing.TB, dsn string) (string, *faultnet.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultnet.New(t, u.Host)
	u.Host = proxy.Addr()
	return u.String(), proxy
}

// WaitFor polls cond until it holds, failing the test after 5 seconds.
func WaitFor(t *testing.T, what string, cond func() bool) {
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

// FlushLosingTheAnswer runs flush, over a pool behind proxy, so that the
// transaction applying a flush (the one inserting into applied_batches,
// one statement or several) commits but its answer never comes back: a
// trigger deferred to the commit makes it wait on an advisory lock the test
// holds, the proxy is cut while it waits, then the lock is released and the
// transaction commits into a closed connection. It returns flush's error once that commit is done; the proxy
// stays cut.
func FlushLosingTheAnswer(t *testing.T, direct *pgxpool.Pool, proxy *faultnet.Proxy, flush func() error) error {
	t.Helper()
	ctx := context.Background()
	const lock = 7_000_001
	for _, sql := range []string{
		`CREATE FUNCTION test_wait_for_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_advisory_xact_lock(7000001); RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER test_wait_for_lock AFTER INSERT ON applied_batches
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_wait_for_lock()`,
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
	WaitFor(t, "the flush's statement to wait on the lock", func() bool {
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
