package countertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// runBatches holds CheckBatch to its contract: a batch is its requests
// checked one by one, in order within a group, each all or nothing; and
// batches racing through several instances admit exactly the limit.
func runBatches(t *testing.T, b Backend) {
	t.Run("BatchEqualsOneByOne", func(t *testing.T) { t.Parallel(); batchEqualsOneByOne(t, b) })
	t.Run("BatchMalformedRequestFailsAlone", func(t *testing.T) { t.Parallel(); batchMalformedAlone(t, b) })
	t.Run("BatchesRaceThreeInstances", func(t *testing.T) { t.Parallel(); batchesRace(t, b) })
}

func checkBatch(t fataler, s counter.Store, reqs []counter.Request) ([]counter.Result, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, errs := s.CheckBatch(ctx, reqs)
	if len(res) != len(reqs) || len(errs) != len(reqs) {
		t.Fatalf("%d requests: %d results, %d errors", len(reqs), len(res), len(errs))
	}
	return res, errs
}

// batchEqualsOneByOne sends random batches (two groups, a few counters
// each, ceilings, advisory items and peeks, one instant per batch) and
// holds every answer to the model's, which checks the requests one after
// the other in the batch's order.
func batchEqualsOneByOne(t *testing.T, b Backend) {
	s := open(t, b)
	rapid.Check(t, func(rt *rapid.T) {
		groups := []string{fmt.Sprintf("a%d", rand.Uint64()), fmt.Sprintf("b%d", rand.Uint64())}
		m := NewModel()
		type counterDef struct {
			key string
			alg limit.Algorithm
			lim int64
			win limit.Window
		}
		var defs []counterDef
		for i := range rapid.IntRange(1, 3).Draw(rt, "counters") {
			alg := limit.Algorithm(rapid.IntRange(1, 3).Draw(rt, "alg"))
			win := limit.Every(rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour}).Draw(rt, "window"))
			defs = append(defs, counterDef{key: fmt.Sprintf("k%d", i), alg: alg, lim: rapid.Int64Range(1, 8).Draw(rt, "limit"), win: win})
		}
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(24*time.Hour)).Draw(rt, "start"))).Truncate(time.Microsecond)
		for step := range rapid.IntRange(1, 6).Draw(rt, "batches") {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Millisecond, time.Second, time.Minute}).Draw(rt, "jump"))
			var reqs []counter.Request
			for range rapid.IntRange(1, 12).Draw(rt, "requests") {
				req := counter.Request{Group: rapid.SampledFrom(groups).Draw(rt, "group"), Now: now}
				if rapid.IntRange(0, 3).Draw(rt, "peek") == 0 {
					req.Mode = counter.Peek
				}
				for range rapid.IntRange(1, 3).Draw(rt, "items") {
					d := defs[rapid.IntRange(0, len(defs)-1).Draw(rt, "which")]
					req.Items = append(req.Items, counter.Item{Key: d.key, Algorithm: d.alg, Limit: d.lim, Window: d.win,
						Cost: rapid.Int64Range(1, 3).Draw(rt, "cost"), Advisory: rapid.IntRange(0, 3).Draw(rt, "advisory") == 0})
				}
				req.Ceilings = rapid.IntRange(0, len(req.Items)).Draw(rt, "ceilings")
				reqs = append(reqs, req)
			}
			got, errs := checkBatch(rt, s, reqs)
			for i, req := range reqs {
				if errs[i] != nil {
					rt.Fatalf("batch %d request %d: %v", step, i, errs[i])
				}
				sameResult(rt, step*100+i, req, got[i], m.Check(req, now))
			}
		}
	})
}

// batchMalformedAlone: a malformed request of a batch fails with
// ErrInvalid and the others are decided.
func batchMalformedAlone(t *testing.T, b Backend) {
	s := open(t, b)
	it := item("alone", limit.FixedWindow, 1, limit.Every(time.Hour))
	reqs := []counter.Request{
		{Items: []counter.Item{it}},
		{Items: []counter.Item{{Key: "", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Hour), Cost: 1}}},
		{Items: []counter.Item{it}},
	}
	res, errs := checkBatch(t, s, reqs)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], counter.ErrInvalid) {
		t.Fatalf("errors %v, want nil, ErrInvalid, nil", errs)
	}
	if !res[0].Allowed || res[2].Allowed {
		t.Errorf("limit 1, two requests around a malformed one: allowed %v and %v, want true and false", res[0].Allowed, res[2].Allowed)
	}
	_, errs = checkBatch(t, s, make([]counter.Request, counter.MaxBatch+1))
	for i, err := range errs {
		if !errors.Is(err, counter.ErrInvalid) {
			t.Fatalf("a batch of %d: request %d: %v, want ErrInvalid", counter.MaxBatch+1, i, err)
		}
	}
}

// batchesRace races batches of requests (a shared ceiling and a policy
// counter, some on keys of their own) from 24 goroutines through three
// instances: the policy admits exactly its limit, and the ceiling counts
// exactly one unit per request.
func batchesRace(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	for _, alg := range algorithms {
		ceiling := item("race-ceiling-"+alg.String(), limit.FixedWindow, 1_000_000, limit.Every(30*24*time.Hour))
		pol := item("race-policy-"+alg.String(), alg, 150, limit.Every(30*24*time.Hour))
		var allowed, sent atomic.Int64
		var wg sync.WaitGroup
		for g := range 24 {
			wg.Go(func() {
				for n := range 4 {
					reqs := make([]counter.Request, 5+(g+n)%20)
					for i := range reqs {
						reqs[i] = counter.Request{Items: []counter.Item{ceiling, pol}, Ceilings: 1}
						if i%5 == 0 {
							reqs[i].Items = append(reqs[i].Items, item(fmt.Sprintf("own-%d-%d-%d", g, n, i), alg, 3, limit.Every(time.Hour)))
						}
					}
					res, errs := checkBatch(t, stores[(g+n)%3], reqs)
					for i := range reqs {
						if errs[i] != nil {
							t.Errorf("request %d: %v", i, errs[i])
							return
						}
						if res[i].Allowed {
							allowed.Add(1)
						}
					}
					sent.Add(int64(len(reqs)))
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 150 {
			t.Errorf("%s: %d requests in batches over 3 instances at limit 150: %d allowed, want 150", alg, sent.Load(), got)
		}
		// The server's clock, as the batches had.
		peek := check(t, stores[0], counter.Request{Mode: counter.Peek, Items: []counter.Item{ceiling}})
		if got, want := 1_000_000-peek.Decisions[0].Remaining, sent.Load(); got != want {
			t.Errorf("%s: the ceiling counted %d of %d requests", alg, got, want)
		}
	}
}
