package limit_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// BenchmarkDecide measures one decision per algorithm on a busy counter: 100
// per minute asked about 150 times a minute, so some are refused and pay for
// the RetryAfter search.
func BenchmarkDecide(b *testing.B) {
	for _, a := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		b.Run(a.String(), func(b *testing.B) {
			const lim = 100
			w := limit.Every(time.Minute)
			step := time.Minute / 150
			now := t0
			var st limit.State
			refused := 0
			for b.Loop() {
				d, next := limit.Decide(a, st, now, 1, lim, w)
				if !d.Allowed {
					refused++
				}
				st = next
				now = now.Add(step)
			}
			b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
		})
	}
}

// BenchmarkAdmit measures the part the stores reproduce, without the derived
// Remaining, ResetAt and RetryAfter.
func BenchmarkAdmit(b *testing.B) {
	for _, a := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		b.Run(a.String(), func(b *testing.B) {
			const lim = 100
			w := limit.Every(time.Minute)
			step := (time.Minute / 150).Microseconds()
			now := t0.UnixMicro()
			var st limit.State
			for b.Loop() {
				_, st = limit.Admit(a, st, now, 1, lim, w)
				now += step
			}
		})
	}
}
