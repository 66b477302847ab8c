package limit_test

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/limit"
)

func TestAdjust(t *testing.T) {
	t.Parallel()
	hour := limit.Every(time.Hour)
	h := hour.Micros()
	at := time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC).UnixMicro()
	ws := at - at%h // the window around at
	cases := []struct {
		name    string
		a       limit.Algorithm
		st      limit.State
		now     int64
		delta   int64
		charged int64
		want    limit.State
	}{
		{"fixed give-back in the window charged", limit.FixedWindow, limit.State{Start: ws, Count: 8}, at, -5, ws, limit.State{Start: ws, Count: 3}},
		{"fixed give-back never below zero", limit.FixedWindow, limit.State{Start: ws, Count: 2}, at, -5, ws, limit.State{Start: ws, Count: 0}},
		{"fixed give-back once the window rolled", limit.FixedWindow, limit.State{Start: ws, Count: 8}, at + h, -5, ws, limit.State{Start: ws + h}},
		{"fixed give-back to a window since refilled", limit.FixedWindow, limit.State{Start: ws + h, Count: 4}, at + h, -3, ws, limit.State{Start: ws + h, Count: 4}},
		{"fixed excess past the limit", limit.FixedWindow, limit.State{Start: ws, Count: 9}, at, 7, ws, limit.State{Start: ws, Count: 16}},
		{"fixed excess to the current window", limit.FixedWindow, limit.State{Start: ws, Count: 9}, at + h, 7, ws, limit.State{Start: ws + h, Count: 7}},
		{"fixed clock ahead keeps its window", limit.FixedWindow, limit.State{Start: ws + h, Count: 4}, at, -3, ws + h, limit.State{Start: ws + h, Count: 1}},
		{"sliding give-back to the current window", limit.SlidingWindow, limit.State{Start: ws, Count: 8, Prev: 5}, at, -5, ws, limit.State{Start: ws, Count: 3, Prev: 5}},
		{"sliding give-back to the previous window", limit.SlidingWindow, limit.State{Start: ws, Count: 8}, at + h, -5, ws, limit.State{Start: ws + h, Prev: 3}},
		{"sliding give-back to the previous window already rolled", limit.SlidingWindow, limit.State{Start: ws + h, Count: 1, Prev: 8}, at + h, -10, ws, limit.State{Start: ws + h, Count: 1}},
		{"sliding give-back two windows on", limit.SlidingWindow, limit.State{Start: ws, Count: 8}, at + 2*h, -5, ws, limit.State{Start: ws + 2*h}},
		{"sliding excess", limit.SlidingWindow, limit.State{Start: ws, Count: 8}, at + h, 4, ws, limit.State{Start: ws + h, Count: 4, Prev: 8}},
		{"token bucket give-back", limit.TokenBucket, limit.State{Start: at, TAT: 3_600_000_000}, at, -5, at, limit.State{Start: at, TAT: 3_600_000_000 - 5*360_000_000}},
		{"token bucket give-back never above capacity", limit.TokenBucket, limit.State{Start: at, TAT: 360_000_000}, at + 100_000_000, -5, at, limit.State{Start: at + 100_000_000}},
		{"token bucket excess", limit.TokenBucket, limit.State{Start: at, TAT: 3_600_000_000}, at, 2, at, limit.State{Start: at, TAT: 3_600_000_000 + 720_000_000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := limit.Adjust(c.a, c.st, c.now, c.delta, c.charged, 10, hour); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestOverdrawn(t *testing.T) {
	t.Parallel()
	hour := limit.Every(time.Hour)
	now := time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)
	us := now.UnixMicro()
	ws := us - us%hour.Micros()
	cases := []struct {
		name string
		a    limit.Algorithm
		st   limit.State
		want int64
	}{
		{"fixed within", limit.FixedWindow, limit.State{Start: ws, Count: 10}, 0},
		{"fixed over", limit.FixedWindow, limit.State{Start: ws, Count: 13}, 3},
		{"fixed over in a window gone", limit.FixedWindow, limit.State{Start: ws - hour.Micros(), Count: 13}, 0},
		// Half way through the window, the previous one weighs half.
		{"sliding over by the estimate", limit.SlidingWindow, limit.State{Start: ws, Count: 6, Prev: 12}, 2},
		{"sliding within", limit.SlidingWindow, limit.State{Start: ws, Count: 4, Prev: 12}, 0},
		{"token bucket over", limit.TokenBucket, limit.State{Start: us, TAT: 3_600_000_000 + 3*360_000_000}, 3},
		{"token bucket full", limit.TokenBucket, limit.State{Start: us, TAT: 3_600_000_000}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := limit.Overdrawn(c.a, c.st, now, 10, hour); got != c.want {
				t.Fatalf("got %d, want %d", got, c.want)
			}
		})
	}
}

// TestAdjustProperties draws a counter, a charge admitted on it and a
// settlement: giving back what was charged at the instant it was charged
// leaves what the counter held before; a give-back never leaves less room
// and never a negative count, an excess never more room, and the units an
// excess puts past the limit are what Overdrawn reports.
func TestAdjustProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		sc := drawScenario(t)
		now := sc.start
		st := limit.State{}
		// Some traffic first.
		for range rapid.IntRange(0, 5).Draw(t, "before") {
			now += drawStep(t, sc)
			_, st = limit.Admit(sc.a, st, now, rapid.Int64Range(1, sc.limit).Draw(t, "cost"), sc.limit, sc.w)
		}
		now += drawStep(t, sc)
		amount := rapid.Int64Range(1, sc.limit).Draw(t, "amount")
		ok, charged := limit.Admit(sc.a, st, now, amount, sc.limit, sc.w)
		if !ok {
			t.Skip("not admitted")
		}
		at := time.UnixMicro(now)
		left := func(s limit.State, at time.Time) int64 {
			r, _ := limit.Left(sc.a, s, at, sc.limit, sc.w)
			return r
		}
		back := limit.Adjust(sc.a, charged, now, -amount, charged.Start, sc.limit, sc.w)
		if got, want := left(back, at), left(st, at); sc.a != limit.TokenBucket && got != want || sc.a == limit.TokenBucket && (got < want-1 || got > want+1) {
			t.Fatalf("%v: %d left after giving back what was charged, %d before the charge", sc, got, want)
		}
		later := now + drawStep(t, sc)
		lat := time.UnixMicro(later)
		delta := rapid.Int64Range(-amount, limit.MaxLimit).Draw(t, "delta")
		after := limit.Adjust(sc.a, charged, later, delta, charged.Start, sc.limit, sc.w)
		if after.Count < 0 || after.Prev < 0 || after.TAT < 0 || math.IsNaN(after.TAT) {
			t.Fatalf("%v: delta %d: state %+v", sc, delta, after)
		}
		l0, l1 := left(charged, lat), left(after, lat)
		if delta < 0 && l1 < l0 || delta > 0 && l1 > l0 {
			t.Fatalf("%v: delta %d moved what is left from %d to %d", sc, delta, l0, l1)
		}
		if delta > 0 && sc.a == limit.FixedWindow {
			if got, want := limit.Overdrawn(sc.a, after, lat, sc.limit, sc.w), max(0, after.Count-sc.limit); got != want {
				t.Fatalf("%v: overdrawn %d, want %d", sc, got, want)
			}
		}
		if limit.Overdrawn(sc.a, after, lat, sc.limit, sc.w) > 0 && l1 != 0 {
			t.Fatalf("%v: overdrawn with %d left", sc, l1)
		}
	})
}
