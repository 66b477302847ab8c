package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestDirectCallsTakeTurnsByGroup stalls one group's direct calls (its
// resets wait on a row lock held outside the store) while eight of them
// are in flight at once; another group's reset, reservation and settlement
// are answered meanwhile, and the stalled group's calls hold one of the
// connections the store keeps for direct calls, not all of them. Before,
// those connections went first come, first served: the stalled group held
// them all, and the other group's calls failed as the store's (the fault
// suite's reservations-postgres phase saw it as a quiet tenant's reset
// answered 503 beside a noisy tenant's reservations queued on their
// group's lock).
func TestDirectCallsTakeTurnsByGroup(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	// Four connections: one for the Checks' lane, one for lease
	// operations, two for direct calls (and the batches' lane and a probe's,
	// apart).
	s := open(t, postgres.Config{DSN: dsn, MaxConns: 4, Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	hot := counter.Item{Key: "hot", Algorithm: limit.FixedWindow, Limit: 10, Window: limit.Every(time.Hour), Cost: 1}
	mustCheck(t, s, counter.Request{Group: "noisy", Items: []counter.Item{hot}})

	// The noisy group's counter row, locked for the flood's whole length.
	lock := connect(t, dsn)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if tag, err := tx.Exec(ctx, "SELECT 1 FROM counters FOR UPDATE"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("lock the noisy row: %v, %v", tag, err)
	}
	var flood sync.WaitGroup
	var ended atomic.Int64
	for range 8 {
		flood.Go(func() {
			_ = s.Reset(ctx, "noisy", "hot")
			ended.Add(1)
		})
	}
	// The flood's resets at the database, waiting for the row.
	atDatabase := func() int {
		var n int
		if err := lock.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%ResetKey%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually.True(t, 5*time.Second, "a stalled reset at the database", func() bool { return atDatabase() > 0 })
	// The other seven have had time to take a connection too, had they
	// been let.
	time.Sleep(200 * time.Millisecond)
	if n := atDatabase(); n != 1 {
		t.Errorf("%d of the stalled group's resets at the database at once, want 1", n)
	}

	start := time.Now()
	if err := s.Reset(ctx, "quiet", "k"); err != nil {
		t.Errorf("the quiet group's reset beside the stalled flood: %v", err)
	}
	budget := counter.Item{Key: "tokens", Algorithm: limit.FixedWindow, Limit: 100, Window: limit.Every(time.Hour), Cost: 10}
	res, err := s.Reserve(ctx, counter.Reservation{Request: counter.Request{Group: "quiet", Items: []counter.Item{budget}}, ID: "r1", TTL: time.Minute})
	if err != nil || !res.Allowed {
		t.Errorf("the quiet group's reservation beside the stalled flood: %+v, %v", res, err)
	} else if _, err := s.Settle(ctx, counter.SettleRef{Group: "quiet", ID: "r1", Used: 4}); err != nil {
		t.Errorf("the quiet group's settlement beside the stalled flood: %v", err)
	}
	t.Logf("the quiet group's three calls took %v beside the stalled flood", time.Since(start).Round(time.Millisecond))
	// They went beside the stalled calls, not after them: none of those has
	// ended (the statement timeout ends the first after a second).
	if n := ended.Load(); n != 0 {
		t.Errorf("the quiet group's calls were answered after %d of the stalled group's ended", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	flood.Wait()
	// The flood's calls go on once the row is free: the group's turns are
	// given back whatever became of its calls.
	if err := s.Reset(ctx, "noisy", "hot"); err != nil {
		t.Errorf("the noisy group's reset after its stall: %v", err)
	}
}
