package redis_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	tgredis "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/benchcost"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// benchParallelism is goroutines per GOMAXPROCS in the parallel benchmarks:
// a server handles many requests at once, far more than it has cores.
const benchParallelism = 32

// opener opens a store on a fresh prefix: of one server or of a cluster.
type opener func(b *testing.B) *tgredis.Store

func benchStore(b *testing.B) *tgredis.Store {
	b.Helper()
	u, prefix := redistest.New(b)
	return benchOpen(b, u, prefix)
}

func benchClusterStore(b *testing.B) *tgredis.Store {
	b.Helper()
	u, prefix := redistest.NewCluster(b)
	return benchOpen(b, u, prefix)
}

func benchOpen(b *testing.B, u, prefix string) *tgredis.Store {
	b.Helper()
	// A deadline that load on the benchmark's own machine cannot hit.
	s := open(b, tgredis.Config{URL: u, Prefix: prefix, Timeout: 5 * time.Second})
	b.Cleanup(func() { s.Close() })
	return s
}

// Limits high enough that every check is admitted and writes.
func benchItems(key string) []counter.Item {
	return []counter.Item{
		{Key: key + ":fixed", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Month, Cost: 1},
		{Key: key + ":sliding", Algorithm: limit.SlidingWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 1},
		{Key: key + ":bucket", Algorithm: limit.TokenBucket, Limit: limit.MaxLimit, Window: limit.Every(time.Second), Cost: 1},
		{Key: key + ":minute", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Minute), Cost: 1},
	}
}

func mustCheck(b *testing.B, s *tgredis.Store, req counter.Request) {
	res, err := s.Check(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if !res.Allowed {
		b.Fatalf("refused: %+v", res)
	}
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
}

// BenchmarkCheck is one caller at a time: the round-trip latency.
func BenchmarkCheck(b *testing.B) { benchCheck(b, benchStore) }

// BenchmarkClusterCheck is BenchmarkCheck on a Redis Cluster.
func BenchmarkClusterCheck(b *testing.B) { benchCheck(b, benchClusterStore) }

func benchCheck(b *testing.B, mk opener) {
	for _, n := range []int{1, 4} {
		b.Run("items="+strconv.Itoa(n), func(b *testing.B) {
			s := mk(b)
			req := counter.Request{Group: "bench", Items: benchItems("seq")[:n]}
			b.ReportAllocs()
			for b.Loop() {
				mustCheck(b, s, req)
			}
			reportRate(b)
		})
	}
}

// BenchmarkCheckParallel is many callers at once, on one hot counter (every
// check of a tenant hits its quota key) and on random keys.
func BenchmarkCheckParallel(b *testing.B) { benchCheckParallel(b, benchStore) }

// BenchmarkClusterCheckParallel is BenchmarkCheckParallel on a Redis
// Cluster: the random keys belong to 36 tenants spread over its masters.
func BenchmarkClusterCheckParallel(b *testing.B) { benchCheckParallel(b, benchClusterStore) }

func benchCheckParallel(b *testing.B, mk opener) {
	for _, n := range []int{1, 4} {
		b.Run("hot/items="+strconv.Itoa(n), func(b *testing.B) {
			s := mk(b)
			req := counter.Request{Group: "bench", Items: benchItems("hot")[:n]}
			b.ReportAllocs()
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					mustCheck(b, s, req)
				}
			})
			reportRate(b)
		})
		b.Run("random/items="+strconv.Itoa(n), func(b *testing.B) {
			s := mk(b)
			b.ReportAllocs()
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					// 10,000 counters per item: enough that checks rarely
					// meet, few enough that redistest deletes them in time.
					k := strconv.FormatUint(rand.Uint64N(10_000), 36)
					mustCheck(b, s, counter.Request{Group: "t" + k[:1], Items: benchItems(k)[:n]})
				}
			})
			reportRate(b)
		})
	}
}

// BenchmarkCheckBatch is CheckBatch with the batches the gate sends for
// /v1/check/batch: 100 requests of one policy item each (the ceilings
// served from their advances), on random keys of one tenant, one batch at
// a time; it reports the cost a request (benchcost).
func BenchmarkCheckBatch(b *testing.B) {
	s := benchStore(b)
	const n = 100
	reqs := make([]counter.Request, n)
	items := make([]counter.Item, n)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "p:bench:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	m := benchcost.Start()
	for b.Loop() {
		for i := range reqs {
			items[i] = counter.Item{Key: keys[rand.IntN(len(keys))], Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 1}
			reqs[i] = counter.Request{Group: "bench", Items: items[i : i+1 : i+1]}
		}
		res, errs := s.CheckBatch(context.Background(), reqs)
		for i, err := range errs {
			if err != nil || !res[i].Allowed {
				b.Fatalf("request %d: %+v, %v", i, res[i], err)
			}
		}
	}
	m.Report(b, n, "check")
}

// BenchmarkNeighbourBesideFlood is a light tenant's checks (one item, eight
// callers) beside a tenant flooding the heaviest checks (32 items, 200
// callers) on one store: the neighbour's checks a second, and its p99
// latency, are what the store's sharing of its server gives it. One op is
// one of the neighbour's checks.
func BenchmarkNeighbourBesideFlood(b *testing.B) {
	s := benchStore(b)
	flood := make([]counter.Item, 32)
	for i := range flood {
		flood[i] = counter.Item{Key: "flood:" + strconv.Itoa(i), Algorithm: limit.SlidingWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 1}
	}
	ctx, stop := context.WithCancel(context.Background())
	var floods atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := s.Check(ctx, counter.Request{Group: "flood", Items: flood}); err == nil {
					floods.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second) // the flood's queue fills
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	f0 := floods.Load()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			k := strconv.FormatUint(rand.Uint64N(10_000), 36)
			t0 := time.Now()
			mustCheck(b, s, counter.Request{Group: "light", Items: benchItems(k)[:1]})
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	f1 := floods.Load()
	stop()
	wg.Wait()
	reportRate(b)
	b.ReportMetric(float64(f1-f0)/b.Elapsed().Seconds(), "flood-checks/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
