package limit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// t0 starts a minute, so it also starts every window of 1 s, 10 s and 1 min
// (windows are aligned to the Unix epoch).
var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// newYear is 24 days into a 30-day window (they start 2025-12-08).
var newYear = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const us = time.Microsecond

// call is one request of a hand-computed sequence and the decision it gets.
type call struct {
	at   time.Time
	cost int64
	want limit.Decision
}

// allowed and refused spell out a decision; limit is filled in by the case.
func allowed(remaining int64, resetAt time.Time) limit.Decision {
	return limit.Decision{Allowed: true, Remaining: remaining, ResetAt: resetAt}
}

func refused(remaining int64, resetAt time.Time, retryAfter time.Duration) limit.Decision {
	return limit.Decision{Remaining: remaining, ResetAt: resetAt, RetryAfter: retryAfter}
}

// burst is n calls of cost 1 at one instant, the first leaving firstRemaining.
func burst(n int, when time.Time, firstRemaining int64, resetAt func(i int) time.Time) []call {
	calls := make([]call, n)
	for i := range calls {
		calls[i] = call{when, 1, allowed(firstRemaining-int64(i), resetAt(i))}
	}
	return calls
}

func fixedReset(t time.Time) func(int) time.Time { return func(int) time.Time { return t } }

func TestDecide(t *testing.T) {
	t.Parallel()
	minute := limit.Every(time.Minute)
	tests := []struct {
		name  string
		a     limit.Algorithm
		limit int64
		w     limit.Window
		st    limit.State
		calls []call
	}{
		{
			name: "fixed ten admitted then the eleventh waits for the window end", a: limit.FixedWindow, limit: 10, w: minute,
			calls: append(burst(10, at(15*time.Second), 9, fixedReset(at(time.Minute))),
				call{at(30 * time.Second), 1, refused(0, at(time.Minute), 30*time.Second)},
				call{at(time.Minute - us), 1, refused(0, at(time.Minute), us)},
				call{at(time.Minute), 1, allowed(9, at(2*time.Minute))},
				call{at(time.Minute), 9, allowed(0, at(2*time.Minute))},
				call{at(2*time.Minute - time.Second), 1, refused(0, at(2*time.Minute), time.Second)},
			),
		},
		{
			name: "fixed a cost that no longer fits is refused while a smaller one is admitted", a: limit.FixedWindow, limit: 10, w: minute,
			calls: []call{
				{at(time.Second), 8, allowed(2, at(time.Minute))},
				{at(2 * time.Second), 3, refused(2, at(time.Minute), 58*time.Second)},
				{at(3 * time.Second), 2, allowed(0, at(time.Minute))},
			},
		},
		{
			name: "fixed cost equal to the limit", a: limit.FixedWindow, limit: 10, w: minute,
			calls: []call{{at(0), 10, allowed(0, at(time.Minute))}},
		},
		{
			name: "fixed cost above the limit waits for the window end and is refused there too", a: limit.FixedWindow, limit: 10, w: minute,
			calls: []call{
				{at(20 * time.Second), 11, refused(10, at(time.Minute), 40*time.Second)},
				{at(time.Minute), 11, refused(10, at(2*time.Minute), time.Minute)},
			},
		},
		{
			name: "fixed a state from a later window (a store clock ahead) is counted in", a: limit.FixedWindow, limit: 10, w: minute,
			st: limit.State{Start: at(time.Minute).UnixMicro(), Count: 9},
			calls: []call{
				{at(59 * time.Second), 1, allowed(0, at(2*time.Minute))},
				{at(59500 * time.Millisecond), 1, refused(0, at(2*time.Minute), 60500*time.Millisecond)},
			},
		},
		{
			name: "fixed calendar month across leap day", a: limit.FixedWindow, limit: 3, w: limit.Month,
			calls: []call{
				{time.Date(2028, 2, 29, 23, 59, 59, 0, time.UTC), 3,
					allowed(0, time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC))},
				{time.Date(2028, 2, 29, 23, 59, 59, 0, time.UTC), 1,
					refused(0, time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), time.Second)},
				{time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 1,
					allowed(2, time.Date(2028, 4, 1, 0, 0, 0, 0, time.UTC))},
			},
		},
		{
			name: "fixed calendar month December to January", a: limit.FixedWindow, limit: 1, w: limit.Month,
			st: limit.State{Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), Count: 1},
			calls: []call{
				{time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC), 1,
					refused(0, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), 12*time.Hour)},
				{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), 1,
					allowed(0, time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC))},
			},
		},
		{
			// prev 10, half-way: estimate 10·0.5 + 0 = 5, so 5 more fit. The
			// sixth needs 10·(60−e)/60 + 5 + 1 ≤ 10, e ≥ 36 s.
			name: "sliding previous window full estimates half of it half-way", a: limit.SlidingWindow, limit: 10, w: minute,
			calls: append(append(
				burst(10, at(-50*time.Second), 9, fixedReset(at(time.Minute))),
				burst(5, at(30*time.Second), 4, fixedReset(at(2*time.Minute)))...),
				call{at(30 * time.Second), 1, refused(0, at(2*time.Minute), 6*time.Second)},
				call{at(36*time.Second - us), 1, refused(0, at(2*time.Minute), us)},
				call{at(36 * time.Second), 1, allowed(0, at(2*time.Minute))},
			),
		},
		{
			// curr 10 at 10 s: the next window, with prev 10, admits one at
			// 10·(60−e)/60 + 1 ≤ 10, e ≥ 6 s: 66 s from the window start.
			name: "sliding full current window waits into the next", a: limit.SlidingWindow, limit: 10, w: minute,
			st: limit.State{Start: t0.UnixMicro(), Count: 10},
			calls: []call{
				{at(10 * time.Second), 1, refused(0, at(2*time.Minute), 56*time.Second)},
				{at(66*time.Second - us), 1, refused(0, at(2*time.Minute), us)},
				{at(66 * time.Second), 1, allowed(0, at(3*time.Minute))},
			},
		},
		{
			name: "sliding a window two back is forgotten", a: limit.SlidingWindow, limit: 10, w: minute,
			st:    limit.State{Start: at(-2 * time.Minute).UnixMicro(), Count: 10, Prev: 10},
			calls: []call{{at(0), 10, allowed(0, at(2*time.Minute))}},
		},
		{
			name: "sliding previous weight rolls out at the window end", a: limit.SlidingWindow, limit: 10, w: minute,
			st: limit.State{Start: at(-time.Minute).UnixMicro(), Count: 10},
			calls: []call{
				{at(0), 1, refused(0, at(time.Minute), 6*time.Second)},
				{at(59 * time.Second), 1, allowed(8, at(2*time.Minute))},
			},
		},
		{
			name: "sliding cost above the limit waits until the counter is whole", a: limit.SlidingWindow, limit: 10, w: minute,
			calls: []call{
				{at(10 * time.Second), 11, refused(10, at(time.Minute), 50*time.Second)},
				{at(10 * time.Second), 2, allowed(8, at(2*time.Minute))},
				{at(20 * time.Second), 11, refused(8, at(2*time.Minute), 100*time.Second)},
			},
		},
		{
			// prev 7 at e = 51428571 µs weighs 7·8571429/60e6 = 1.00000005:
			// after one more the estimate is 2.00000005 and 7, not 8, still fit.
			name: "sliding remaining does not round a weight just above a whole number down", a: limit.SlidingWindow, limit: 10, w: minute,
			st: limit.State{Start: at(-time.Minute).UnixMicro(), Count: 7},
			calls: []call{
				{at(51428571 * us), 1, allowed(7, at(2*time.Minute))},
				{at(51428571 * us), 8, refused(7, at(2*time.Minute), 1*us)},
				{at(51428571 * us), 7, allowed(0, at(2*time.Minute))},
			},
		},
		{
			// The next window, with prev 2, admits 999999999 at 2·(1−f) ≤ 1,
			// f ≥ ½: 45 days from the window start, 21 days (504h) from now
			// in exact arithmetic. The estimate's float sum rounds down
			// 77.247 ms earlier, and slidingStep admits from there.
			name: "sliding retry is when the step admits, near MaxLimit over 30 days", a: limit.SlidingWindow, limit: limit.MaxLimit, w: limit.Every(720 * time.Hour),
			st: limit.State{Start: time.Date(2025, 12, 8, 0, 0, 0, 0, time.UTC).UnixMicro(), Count: 2},
			calls: []call{
				{newYear, limit.MaxLimit - 1, refused(limit.MaxLimit-2, time.Date(2026, 2, 6, 0, 0, 0, 0, time.UTC), 504*time.Hour-77247*us)},
				{newYear.Add(504*time.Hour - 77248*us), limit.MaxLimit - 1, refused(limit.MaxLimit-2, time.Date(2026, 2, 6, 0, 0, 0, 0, time.UTC), us)},
				{newYear.Add(504*time.Hour - 77247*us), limit.MaxLimit - 1, allowed(0, time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC))},
			},
		},
		{
			name: "token bucket burst of ten then one a second", a: limit.TokenBucket, limit: 10, w: limit.Every(10 * time.Second),
			calls: append(
				burst(10, at(0), 9, func(i int) time.Time { return at(time.Duration(i+1) * time.Second) }),
				call{at(0), 1, refused(0, at(10*time.Second), time.Second)},
				call{at(time.Second - us), 1, refused(0, at(10*time.Second), us)},
				call{at(time.Second), 1, allowed(0, at(11*time.Second))},
				call{at(time.Second), 1, refused(0, at(11*time.Second), time.Second)},
				call{at(1500 * time.Millisecond), 1, refused(0, at(11*time.Second), 500*time.Millisecond)},
				call{at(4 * time.Second), 3, allowed(0, at(14*time.Second))},
				call{at(24 * time.Second), 1, allowed(9, at(25*time.Second))},
			),
		},
		{
			name: "token bucket seven a minute leaves six", a: limit.TokenBucket, limit: 7, w: minute,
			calls: []call{
				// One interval is 60/7 s = 8571428.57 µs; ResetAt rounds up. The
				// retry comes a millionth of an interval (8.17 µs) early: the
				// slack of gcraCapacity.
				{at(0), 1, allowed(6, at(8571429*us))},
				{at(0), 6, allowed(0, at(time.Minute))},
				{at(0), 1, refused(0, at(time.Minute), 8571421*us)},
			},
		},
		{
			name: "token bucket fresh limit ten cost one", a: limit.TokenBucket, limit: 10, w: minute,
			calls: []call{{at(0), 1, allowed(9, at(6*time.Second))}},
		},
		{
			// Full at t0; 17142848 µs later 1.999999 intervals have drained:
			// one more fits, two do not (for 1 µs more, within gcraCapacity's
			// slack of 8.17 µs).
			name: "token bucket remaining counts only whole intervals drained", a: limit.TokenBucket, limit: 7, w: minute,
			st: limit.State{Start: t0.UnixMicro(), TAT: 60e6},
			calls: []call{
				{at(17142848 * us), 2, refused(1, at(time.Minute), us)},
				{at(17142849 * us), 2, allowed(0, at(time.Minute+17142858*us))},
			},
		},
		{
			name: "token bucket cost above the limit", a: limit.TokenBucket, limit: 10, w: limit.Every(10 * time.Second),
			calls: []call{
				{at(0), 5, allowed(5, at(5*time.Second))},
				{at(time.Second), 11, refused(6, at(5*time.Second), 4*time.Second)},
			},
		},
		{
			// A full bucket written by a store whose clock is 5 ms ahead: the
			// caller waits one interval from the state's instant, on its clock.
			name: "token bucket clock behind the state's", a: limit.TokenBucket, limit: 10, w: limit.Every(10 * time.Second),
			st: limit.State{Start: at(5 * time.Millisecond).UnixMicro(), TAT: 10e6},
			calls: []call{
				{at(0), 1, refused(0, at(10005*time.Millisecond), 1005*time.Millisecond)},
				{at(0), 11, refused(0, at(10005*time.Millisecond), 10005*time.Millisecond)},
				{at(1005 * time.Millisecond), 1, allowed(0, at(11005*time.Millisecond))},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := tc.st
			for i, c := range tc.calls {
				if err := limit.Validate(tc.a, tc.limit, c.cost, tc.w); err != nil {
					t.Fatalf("call %d: Validate: %v", i, err)
				}
				got, next := limit.Decide(tc.a, st, c.at, c.cost, tc.limit, tc.w)
				want := c.want
				want.Limit = tc.limit
				if d := diffDecision(got, want); d != "" {
					t.Errorf("call %d: Decide(%v, %+v, %s, cost %d) %s", i, tc.a, st, c.at.Format(time.RFC3339Nano), c.cost, d)
				}
				if !got.Allowed && next != st {
					t.Errorf("call %d: refused, state = %+v, want it unchanged %+v", i, next, st)
				}
				st = next
			}
		})
	}
}

// diffDecision describes how got differs from want, or returns "".
func diffDecision(got, want limit.Decision) string {
	if got.Allowed == want.Allowed && got.Limit == want.Limit && got.Remaining == want.Remaining &&
		got.ResetAt.Equal(want.ResetAt) && got.RetryAfter == want.RetryAfter {
		return ""
	}
	return fmt.Sprintf("= %s, want %s", fmtDecision(got), fmtDecision(want))
}

func fmtDecision(d limit.Decision) string {
	return fmt.Sprintf("{Allowed:%t Limit:%d Remaining:%d ResetAt:%s RetryAfter:%v}",
		d.Allowed, d.Limit, d.Remaining, d.ResetAt.UTC().Format(time.RFC3339Nano), d.RetryAfter)
}

// TestGCRACapacity: the float products and sums of interval = w/limit can
// land an ulp above w; gcraCapacity's slack keeps a bucket holding its whole
// limit.
func TestGCRACapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		limit    int64
		w        limit.Window
		perCall  int64
		wantCall int
	}{
		// (1e6/7)·7 = 1000000.0000000001 > 1e6: a whole-limit request is
		// never admitted, even on an empty bucket.
		{"cost equal to limit 7 per second", 7, limit.Every(time.Second), 7, 1},
		{"cost equal to limit 14 per second", 14, limit.Every(time.Second), 14, 1},
		{"cost equal to limit 30 per second", 30, limit.Every(time.Second), 30, 1},
		// Eleven sums of 1e6/11 exceed 1e6: the burst is ten.
		{"burst of one at a time 11 per second", 11, limit.Every(time.Second), 1, 11},
		{"burst of one at a time 49 per second", 49, limit.Every(time.Second), 1, 49},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var st limit.State
			for i := range tc.wantCall {
				d, next := limit.Decide(limit.TokenBucket, st, t0, tc.perCall, tc.limit, tc.w)
				if !d.Allowed {
					t.Fatalf("empty bucket of %d per %v, call %d of %d at cost %d at one instant: refused (state %+v), want admitted",
						tc.limit, tc.w, i+1, tc.wantCall, tc.perCall, st)
				}
				st = next
			}
		})
	}
}

// TestLeft: what a counter holds, counting nothing. A new counter holds its
// whole limit (a peek on it must not answer limit − 1), and a used one what
// its state leaves, rolled over to the instant asked.
func TestLeft(t *testing.T) {
	t.Parallel()
	minute := limit.Every(time.Minute)
	tests := []struct {
		name      string
		a         limit.Algorithm
		limit     int64
		w         limit.Window
		st        limit.State
		now       time.Time
		remaining int64
		resetAt   time.Time
	}{
		{"fixed, new", limit.FixedWindow, 3, minute, limit.State{}, at(10 * time.Second), 3, at(time.Minute)},
		{"fixed, one used", limit.FixedWindow, 3, minute, limit.State{Start: t0.UnixMicro(), Count: 1}, at(10 * time.Second), 2, at(time.Minute)},
		{"fixed, used last window", limit.FixedWindow, 3, minute, limit.State{Start: t0.UnixMicro(), Count: 3}, at(70 * time.Second), 3, at(2 * time.Minute)},
		{"fixed, over a lowered limit", limit.FixedWindow, 3, minute, limit.State{Start: t0.UnixMicro(), Count: 9}, at(time.Second), 0, at(time.Minute)},
		{"fixed month, new", limit.FixedWindow, 5, limit.Month, limit.State{}, t0, 5, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)},
		{"sliding, new", limit.SlidingWindow, 3, minute, limit.State{}, at(10 * time.Second), 3, at(time.Minute)},
		// Half a window in, half of the previous window's 2 still weighs 1.
		{"sliding, previous window", limit.SlidingWindow, 3, minute, limit.State{Start: t0.UnixMicro(), Count: 2}, at(90 * time.Second), 2, at(2 * time.Minute)},
		{"sliding, this window", limit.SlidingWindow, 3, minute, limit.State{Start: t0.UnixMicro(), Count: 1}, at(30 * time.Second), 2, at(2 * time.Minute)},
		{"token bucket, new", limit.TokenBucket, 3, minute, limit.State{}, at(10 * time.Second), 3, at(10 * time.Second)},
		// One of 3 per minute taken 10 s ago: 20 s of its 20 s interval is
		// still to drain, so two are left.
		{"token bucket, one used", limit.TokenBucket, 3, minute, limit.State{Start: t0.UnixMicro(), TAT: 20e6}, at(10 * time.Second), 2, at(20 * time.Second)},
		{"token bucket, drained", limit.TokenBucket, 3, minute, limit.State{Start: t0.UnixMicro(), TAT: 60e6}, at(2 * time.Minute), 3, at(2 * time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rem, reset := limit.Left(tc.a, tc.st, tc.now, tc.limit, tc.w)
			if rem != tc.remaining || !reset.Equal(tc.resetAt) {
				t.Errorf("Left = %d, %s; want %d, %s", rem, reset.Format(time.RFC3339Nano), tc.remaining, tc.resetAt.Format(time.RFC3339Nano))
			}
		})
	}
}
