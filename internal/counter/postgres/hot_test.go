package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestNewCountersAreWrittenInPlace makes counters on both paths that lock
// their rows before deciding (tollgate_check, for requests other than one
// consuming fixed-window item; tollgate_check_fixed_packed when a key has
// several requests in one statement), every algorithm among them, and
// requires every update of their rows to be HOT: the row a statement
// creates to lock a new key already holds the expiry its decision writes,
// so the decision's update touches no index and stays on its page. Before,
// such a row was made with the default expiry (now()) and every new
// counter cost a second entry in both of the table's indexes and a dead
// row on a full page: at 10^6 subjects (docs/benchmarks.md, How cost
// grows) 80 % of the fill's updates were not HOT and PostgreSQL's CPU a
// check was twice that at 10^5.
func TestNewCountersAreWrittenInPlace(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn})
	ctx := context.Background()
	now := time.Now()
	hour := limit.Every(time.Hour)
	var reqs []counter.Request
	const n = 20
	for i := range n {
		k := func(what string) string { return fmt.Sprintf("%s-%d", what, i) }
		reqs = append(reqs,
			// tollgate_check: two items, then each other algorithm alone.
			counter.Request{Group: "g", Now: now, Items: []counter.Item{
				{Key: k("pair-fixed"), Algorithm: limit.FixedWindow, Limit: 10, Window: hour, Cost: 1},
				{Key: k("pair-sliding"), Algorithm: limit.SlidingWindow, Limit: 10, Window: hour, Cost: 2},
			}},
			counter.Request{Group: "g", Now: now, Items: []counter.Item{{Key: k("bucket"), Algorithm: limit.TokenBucket, Limit: 7, Window: hour, Cost: 3}}},
		)
	}
	for _, r := range reqs {
		mustCheck(t, s, r)
	}
	// tollgate_check_fixed_packed with a key twice: every key of the
	// statement is locked first.
	var fixed []counter.Request
	for i := range n {
		fixed = append(fixed, counter.Request{Group: "g", Now: now, Items: []counter.Item{
			{Key: fmt.Sprintf("packed-%d", i), Algorithm: limit.FixedWindow, Limit: 10, Window: hour, Cost: 1},
		}})
	}
	fixed = append(fixed, fixed[0])
	_, errs := s.CheckBatch(ctx, fixed)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch check %d: %v", i, err)
		}
	}
	// A backend reports its table statistics when it ends.
	s.Close()
	conn := connect(t, dsn)
	want := int64(4 * n)
	var upd, hot int64
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := conn.QueryRow(ctx, "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'counters'").Scan(&upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		if upd >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if upd < want {
		t.Fatalf("%d updates of counters reported, want at least %d", upd, want)
	}
	if hot != upd {
		t.Errorf("%d of %d updates of counters were HOT, want all", hot, upd)
	}
}
