package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/counter"
	tgredis "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// batchTarget is a store and a plain client on its server (one server or a
// cluster), and the store's key prefix.
type batchTarget struct {
	name   string
	store  *tgredis.Store
	raw    goredis.UniversalClient
	prefix string
}

// batchTargets opens a store on one server and one on the package's shared
// cluster, each on a fresh prefix, whose logs fail the test on any error
// record.
func batchTargets(t *testing.T) []batchTarget {
	t.Helper()
	u, prefix := redistest.New(t)
	single := open(t, tgredis.Config{URL: u, Prefix: prefix, Timeout: sharedTimeout, Logger: testLogger(t)})
	t.Cleanup(func() { single.Close() })
	cu, cprefix := redistest.NewCluster(t)
	cluster := open(t, tgredis.Config{URL: cu, Prefix: cprefix, Timeout: sharedTimeout, Logger: testLogger(t)})
	t.Cleanup(func() { cluster.Close() })
	return []batchTarget{
		{"one server", single, rawClient(t, u), prefix},
		{"cluster", cluster, clusterClient(t, cu), cprefix},
	}
}

// sameAsModel fails the test when got is not want, field for field.
func sameAsModel(t *testing.T, what string, req counter.Request, got, want counter.Result) {
	t.Helper()
	if got.Allowed != want.Allowed || !got.Now.Equal(want.Now) {
		t.Fatalf("%s %+v: allowed %v at %s, want %v at %s", what, req, got.Allowed, got.Now, want.Allowed, want.Now)
	}
	for i := range want.Decisions {
		if got.Decisions[i] != want.Decisions[i] {
			t.Fatalf("%s item %d %+v at %s:\n got  %+v\n want %+v", what, i, req.Items[i],
				req.Now.Format(time.RFC3339Nano), got.Decisions[i], want.Decisions[i])
		}
	}
}

// TestBatchMatchesModelInOrder sends seeded random batches of requests, as
// a drain takes them from the queue, through the store, and the same
// requests one after the other through the model: every answer must be the
// model's, so each request of a script sees exactly what the requests
// before it kept. The requests of a batch belong to two tenants, share a
// hot key and a few others, mix peeks and consumes, ceilings and advisory
// items, and mostly share an instant (some step forward or back). One
// server decides a whole batch in one script; a cluster one per tenant.
func TestBatchMatchesModelInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hour := limit.Every(time.Hour)
	for _, target := range batchTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			for seed := range 30 {
				r := rand.New(rand.NewPCG(uint64(seed), 41))
				// Per key, one counter: the hot one at a low limit, so that
				// requests of one batch run it out.
				keys := []counter.Item{
					{Key: "hot", Algorithm: limit.FixedWindow, Limit: 8, Window: hour},
					{Key: "sliding", Algorithm: limit.SlidingWindow, Limit: 12, Window: limit.Every(time.Minute)},
					{Key: "bucket", Algorithm: limit.TokenBucket, Limit: 5, Window: limit.Every(10 * time.Second)},
					{Key: "month", Algorithm: limit.FixedWindow, Limit: 30, Window: limit.Month},
				}
				groups := []string{fmt.Sprint("a", seed), fmt.Sprint("b", seed)}
				m := countertest.NewModel()
				now := time.Date(2026, 11, 30, 23, 59, 58, 0, time.UTC)
				for step := range 12 {
					now = now.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
					reqs := make([]counter.Request, 1+r.IntN(24))
					for i := range reqs {
						req := counter.Request{Group: groups[r.IntN(len(groups))], Now: now}
						switch r.IntN(8) {
						case 0:
							req.Now = now.Add(time.Duration(r.IntN(3000)) * time.Microsecond)
						case 1:
							req.Now = now.Add(-time.Duration(r.IntN(3000)) * time.Microsecond)
						}
						if r.IntN(5) == 0 {
							req.Mode = counter.Peek
						}
						for range 1 + r.IntN(4) {
							it := keys[r.IntN(len(keys))]
							if r.IntN(2) == 0 {
								it = keys[0]
							}
							it.Cost = 1
							if r.IntN(4) == 0 {
								it.Cost = 1 + r.Int64N(it.Limit)
							}
							it.Advisory = r.IntN(4) == 0
							req.Items = append(req.Items, it)
						}
						req.Ceilings = r.IntN(len(req.Items) + 1)
						reqs[i] = req
					}
					got, errs, scripts := target.store.CheckBatchScripts(ctx, reqs)
					tenants := map[string]bool{}
					for i, req := range reqs {
						if errs[i] != nil {
							t.Fatalf("seed %d step %d request %d: %v", seed, step, i, errs[i])
						}
						sameAsModel(t, fmt.Sprintf("seed %d step %d request %d of %d", seed, step, i, len(reqs)), req, got[i], m.Check(req, req.Now))
						tenants[req.Group] = true
					}
					want := 1
					if target.name == "cluster" {
						want = len(tenants)
					}
					if scripts != want {
						t.Fatalf("seed %d step %d: %d requests of %d tenants in %d scripts, want %d", seed, step, len(reqs), len(tenants), scripts, want)
					}
				}
			}
		})
	}
}

// TestBatchHotKeyInArrivalOrder decides 64 checks of one tenant on one hot
// counter at limit 10 in one script: the first 10 in the batch are
// admitted, every later one refused, and the counter holds 10. Each check
// has a key of its own too, written only when the check is admitted.
func TestBatchHotKeyInArrivalOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, target := range batchTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			hot := counter.Item{Key: "hot", Algorithm: limit.FixedWindow, Limit: 10, Window: limit.Every(time.Hour), Cost: 1}
			reqs := make([]counter.Request, 64)
			for i := range reqs {
				own := counter.Item{Key: fmt.Sprint("own", i), Algorithm: limit.TokenBucket, Limit: 3, Window: limit.Every(time.Hour), Cost: 1}
				reqs[i] = counter.Request{Group: "t", Items: []counter.Item{own, hot}}
			}
			got, errs, scripts := target.store.CheckBatchScripts(ctx, reqs)
			if scripts != 1 {
				t.Fatalf("64 checks of one tenant in %d scripts, want 1", scripts)
			}
			for i := range reqs {
				if errs[i] != nil {
					t.Fatalf("check %d: %v", i, errs[i])
				}
				if want := i < 10; got[i].Allowed != want {
					t.Fatalf("check %d of the batch: allowed %v, want %v", i, got[i].Allowed, want)
				}
				if want := int64(max(9-i, 0)); got[i].Decisions[1].Remaining != want {
					t.Fatalf("check %d of the batch: remaining %d, want %d", i, got[i].Decisions[1].Remaining, want)
				}
				n, err := target.raw.Exists(ctx, fmt.Sprintf("%s{t}:own%d", target.prefix, i)).Result()
				if err != nil || (n == 1) != (i < 10) {
					t.Fatalf("check %d's own key: exists %d, %v; want it written when admitted", i, n, err)
				}
			}
			if got := storedCountOf(t, target.raw, target.prefix+"{t}:hot"); got != 10 {
				t.Fatalf("hot counter holds %d, want 10", got)
			}
		})
	}
}

// storedCountOf reads the count of the counter state at key.
func storedCountOf(t *testing.T, raw goredis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := raw.Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return int64(unpackFloat(v, 1))
}

// TestBatchConcurrentExact runs 400 goroutines of five checks each on one
// tenant's hot counter at limit 1,000 with the server's clock, one in five
// of them a peek: the queued checks are decided many to a script, and
// exactly 1,000 consumes are admitted and counted.
func TestBatchConcurrentExact(t *testing.T) {
	t.Parallel()
	for _, target := range batchTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			hot := counter.Item{Key: "hot", Algorithm: limit.FixedWindow, Limit: 1000, Window: limit.Every(30 * 24 * time.Hour), Cost: 1}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 400 {
				wg.Go(func() {
					for i := range 5 {
						req := counter.Request{Group: "t", Items: []counter.Item{hot}}
						if (g+i)%5 == 0 {
							req.Mode = counter.Peek
						}
						res, err := target.store.Check(context.Background(), req)
						if err != nil {
							t.Errorf("check: %v", err)
							return
						}
						if res.Allowed && req.Mode == counter.Consume {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != 1000 {
				t.Errorf("1,600 consumes at limit 1,000: %d admitted, want 1,000", got)
			}
			if got := storedCountOf(t, target.raw, target.prefix+"{t}:hot"); got != 1000 {
				t.Errorf("stored count %d, want 1,000", got)
			}
		})
	}
}

// TestBatchSplitsLargeBatches sends one tenant's 20 checks of 64 items each
// (1,280 items) in one batch: they go in three scripts of at most 512
// items, still decided in order across the scripts, the shared counter
// running out in the second.
func TestBatchSplitsLargeBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, target := range batchTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
			shared := counter.Item{Key: "shared", Algorithm: limit.FixedWindow, Limit: 11, Window: limit.Every(time.Minute), Cost: 1}
			m := countertest.NewModel()
			reqs := make([]counter.Request, 20)
			for i := range reqs {
				req := counter.Request{Group: "big", Now: now, Items: []counter.Item{shared}}
				for k := range counter.MaxItems - 1 {
					req.Items = append(req.Items, counter.Item{Key: fmt.Sprint("k", k), Algorithm: limit.SlidingWindow, Limit: 100, Window: limit.Every(time.Minute), Cost: 1})
				}
				reqs[i] = req
			}
			got, errs, scripts := target.store.CheckBatchScripts(ctx, reqs)
			if scripts != 3 {
				t.Fatalf("1,280 items in %d scripts, want 3", scripts)
			}
			for i, req := range reqs {
				if errs[i] != nil {
					t.Fatalf("check %d: %v", i, errs[i])
				}
				sameAsModel(t, fmt.Sprint("check ", i), req, got[i], m.Check(req, req.Now))
				if want := i < 11; got[i].Allowed != want {
					t.Fatalf("check %d: allowed %v, want %v", i, got[i].Allowed, want)
				}
			}
		})
	}
}

// TestBatchBadKeyFailsAlone puts, among a batch of two tenants' checks, two
// whose keys hold something else than a counter (a hash, and a string of
// the wrong length): those two fail with ErrUnavailable, keeping nothing,
// and every other check of the batch, of the same tenant or not, before or
// after them, is answered and counted as if they were not there.
func TestBatchBadKeyFailsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, target := range batchTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			if err := target.raw.HSet(ctx, target.prefix+"{a}:hash", "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			if err := target.raw.Set(ctx, target.prefix+"{a}:short", "12345", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			hour := limit.Every(time.Hour)
			item := func(key string) counter.Item {
				return counter.Item{Key: key, Algorithm: limit.FixedWindow, Limit: 100, Window: hour, Cost: 1}
			}
			reqs := []counter.Request{
				{Group: "a", Items: []counter.Item{item("hot")}},
				{Group: "a", Items: []counter.Item{item("hot"), item("hash")}},
				{Group: "b", Items: []counter.Item{item("hot")}},
				{Group: "a", Items: []counter.Item{item("hot"), item("other")}},
				{Group: "a", Ceilings: 1, Items: []counter.Item{item("hot"), item("short")}},
				{Group: "b", Items: []counter.Item{item("hot")}},
			}
			got, errs, _ := target.store.CheckBatchScripts(ctx, reqs)
			for i := range reqs {
				bad := i == 1 || i == 4
				if bad {
					var rerr goredis.Error
					if !errors.Is(errs[i], counter.ErrUnavailable) || errors.As(errs[i], &rerr) {
						t.Errorf("check %d, on a key that holds no counter: got %v, want ErrUnavailable", i, errs[i])
					}
					continue
				}
				if errs[i] != nil || !got[i].Allowed {
					t.Errorf("check %d: %+v, %v; want allowed", i, got[i], errs[i])
				}
			}
			if msg := fmt.Sprint(errs[1]); !strings.Contains(msg, "WRONGTYPE") || !strings.Contains(msg, "{a}:hash") {
				t.Errorf("check on a hash: %q; want it to name WRONGTYPE and the key", msg)
			}
			if msg := fmt.Sprint(errs[4]); !strings.Contains(msg, "malformed counter state") || !strings.Contains(msg, "{a}:short") {
				t.Errorf("check on a short string: %q; want it to say malformed and name the key", msg)
			}
			// The failed checks kept nothing, not even their ceiling.
			for key, want := range map[string]int64{"{a}:hot": 2, "{b}:hot": 2, "{a}:other": 1} {
				if got := storedCountOf(t, target.raw, target.prefix+key); got != want {
					t.Errorf("%s holds %d, want %d", key, got, want)
				}
			}
			if got, want := got[3].Decisions[0].Remaining, int64(98); got != want {
				t.Errorf("check after a failed one: remaining %d, want %d", got, want)
			}
		})
	}
}

// TestConcurrentBatchesShareScripts sends 16 callers' batches of 16 checks
// at once to one server, on one hot counter: the batches that wait while a
// pipeline is on the server go together in the next (fewer scripts than
// batches), each batch still decided whole and in its order (its admitted
// checks come first), and the counter admits exactly its limit. Before,
// each batch was a script of its own.
func TestConcurrentBatchesShareScripts(t *testing.T) {
	t.Parallel()
	target := batchTargets(t)[0]
	// Four groups, a counter each, that runs out about half way.
	hot := counter.Item{Key: "hot", Algorithm: limit.FixedWindow, Limit: 1000, Window: limit.Every(30 * 24 * time.Hour), Cost: 1}
	const callers, batches, size = 16, 30, 16
	before := target.store.Scripts()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			reqs := make([]counter.Request, size)
			for b := range batches {
				for i := range reqs {
					reqs[i] = counter.Request{Group: fmt.Sprintf("t%d", g%4), Items: []counter.Item{hot}}
				}
				res, errs := target.store.CheckBatch(context.Background(), reqs)
				refused := false
				for i := range reqs {
					if errs[i] != nil {
						t.Errorf("caller %d batch %d check %d: %v", g, b, i, errs[i])
						return
					}
					if res[i].Allowed && refused {
						t.Errorf("caller %d batch %d: check %d admitted after a refused one on the same counter", g, b, i)
					}
					refused = refused || !res[i].Allowed
					if res[i].Allowed {
						admitted.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	scripts := target.store.Scripts() - before
	if got := admitted.Load(); got != 4*1000 {
		t.Errorf("%d admitted of %d, want 4,000", got, callers*batches*size)
	}
	for g := range 4 {
		if got := storedCountOf(t, target.raw, fmt.Sprintf("%s{t%d}:hot", target.prefix, g)); got != 1000 {
			t.Errorf("group t%d: stored count %d, want 1,000", g, got)
		}
	}
	if scripts >= callers*batches {
		t.Errorf("%d scripts for %d batches: none shared", scripts, callers*batches)
	}
	t.Logf("%d batches of %d checks in %d scripts", callers*batches, size, scripts)
}
