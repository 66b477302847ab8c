package postgres_test

// The set-based path, tollgate_check_fixed_packed, against the model and against
// the item-by-item path racing it on the same rows. These tests run alone,
// before the package's parallel ones: the race loads the 2-core box enough
// to push the conformance suite's lease cases, whose deadline is a second,
// past it.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestFixedStatementsMatchSequentialModel sends random sets of one-item
// consuming fixed-window requests as one call each: keys named once or by
// several requests of the set (with one cost for the set's requests on a
// key), costs up to one above the limit, second, minute, hour and month
// windows, a clock that jumps ahead and steps back, keys new and old,
// advisory items and ceilings. Every call must take the set-based path and
// answer, to the microsecond of each reset and retry, what the model
// answers, and each row an admitted item wrote must expire when its window
// ends (limit.Expiry), no sooner: the pruner deletes by it.
func TestFixedStatementsMatchSequentialModel(t *testing.T) {
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second})
	conn := connect(t, dsn)
	windows := []limit.Window{limit.Every(time.Second), limit.Every(time.Minute), limit.Every(time.Hour), limit.Month}
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		var defs []counter.Item
		for i := range rapid.IntRange(1, 12).Draw(rt, "counters") {
			defs = append(defs, counter.Item{
				Key:       fmt.Sprintf("k%d", i),
				Algorithm: limit.FixedWindow,
				Limit:     rapid.Int64Range(1, 6).Draw(rt, "limit"),
				Window:    rapid.SampledFrom(windows).Draw(rt, "window"),
			})
		}
		m := countertest.NewModel()
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(60*24*time.Hour)).Draw(rt, "start"))).Truncate(time.Microsecond)
		rounds := rapid.IntRange(1, 10).Draw(rt, "rounds")
		before := postgres.FixedStatements(s)
		for round := range rounds {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Microsecond, 300 * time.Millisecond, time.Second, time.Minute, 24 * time.Hour, -time.Millisecond, -time.Second}).Draw(rt, "jump"))
			costs := make([]int64, len(defs))
			for i, d := range defs {
				costs[i] = rapid.Int64Range(1, d.Limit+1).Draw(rt, "cost")
			}
			var reqs []counter.Request
			for range rapid.IntRange(1, 16).Draw(rt, "requests") {
				i := rapid.IntRange(0, len(defs)-1).Draw(rt, "key")
				it := defs[i]
				it.Cost = costs[i]
				it.Advisory = rapid.IntRange(0, 3).Draw(rt, "advisory") == 0
				reqs = append(reqs, counter.Request{Group: group, Items: []counter.Item{it}, Ceilings: rapid.IntRange(0, 1).Draw(rt, "ceilings")})
			}
			got, err := postgres.CheckCoalesced(s, reqs, now)
			if err != nil {
				rt.Fatalf("round %d: %v", round, err)
			}
			for i, req := range reqs {
				what := fmt.Sprintf("round %d request %d", round, i)
				sameResult(rt, what, req, got[i], m.Check(req, now))
				if !got[i].Decisions[0].Allowed {
					continue
				}
				it := req.Items[0]
				var start int64
				var exp time.Time
				row := fmt.Sprintf("%d:%s/%s", len(group), group, it.Key)
				if err := conn.QueryRow(context.Background(), "SELECT start, expires_at FROM counters WHERE key = $1", row).Scan(&start, &exp); err != nil {
					rt.Fatalf("%s: row %s: %v", what, row, err)
				}
				if want := limit.Expiry(limit.FixedWindow, limit.State{Start: start}, it.Window); exp.UnixMicro() != want {
					rt.Fatalf("%s: row %s of window %+v starting %d expires at %d, want %d", what, row, it.Window, start, exp.UnixMicro(), want)
				}
			}
		}
		if fast := postgres.FixedStatements(s) - before; fast != int64(rounds) {
			rt.Fatalf("%d of %d statements took the set-based path", fast, rounds)
		}
	})
}

// TestFixedAndItemwiseStatementsRaceExactly races three stores on one
// database: on each, two goroutines a key send one-item checks (the set-based
// path, with a key named once or twice in a statement) and others send
// two-item checks over neighbouring keys (the item-by-item path), all on the
// same rows at once. Each key must end with exactly its limit admitted,
// counted from the answers, and no statement may deadlock or fail.
func TestFixedAndItemwiseStatementsRaceExactly(t *testing.T) {
	dsn := pgtest.New(t)
	var stores []*postgres.Store
	for range 3 {
		stores = append(stores, open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second}))
	}
	const keys, lim, singles, pairs = 12, 60, 20, 10
	group := fmt.Sprintf("race-%d", rand.Uint64())
	item := func(k int) counter.Item {
		return counter.Item{Key: fmt.Sprintf("k%02d", k%keys), Algorithm: limit.FixedWindow, Limit: lim, Window: limit.Every(time.Hour), Cost: 1}
	}
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, s := range stores {
		for k := range 2 * keys {
			k := k % keys
			wg.Go(func() {
				<-start
				req := counter.Request{Group: group, Items: []counter.Item{item(k)}}
				for range singles {
					res, err := s.Check(context.Background(), req)
					if err != nil {
						t.Errorf("key %d: %v", k, err)
						return
					}
					if res.Allowed {
						admitted[k].Add(1)
					}
				}
			})
			wg.Go(func() {
				<-start
				req := counter.Request{Group: group, Items: []counter.Item{item(k), item(k + 1)}}
				for range pairs {
					res, err := s.Check(context.Background(), req)
					if err != nil {
						t.Errorf("keys %d and %d: %v", k, k+1, err)
						return
					}
					if res.Allowed {
						admitted[k].Add(1)
						admitted[(k+1)%keys].Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for k := range keys {
		if got := admitted[k].Load(); got != lim {
			t.Errorf("key %d: %d admitted at limit %d (%d attempts)", k, got, lim, len(stores)*2*(singles+2*pairs))
		}
	}
	var fast, all int64
	for _, s := range stores {
		fast, all = fast+postgres.FixedStatements(s), all+postgres.Statements(s)
	}
	if fast == 0 || fast == all {
		t.Errorf("%d of %d statements set-based: the race did not mix the two paths", fast, all)
	}
	t.Logf("%d of %d statements set-based", fast, all)
}

// TestSplitStatementsMatchSequentialModel sends random sets of requests as
// one call each, most of them one-item consuming fixed-window checks and
// the rest anything (several items, ceilings, advisory items, peeks,
// sliding windows and token buckets), on keys that the two kinds share or
// not: a call with enough of the first on keys the others do not name goes
// as two statements (the first set-based), and every request must be
// decided as if the requests had come one after the other. The run must
// have split some calls and left others whole.
func TestSplitStatementsMatchSequentialModel(t *testing.T) {
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second})
	windows := []limit.Window{limit.Every(time.Second), limit.Every(time.Minute), limit.Every(time.Hour), limit.Month}
	splitBefore, allBefore := postgres.SplitStatements(s), postgres.Statements(s)
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		// Fixed-window counters the one-item checks name, and counters of
		// any algorithm the others name, among them some of the first.
		var fixed []counter.Item
		for i := range rapid.IntRange(8, 24).Draw(rt, "fixed") {
			fixed = append(fixed, counter.Item{Key: fmt.Sprintf("f%d", i), Algorithm: limit.FixedWindow,
				Limit: rapid.Int64Range(1, 6).Draw(rt, "limit"), Window: rapid.SampledFrom(windows).Draw(rt, "window")})
		}
		any := append(anyCounters(rt, "a", 1, 4), fixed[:rapid.IntRange(0, 2).Draw(rt, "shared")]...)
		m := countertest.NewModel()
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(30*24*time.Hour)).Draw(rt, "start"))).Truncate(time.Microsecond)
		for round := range rapid.IntRange(1, 6).Draw(rt, "rounds") {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Microsecond, 300 * time.Millisecond, time.Second, time.Minute, -time.Millisecond}).Draw(rt, "jump"))
			// One cost a key in the round, as a tenant's policy has.
			costs := make([]int64, len(fixed))
			for i, d := range fixed {
				costs[i] = rapid.Int64Range(1, d.Limit+1).Draw(rt, "cost")
			}
			var reqs []counter.Request
			for range rapid.IntRange(1, 40).Draw(rt, "requests") {
				req := counter.Request{Group: group}
				if rapid.IntRange(0, 4).Draw(rt, "kind") > 0 {
					i := rapid.IntRange(0, len(fixed)-1).Draw(rt, "key")
					it := fixed[i]
					it.Cost = costs[i]
					it.Advisory = rapid.IntRange(0, 5).Draw(rt, "advisory") == 0
					req.Items = []counter.Item{it}
					req.Ceilings = rapid.IntRange(0, 1).Draw(rt, "ceilings")
				} else {
					req = anyRequest(rt, group, any)
				}
				reqs = append(reqs, req)
			}
			statementMatchesModel(rt, s, m, round, reqs, now)
		}
	})
	split, all := postgres.SplitStatements(s)-splitBefore, postgres.Statements(s)-allBefore
	if split == 0 || split == all {
		t.Errorf("%d of %d statements split: the run did not try both", split, all)
	}
	t.Logf("%d of %d statements split", split, all)
}
