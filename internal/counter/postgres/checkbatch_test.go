package postgres_test

// CheckBatch beside other tenants' Checks: what one tenant's batches may
// take of the store (issue 36, item 9).

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// TestBatchesLeaveChecksTheirConnections holds a row of tenant a locked
// from another session while a's batches on it, more of them at once than
// the store's pool has connections, wait for it: tenant b's Checks, sent
// meanwhile, are answered, not ErrUnavailable, at the store's default
// deadline. The batches hold their lane's connection, never the Checks'.
func TestBatchesLeaveChecksTheirConnections(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, MaxConns: 3})
	hour := limit.Every(time.Hour)
	locked := counter.Request{Group: "a", Items: []counter.Item{fixed("locked", limit.MaxLimit, hour)}}
	// The row to lock, made by a patient store: a first check on a server
	// busy with parallel tests may take longer than the default deadline.
	mustCheck(t, open(t, postgres.Config{DSN: dsn, Timeout: 5 * time.Second}), locked)

	ctx := context.Background()
	conn := connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// appendRowKey's key of group a's counter "locked".
	if _, err := tx.Exec(ctx, "SELECT 1 FROM counters WHERE key = '1:a/locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	// The pool holds 3 connections for the lanes and the rest, and one for
	// probes: twice as many batches.
	const batches = 8
	var wg sync.WaitGroup
	for range batches {
		wg.Go(func() {
			_, errs := s.CheckBatch(ctx, []counter.Request{locked, locked})
			for _, err := range errs {
				// The row stays locked past the statement's bound: a's
				// answers may rightly be ErrUnavailable.
				if err != nil && !errors.Is(err, counter.ErrUnavailable) {
					t.Errorf("a's batch: %v", err)
				}
			}
		})
	}
	waiting := func() (n int) {
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually.True(t, 5*time.Second, "a batch waiting for the locked row", func() bool { return waiting() > 0 })

	for i := range 20 {
		req := counter.Request{Group: "b", Items: []counter.Item{fixed(fmt.Sprintf("b-%d", i), 2, hour)}}
		if _, err := s.Check(ctx, req); err != nil {
			t.Errorf("b's check %d beside a's waiting batches: %v", i, err)
		}
	}
	if n := waiting(); n > 1 {
		t.Errorf("%d statements wait for a's row, want at most the batch lane's one", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestBatchWaitsItsTurnWhileTheStoreAnswers holds a row of tenant a locked
// for longer than a call sent at once may wait (ten deadlines), while four
// batches of a, a statement each, queue for it. The statements sent
// meanwhile run into statement_timeout (five deadlines), and their checks
// are rightly ErrUnavailable; but a batch queued behind them waits its
// turn, however long, while the server answers (its probes), and is
// answered once the lock is gone.
func TestBatchWaitsItsTurnWhileTheStoreAnswers(t *testing.T) {
	t.Parallel()
	const deadline = 250 * time.Millisecond
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, Timeout: deadline})
	locked := counter.Request{Group: "a", Items: []counter.Item{fixed("locked", limit.MaxLimit, limit.Every(time.Hour))}}
	mustCheck(t, s, locked)

	ctx := context.Background()
	conn := connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM counters WHERE key = '1:a/locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	// A batch of DefaultMaxItems one-item checks is one statement, which no
	// other batch joins.
	batch := slices.Repeat([]counter.Request{locked}, postgres.DefaultMaxItems)
	var answered atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, errs := s.CheckBatch(ctx, batch)
			for _, err := range errs {
				if err != nil {
					if !errors.Is(err, counter.ErrUnavailable) {
						t.Errorf("a's batch: %v", err)
					}
					return
				}
			}
			answered.Add(1)
		})
	}
	// The lock outlasts the bound of a call sent at once by three
	// deadlines: the third statement is sent after two ran into
	// statement_timeout, and waits for the lock.
	time.Sleep(13 * deadline)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if answered.Load() == 0 {
		t.Errorf("no batch answered after a's row was unlocked: the batches queued behind the locked ones gave up on a store that answered")
	}
}

// TestBatchFloodIsAnsweredExactly: one tenant's flood of 1,000-check
// batches from 32 goroutines through a store of the smallest pool, at the
// default deadline, on a server that answers: every check is answered (no
// statement runs into statement_timeout, no caller gives up on a store
// that keeps answering), and exactly: the policy admits its limit, and
// the ceiling counts every check.
func TestBatchFloodIsAnsweredExactly(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{DSN: pgtest.New(t), MaxConns: 3, Timeout: 250 * time.Millisecond})
	month := limit.Every(30 * 24 * time.Hour)
	ceiling := fixed("flood-ceiling", limit.MaxLimit, month)
	pol := fixed("flood-policy", 5000, month)

	const goroutines, each, size = 32, 2, counter.MaxBatch
	var allowed, unavailable atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			reqs := make([]counter.Request, size)
			for i := range reqs {
				reqs[i] = counter.Request{Group: "a", Items: []counter.Item{ceiling, pol}, Ceilings: 1}
			}
			for range each {
				res, errs := s.CheckBatch(context.Background(), reqs)
				for i, err := range errs {
					switch {
					case errors.Is(err, counter.ErrUnavailable):
						if unavailable.Add(1) == 1 {
							t.Logf("first unavailable: %v", err)
						}
					case err != nil:
						t.Errorf("request %d: %v", i, err)
						return
					case res[i].Allowed:
						allowed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	sent := int64(goroutines * each * size)
	if n := unavailable.Load(); n > 0 {
		t.Fatalf("%d of %d checks unavailable on a server that answers", n, sent)
	}
	if got := allowed.Load(); got != 5000 {
		t.Errorf("%d checks at limit 5000: %d allowed", sent, got)
	}
	peek := mustCheck(t, s, counter.Request{Group: "a", Mode: counter.Peek, Items: []counter.Item{ceiling}})
	if got := limit.MaxLimit - peek.Decisions[0].Remaining; got != sent {
		t.Errorf("the ceiling counted %d of %d checks", got, sent)
	}
}
