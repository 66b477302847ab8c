// Package limit holds Tollgate's three rate-limit algorithms as pure functions:
// fixed window, sliding window (weighted two-window counter) and token bucket
// (GCRA). Each takes a counter's State, the current time, a cost, a limit and a
// Window, and returns a Decision and the State to store.
//
// The counter stores (internal/counter/...) run the same arithmetic inside
// PostgreSQL and Redis; the formulas here are the reference they are tested
// against, so any change here must be made there in the same order of
// floating-point operations. Time is a parameter: nothing here reads a clock.
//
// limit imports only the standard library.
package limit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a counting rule.
type Algorithm uint8

// The algorithms. Their numeric values are part of the store protocols
// (SQL function and Lua script arguments) and must not change.
//
// Concurrency is no counting rule, and Validate refuses it: it names the
// policies whose limit bounds how many holders are in flight at once, which
// the counter stores keep as leases (counter.Leaser), not as counters.
const (
	FixedWindow   Algorithm = 1
	SlidingWindow Algorithm = 2
	TokenBucket   Algorithm = 3
	Concurrency   Algorithm = 4
)

// ErrInvalid is returned (wrapped) for an unknown algorithm, a window out of
// range or a non-positive limit or cost.
var ErrInvalid = errors.New("invalid limit")

// String returns the algorithm's API name.
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case TokenBucket:
		return "token_bucket"
	case Concurrency:
		return "concurrency"
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm reads an API name ("fixed_window", "sliding_window",
// "token_bucket", "concurrency"); anything else wraps ErrInvalid.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, Concurrency} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("algorithm %q: %w", s, ErrInvalid)
}

// Bounds of what Tollgate counts. MaxLimit keeps every product in the
// sliding-window and GCRA arithmetic exact in a float64 (and in Redis's Lua
// numbers), whose integers are exact below 2^53.
const (
	MinWindow = time.Second
	MaxWindow = 30 * 24 * time.Hour
	MaxLimit  = 1_000_000_000
)

// Window is a counting period: a fixed length from MinWindow to MaxWindow, or
// a month. Fixed-length windows are aligned to the Unix epoch. A month is the
// calendar month in UTC, or, with an Anchor, the month that starts at that
// offset into each calendar month: a billing period. The zero Window is
// invalid.
type Window struct {
	Length time.Duration // zero when Month
	Month  bool
	// Anchor, with Month, is how far into each calendar month (UTC) the
	// window starts: (day of month − 1) × 24 h plus the time of day, whole
	// seconds below MaxAnchor. A month too short for the day starts on its
	// last day at the same time of day, as Stripe's billing periods do (an
	// anchor on the 31st: Jan 31, Feb 28, Mar 31, Apr 30). Zero is the
	// calendar month.
	Anchor time.Duration
	// Billing, with Month, says that the Anchor follows the tenant's
	// billing period (its Stripe subscription's billing cycle anchor),
	// set by Anchored when the tenant's policies are loaded: "billing" in
	// ParseWindow's form. The counter stores see only the Anchor.
	Billing bool
}

// MaxAnchor bounds Window.Anchor: the 31st at 23:59:59.
const MaxAnchor = 31 * 24 * time.Hour

// Month is the calendar month in UTC.
var Month = Window{Month: true}

// BillingPeriod is the month that follows the tenant's billing period: the
// calendar month until Anchored gives it the tenant's anchor.
var BillingPeriod = Window{Month: true, Billing: true}

// Every returns a window of fixed length d.
func Every(d time.Duration) Window { return Window{Length: d} }

// Anchored returns w with its Anchor at the day and time of month of t
// (UTC, to the second) when w follows the billing period, and w unchanged
// otherwise. A zero t (a tenant without a subscription) is the calendar
// month.
func (w Window) Anchored(t time.Time) Window {
	if !w.Billing {
		return w
	}
	w.Anchor = 0
	if !t.IsZero() {
		t = t.UTC()
		w.Anchor = time.Duration(t.Day()-1)*24*time.Hour +
			time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	}
	return w
}

// ParseWindow reads "month", "billing", "<n>d" (days) or a Go duration such
// as "90s", "15m" or "720h". Lengths must be whole seconds between 1 s and 30
// days.
func ParseWindow(s string) (Window, error) {
	switch s {
	case "month":
		return Month, nil
	case "billing":
		return BillingPeriod, nil
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > 30 {
			return Window{}, fmt.Errorf("window %q: days must be 1d to 30d: %w", s, ErrInvalid)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return Window{}, fmt.Errorf("window %q: not a duration, \"Nd\", \"month\" or \"billing\": %w", s, ErrInvalid)
		}
	}
	w := Every(d)
	if err := w.Validate(); err != nil {
		return Window{}, err
	}
	return w, nil
}

// Validate reports whether w is a window Tollgate can count in.
func (w Window) Validate() error {
	if w.Month {
		if w.Length != 0 {
			return fmt.Errorf("window: month with a length: %w", ErrInvalid)
		}
		if w.Anchor < 0 || w.Anchor >= MaxAnchor || w.Anchor%time.Second != 0 {
			return fmt.Errorf("window: month anchored at %s: must be whole seconds below %s: %w", w.Anchor, MaxAnchor, ErrInvalid)
		}
		return nil
	}
	if w.Anchor != 0 || w.Billing {
		return fmt.Errorf("window %s: only a month has an anchor: %w", w.Length, ErrInvalid)
	}
	if w.Length < MinWindow || w.Length > MaxWindow || w.Length%time.Second != 0 {
		return fmt.Errorf("window %s: must be whole seconds from 1s to 720h: %w", w.Length, ErrInvalid)
	}
	return nil
}

// String returns the form ParseWindow reads. A month anchored other than
// by Billing (read back from a store) is written as "month+" and its Anchor.
func (w Window) String() string {
	switch {
	case w.Billing:
		return "billing"
	case w.Month && w.Anchor != 0:
		return "month+" + w.Anchor.String()
	case w.Month:
		return "month"
	case w.Length%(24*time.Hour) == 0:
		return strconv.Itoa(int(w.Length/(24*time.Hour))) + "d"
	}
	return w.Length.String()
}

// Micros returns the window length in microseconds, or, for a month, minus
// its Anchor in microseconds (0 for the calendar month): this is how the
// store protocols encode a window.
func (w Window) Micros() int64 {
	if w.Month {
		return -w.Anchor.Microseconds()
	}
	return w.Length.Microseconds()
}

// WindowFromMicros is the inverse of Window.Micros (but for Billing, which
// the stores do not keep).
func WindowFromMicros(us int64) Window {
	if us <= 0 {
		return Window{Month: true, Anchor: time.Duration(-us) * time.Microsecond}
	}
	return Every(time.Duration(us) * time.Microsecond)
}

// Bounds returns the start and end (exclusive), in Unix microseconds, of the
// window that contains the instant now (Unix microseconds, not negative).
func (w Window) Bounds(now int64) (start, end int64) {
	if w.Month {
		t := time.UnixMicro(now).UTC()
		y, m := t.Year(), t.Month()
		start = monthStart(y, m, w.Anchor)
		if now < start {
			return monthStart(y, m-1, w.Anchor), start
		}
		return start, monthStart(y, m+1, w.Anchor)
	}
	l := w.Length.Microseconds()
	start = now - now%l
	return start, start + l
}

// monthStart returns the instant (Unix µs) a month anchored at anchor starts
// in calendar month m of year y (m may be out of 1 to 12: time.Date
// normalizes it): the anchor's day, or the month's last day when it is
// shorter, at the anchor's time of day.
func monthStart(y int, m time.Month, anchor time.Duration) int64 {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	days := int64(first.AddDate(0, 1, 0).Sub(first) / (24 * time.Hour))
	day := min(int64(anchor/(24*time.Hour)), days-1)
	return first.UnixMicro() + day*86_400_000_000 + (anchor % (24 * time.Hour)).Microseconds()
}

// Validate checks the arguments every algorithm shares: a known algorithm, a
// limit from 1 to MaxLimit, a cost from 1 to MaxLimit, and a valid window. The
// calendar month is a fixed window only: a sliding window or token bucket
// needs a constant length.
func Validate(a Algorithm, limit, cost int64, w Window) error {
	if a != FixedWindow && a != SlidingWindow && a != TokenBucket {
		return fmt.Errorf("algorithm %d: %w", a, ErrInvalid)
	}
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("limit %d: must be 1 to %d: %w", limit, MaxLimit, ErrInvalid)
	}
	if cost < 1 || cost > MaxLimit {
		return fmt.Errorf("cost %d: must be 1 to %d: %w", cost, MaxLimit, ErrInvalid)
	}
	if err := w.Validate(); err != nil {
		return err
	}
	if w.Month && a != FixedWindow {
		return fmt.Errorf("%s over a calendar month: only fixed_window counts calendar months: %w", a, ErrInvalid)
	}
	return nil
}

// State is what a store keeps per counter key. The zero State is a counter
// that has never been used.
//
//	fixed window:   Start = window start (µs), Count = cost admitted in it
//	sliding window: Start = current window start (µs), Count = its cost,
//	                Prev = cost admitted in the window before it
//	token bucket:   Start = instant of the last update (µs), TAT = the
//	                theoretical arrival time as an offset (µs, fractional)
//	                from Start
type State struct {
	Start int64
	Count int64
	Prev  int64
	TAT   float64
}

// Decision is the answer for one counter.
type Decision struct {
	Allowed bool
	// Limit is the limit that was applied.
	Limit int64
	// Remaining is the largest cost a request could be admitted for next,
	// from 0 to Limit: Left of the state Decide returns (after consuming the
	// request when Allowed). The counter stores report what the counter
	// holds once the whole request is done instead (counter.Result).
	Remaining int64
	// ResetAt is when the counter is whole again: the window's end, or for a
	// token bucket the moment it has drained completely.
	ResetAt time.Time
	// RetryAfter is zero when Allowed; otherwise the wait after which the same
	// request is admitted if nothing else consumes meanwhile. A cost above the
	// limit can never be admitted: its RetryAfter is the wait to ResetAt.
	RetryAfter time.Duration
}

// Decide applies algorithm a to state st at instant now for a request of the
// given cost, and returns the decision and the state to store when the
// request is consumed (st itself when it is refused). The arguments must pass
// Validate. An instant before the state's own (a clock that went back) counts
// as the state's own instant rather than an earlier one.
func Decide(a Algorithm, st State, now time.Time, cost, limit int64, w Window) (Decision, State) {
	us := now.UnixMicro()
	switch a {
	case SlidingWindow:
		return sliding(st, us, cost, limit, w.Micros())
	case TokenBucket:
		return gcra(st, us, cost, limit, w.Micros())
	default:
		return fixed(st, us, cost, limit, w)
	}
}

// Admit is the part of Decide that the stores reproduce: whether the request
// is admitted and the state after it. Stores return the state they saw and
// their clock, and Decide derives the rest of the answer from them.
func Admit(a Algorithm, st State, now int64, cost, limit int64, w Window) (bool, State) {
	switch a {
	case SlidingWindow:
		ok, next, _ := slidingStep(st, now, cost, limit, w.Micros())
		return ok, next
	case TokenBucket:
		ok, next, _ := gcraStep(st, now, cost, limit, w.Micros())
		return ok, next
	default:
		ok, next, _ := fixedStep(st, now, cost, limit, w)
		return ok, next
	}
}

// retryFrom returns the first instant after now (µs), which refuses, that
// admits. It starts from t0, the instant solved in exact arithmetic, and steps
// over the last microseconds of floating-point rounding after it; and since
// the steps' float sums can round an estimate down and admit before t0 (by a
// tenth of a second for a sliding window near MaxLimit over 30 days), it
// searches back for the first instant that admits. admits must be monotone:
// once it admits, it admits at every later instant.
func retryFrom(now, t0 int64, admits func(int64) bool) int64 {
	t := max(t0, now+1)
	for i := 0; i < 1000 && !admits(t); i++ {
		t++
	}
	if t-1 > now && admits(t-1) {
		lo, hi := now, t-1 // lo refuses, hi admits
		for hi-lo > 1 {
			if m := lo + (hi-lo)/2; admits(m) {
				hi = m
			} else {
				lo = m
			}
		}
		t = hi
	}
	return t
}

// fixedStep counts cost into the window containing now. It returns whether
// the request is admitted, the state after it (the rolled-over state when
// refused) and the window's end.
func fixedStep(st State, now, cost, limit int64, w Window) (bool, State, int64) {
	start, end := w.Bounds(now)
	if st.Start >= start {
		// The same window, or a later one seen by a store whose clock ran ahead.
		start, end = st.Start, w.endOf(st.Start)
	} else {
		st = State{Start: start}
	}
	if st.Count+cost <= limit {
		return true, State{Start: start, Count: st.Count + cost}, end
	}
	return false, st, end
}

func fixed(st State, now, cost, limit int64, w Window) (Decision, State) {
	ok, next, end := fixedStep(st, now, cost, limit, w)
	remaining, reset := fixedLeft(next, end, limit)
	d := Decision{Allowed: ok, Limit: limit, Remaining: remaining, ResetAt: reset}
	if !ok {
		// The next window starts empty; a cost above the limit waits for it too.
		d.RetryAfter = micros(end - now)
		return d, st
	}
	return d, next
}

// fixedLeft is what a fixed window holds: next is rolled over to the window
// that ends at end.
func fixedLeft(next State, end, limit int64) (int64, time.Time) {
	return max(0, limit-next.Count), time.UnixMicro(end).UTC()
}

// endOf returns the end of the window that starts at start.
func (w Window) endOf(start int64) int64 {
	_, end := w.Bounds(start)
	return end
}

// slidingStep is the weighted two-window counter (the "sliding window
// counter"): the estimate at a fraction f into the current window is
//
//	prev·(1−f) + curr
//
// and a request is admitted while estimate + cost ≤ limit. Error bound: at an
// instant a fraction f into its window, the cost admitted in the trailing
// period (now−W, now] is at most limit + f·prev ≤ 2·limit, with prev the
// previous window's admitted cost; it is exact when the previous window's
// traffic was spread evenly, and no aligned window ever admits more than
// limit. It returns the state after the request (rolled over, unconsumed when
// refused) and the estimate after it.
func slidingStep(st State, now, cost, limit, w int64) (bool, State, float64) {
	start := now - now%w
	switch {
	case st.Start >= start:
		start = st.Start
	case st.Start == start-w:
		st = State{Start: start, Prev: st.Count}
	default:
		st = State{Start: start}
	}
	elapsed := max(0, now-start)
	est := slidingEstimate(st.Prev, st.Count, elapsed, w)
	if est+float64(cost) <= float64(limit) {
		st.Count += cost
		return true, st, slidingEstimate(st.Prev, st.Count, elapsed, w)
	}
	return false, st, est
}

// slidingEstimate is the weighted count. The order of operations is part of
// the store protocols: (w−elapsed)/w, times prev, plus curr.
func slidingEstimate(prev, curr, elapsed, w int64) float64 {
	weight := float64(w-elapsed) / float64(w)
	return float64(float64(prev)*weight) + float64(curr)
}

func sliding(st State, now, cost, limit, w int64) (Decision, State) {
	ok, next, est := slidingStep(st, now, cost, limit, w)
	rem, reset := slidingLeft(next, est, limit, w)
	d := Decision{Allowed: ok, Limit: limit, Remaining: rem, ResetAt: reset}
	if ok {
		return d, next
	}
	if cost > limit {
		d.RetryAfter = micros(d.ResetAt.UnixMicro() - now)
		return d, st
	}
	// Solve prev·(w−e)/w + curr + cost ≤ limit for the elapsed time e, in this
	// window or, when curr+cost alone is too much, in the next one (where curr
	// becomes prev).
	var t int64
	if free := limit - next.Count - cost; free >= 0 && next.Prev > 0 {
		t = next.Start + w - int64(math.Floor(float64(free)*float64(w)/float64(next.Prev)))
	} else {
		t = next.Start + w + w - int64(math.Floor(float64(limit-cost)*float64(w)/float64(next.Count)))
	}
	t = retryFrom(now, t, func(t int64) bool {
		ok, _, _ := slidingStep(next, t, cost, limit, w)
		return ok
	})
	d.RetryAfter = micros(t - now)
	return d, st
}

// slidingLeft is what a sliding window holds: next is rolled over to now's
// window and est is its estimate at now.
func slidingLeft(next State, est float64, limit, w int64) (int64, time.Time) {
	// Remaining is the largest cost slidingStep would admit next, tested with
	// its own comparison: a rounding allowance here would overstate it when
	// prev·(1−f) lies just above a whole number.
	rem := remaining(float64(limit)-est, limit, func(c int64) bool {
		return est+float64(c) <= float64(limit)
	})
	// Whole again once the previous window's weight and the current window's
	// count have both rolled out.
	reset := next.Start + w
	if next.Count > 0 {
		reset = next.Start + 2*w
	}
	return rem, time.UnixMicro(reset).UTC()
}

// gcraStep is the generic cell rate algorithm, a token bucket of capacity
// limit refilled at limit per w: each request of cost pushes the theoretical
// arrival time (TAT) forward by cost·w/limit, and is admitted while the TAT
// stays within w of now. Over any period of length t it admits at most
// limit + t·limit/w.
//
// The state keeps the TAT as a float offset (µs) from the integer instant
// Start of the last update, so the float arithmetic stays on small numbers
// and keeps sub-microsecond precision for fast rates. The float64 operations
// and their order are part of the store protocols. It returns the state after
// the request and the TAT offset from now after it (before it when refused).
func gcraStep(st State, now, cost, limit, w int64) (bool, State, float64) {
	now = max(now, st.Start)
	interval := float64(w) / float64(limit)
	off := math.Max(0, st.TAT-float64(now-st.Start))
	next := off + float64(interval*float64(cost))
	if next <= gcraCapacity(w, interval) {
		return true, State{Start: now, TAT: next}, next
	}
	return false, st, off
}

// gcraCapacity is how far the TAT may run ahead of now: the window, plus a
// millionth of one interval (interval/2^20, an exact float division) so that
// w/limit rounded up, summed limit times, still fits: without it a bucket of
// 7 per second refuses a cost of 7 on an empty bucket (7 × 142857.14285714287
// = 1000000.0000000001) and one of 11 per second holds only 10. The slack is
// far below one request for every limit up to MaxLimit.
func gcraCapacity(w int64, interval float64) float64 {
	return float64(w) + interval/1048576
}

func gcra(st State, now, cost, limit, w int64) (Decision, State) {
	ok, next, off := gcraStep(st, now, cost, limit, w)
	// The caller's clock may be behind the state's: the step counts from the
	// state's instant, but the caller waits RetryAfter on its own clock.
	asked := now
	now = max(now, st.Start)
	interval := float64(w) / float64(limit)
	rem, reset := gcraLeft(now, off, limit, w)
	d := Decision{Allowed: ok, Limit: limit, Remaining: rem, ResetAt: reset}
	if ok {
		return d, next
	}
	if cost > limit {
		d.RetryAfter = micros(d.ResetAt.UnixMicro() - asked)
		return d, st
	}
	// Admitted once the TAT has drained to w − cost·interval.
	t := now + int64(math.Ceil(off+float64(interval*float64(cost))-float64(w)))
	t = retryFrom(now, t, func(t int64) bool {
		ok, _, _ := gcraStep(st, t, cost, limit, w)
		return ok
	})
	d.RetryAfter = micros(t - asked)
	return d, st
}

// gcraLeft is what a token bucket holds at instant now (not before the
// state's own) whose TAT runs off µs ahead of it.
func gcraLeft(now int64, off float64, limit, w int64) (int64, time.Time) {
	interval := float64(w) / float64(limit)
	// Capacity left: the largest cost gcraStep would admit next, tested with
	// its own comparison so that a TAT just short of a whole interval of
	// slack does not count that interval.
	rem := remaining((float64(w)-off)/interval, limit, func(c int64) bool {
		return off+float64(interval*float64(c)) <= gcraCapacity(w, interval)
	})
	return rem, time.UnixMicro(now + int64(math.Ceil(off))).UTC()
}

// Left returns what a counter in state st holds at instant now, counting
// nothing: the largest cost from 0 to limit that a request could be admitted
// for at that instant (limit.Admit admits it, and refuses one unit more
// unless it is limit), and when the counter is whole again. For any state
// Decide leaves, Decide's Remaining and ResetAt are Left of that state at
// the same instant. The arguments must pass Validate (any cost).
func Left(a Algorithm, st State, now time.Time, limit int64, w Window) (remaining int64, resetAt time.Time) {
	us := now.UnixMicro()
	switch a {
	case SlidingWindow:
		// A step of no cost rolls the state over without counting; it
		// refuses only a state over the limit (a limit lowered since), and
		// returns its estimate either way.
		_, next, est := slidingStep(st, us, 0, limit, w.Micros())
		return slidingLeft(next, est, limit, w.Micros())
	case TokenBucket:
		us = max(us, st.Start)
		return gcraLeft(us, math.Max(0, st.TAT-float64(us-st.Start)), limit, w.Micros())
	default:
		_, next, end := fixedStep(st, us, 0, limit, w)
		return fixedLeft(next, end, limit)
	}
}

// remaining returns the largest cost from 0 to limit that fits, starting from
// guess, a closed form of it that float rounding can put a unit off either
// way. fits must be monotone (a cost that fits, every smaller one fits); the
// few steps are bounded so that a corrupt state cannot make them long.
func remaining(guess float64, limit int64, fits func(int64) bool) int64 {
	var r int64
	if guess >= 1 { // false for NaN too
		r = int64(math.Floor(math.Min(guess, float64(limit))))
	}
	for i := 0; i < 3 && r < limit && fits(r+1); i++ {
		r++
	}
	for i := 0; i < 3 && r > 0 && !fits(r); i++ {
		r--
	}
	return r
}

// micros converts a non-negative count of microseconds to a Duration.
func micros(us int64) time.Duration {
	return time.Duration(max(0, us)) * time.Microsecond
}

// Expiry returns the Unix microsecond after which st carries no information
// any more (a counter in that state is the same as a new one): stores use it
// to expire keys.
func Expiry(a Algorithm, st State, w Window) int64 {
	switch a {
	case SlidingWindow:
		return st.Start + 2*w.Micros()
	case TokenBucket:
		return st.Start + int64(math.Ceil(st.TAT))
	}
	return w.endOf(st.Start)
}
