package countertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// BenchLeases measures a Leaser (a fresh namespace's) as the gate uses it:
// an acquire alone and with the four ceilings a live key's acquire carries
// (per-IP, quota minute and hour, allotment), then its release; one caller
// at a time (the latency of a round trip) and 32 per GOMAXPROCS at once (the
// throughput), on random subjects and on one subject of a large limit. It
// reports acquires/s; ns/op is one acquire and its release.
func BenchLeases(b *testing.B, l counter.Leaser) {
	ceilings := []counter.Item{
		{Key: "ip:leases:bench", Algorithm: limit.SlidingWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Minute), Cost: 1},
		{Key: "quota:minute", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Minute), Cost: 1},
		{Key: "quota:hour", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 1},
		{Key: "allotment", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Month, Cost: 1},
	}
	var seq atomic.Int64
	cycle := func(b *testing.B, key string, withCeilings bool) {
		a := counter.Acquire{Group: "bench", Key: key, Tally: "p:bench", ID: fmt.Sprint("b", seq.Add(1)), Limit: limit.MaxLimit, TTL: time.Minute}
		if withCeilings {
			a.Ceilings = ceilings
		}
		ctx := context.Background()
		res, err := l.Acquire(ctx, a)
		if err != nil {
			b.Error(err)
			return
		}
		if !res.Allowed {
			b.Errorf("refused: %+v", res)
			return
		}
		if err := l.Release(ctx, counter.LeaseRef{Group: "bench", ID: a.ID}); err != nil {
			b.Error(err)
		}
	}
	for _, withCeilings := range []bool{false, true} {
		name := "alone"
		if withCeilings {
			name = "ceilings=4"
		}
		b.Run("sequential/"+name, func(b *testing.B) {
			for b.Loop() {
				cycle(b, "seq", withCeilings)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
		})
		for _, hot := range []bool{false, true} {
			keys := "random"
			if hot {
				keys = "hot"
			}
			b.Run("parallel/"+keys+"/"+name, func(b *testing.B) {
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
					for pb.Next() {
						key := "hot"
						if !hot {
							key = fmt.Sprint("s", r.IntN(100_000))
						}
						cycle(b, key, withCeilings)
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
			})
		}
	}
}
