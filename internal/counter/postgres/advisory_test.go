package postgres_test

// Advisory items seen from the database: the rows a refused one leaves.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// connect opens a connection of the test's own, closed when it ends.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestRefusedAdvisoryKeepsItsRow refuses an advisory item in a request that
// is kept whole, and another among kept ceilings: the row of each keeps its
// state and its expiry to the microsecond, although an item with a window
// of a second would have given it another expiry.
func TestRefusedAdvisoryKeepsItsRow(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second})
	conn := connect(t, dsn)
	month := counter.Item{Key: "shadow", Algorithm: limit.FixedWindow, Limit: 5, Window: limit.Month, Cost: 1}
	mustCheck(t, s, counter.Request{Items: []counter.Item{month}, Now: base})
	row := func() string {
		t.Helper()
		var st, cn, pv int64
		var tt float64
		var exp time.Time
		if err := conn.QueryRow(context.Background(), "SELECT start, count, prev, tat, expires_at FROM counters WHERE key LIKE '%/shadow'").Scan(&st, &cn, &pv, &tt, &exp); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(st, cn, pv, tt, exp.UTC().Format(time.RFC3339Nano))
	}
	before := row()

	// On the same key, a second's window and a cost above its limit: refused.
	refused := counter.Item{Key: "shadow", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Second), Cost: 2, Advisory: true}
	enforced, spent := fixed("enforced", 10, limit.Every(time.Hour)), fixed("spent", 1, limit.Every(time.Hour))
	mustCheck(t, s, counter.Request{Items: []counter.Item{spent}, Now: base})
	for _, req := range []counter.Request{
		// Kept whole.
		{Items: []counter.Item{enforced, refused}, Now: base},
		// The ceilings kept, the policy refused.
		{Ceilings: 2, Items: []counter.Item{enforced, refused, spent}, Now: base},
	} {
		res := mustCheck(t, s, req)
		if !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
			t.Fatalf("%+v: got %+v, want the enforced item allowed and the advisory one refused", req, res)
		}
		if after := row(); after != before {
			t.Fatalf("%+v: the refused advisory item's row went from %s to %s", req, before, after)
		}
	}
}
