// Package gcheadroom lets a process's heap grow by a fixed amount between
// garbage collections rather than by a fixed share of what is live.
//
// Go collects when the heap has grown by GOGC percent (100) of what the
// last collection left live. A service whose live heap is small and whose
// requests allocate at a high rate then collects hundreds of times a
// second, and each collection costs about the same whatever the heap:
// scanning every goroutine's stack, shrinking the stacks of those idle at
// that moment (which regrow on their next call), and assists charged to the
// allocating requests. Measured on Tollgate's rate limit service on Redis
// (docs/benchmarks.md), GOGC=400 took 13 µs of its 77 µs of CPU a decision.
//
// A fixed GOGC that high would multiply a large live heap (a memory counter
// store holding millions of counters) by five. Run instead keeps the heap's
// growth between collections near a fixed headroom: it reads the live heap
// every interval and sets the GC percent to headroom/live, between 100 (Go's
// default: never collect more often than without it) and 1000. A live heap
// of 40 MiB with 128 MiB of headroom collects at 168 MiB; one of 1 GiB
// collects at 2 GiB, as by default.
//
// GOGC set in the environment is the operator's choice: Run then changes
// nothing. A GOMEMLIMIT still bounds the heap under Run's percent, as it
// does under any GOGC.
package gcheadroom

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Bounds of the GC percent Run sets.
const (
	minPercent = 100
	maxPercent = 1000
)

// Percent is the GC percent that gives a live heap of live bytes about
// headroom bytes to grow before the next collection, within 100 to 1000,
// in steps of 25 so that a live heap moving a little from one collection
// to the next does not change it.
func Percent(live, headroom int64) int {
	if live <= 0 {
		return maxPercent
	}
	p := headroom * 100 / live / 25 * 25
	return int(min(max(p, minPercent), maxPercent))
}

// Run sets the GC percent from the live heap every interval until ctx
// ends, and returns at once when GOGC is set in the environment. It
// restores Go's default percent (100) when it returns.
func Run(ctx context.Context, headroom int64, interval time.Duration) {
	if os.Getenv("GOGC") != "" {
		return
	}
	defer debug.SetGCPercent(minPercent)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(interval)
	defer t.Stop()
	last := -1
	for {
		metrics.Read(sample)
		var live int64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = int64(sample[0].Value.Uint64())
		}
		if p := Percent(live, headroom); p != last {
			debug.SetGCPercent(p)
			last = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
