package limit

import (
	"math"
	"time"
)

// Adjust returns the state of a counter in state st once delta units are
// added to what it counts at instant now (Unix µs): the settlement of a
// charge made earlier (a reservation, counter.Reserver) whose real cost
// differs from what was charged. charged is the Start of the state the
// charge left (the start of the window it was charged in; a token bucket
// does not read it).
//
// An excess (delta > 0) is counted in now's window as it stands, past the
// limit if need be: the counter is overdrawn (Overdrawn) and refuses until
// it recovers. A give-back (delta < 0) goes only where the charge still
// counts, never below zero: a fixed window's count while it is the window
// charged; a sliding window's current count, or its previous one once
// charged has become the previous window; a token bucket's level, never
// above its capacity. Elsewhere the charge has rolled out already and
// nothing is given back.
//
// The counter stores reproduce it in PL/pgSQL and Lua, in this order of
// floating-point operations. The arguments must pass Validate (any cost).
func Adjust(a Algorithm, st State, now, delta, charged, limit int64, w Window) State {
	switch a {
	case SlidingWindow:
		wl := w.Micros()
		start := now - now%wl
		switch {
		case st.Start >= start:
			// The same window, or a later one seen by a clock that ran ahead.
		case st.Start == start-wl:
			st = State{Start: start, Prev: st.Count}
		default:
			st = State{Start: start}
		}
		switch {
		case delta >= 0:
			st.Count += delta
		case charged == st.Start:
			st.Count = max(0, st.Count+delta)
		case charged == st.Start-wl:
			st.Prev = max(0, st.Prev+delta)
		}
		return st
	case TokenBucket:
		now = max(now, st.Start)
		interval := float64(w.Micros()) / float64(limit)
		off := math.Max(0, st.TAT-float64(now-st.Start))
		// The product is rounded on its own, never fused with the sum, as
		// gcraStep's is.
		off = math.Max(0, off+float64(interval*float64(delta)))
		return State{Start: now, TAT: off}
	default:
		start, _ := w.Bounds(now)
		if st.Start >= start {
			start = st.Start
		} else {
			st = State{Start: start}
		}
		count := st.Count
		switch {
		case delta >= 0:
			count += delta
		case charged == start:
			count = max(0, count+delta)
		}
		return State{Start: start, Count: count}
	}
}

// Overdrawn returns how many units a counter in state st is past its limit
// at instant now, counting nothing: what must roll out or refill before it
// admits anything again, 0 when it is within its limit. Only an excess
// counted by Adjust (or a limit lowered since) overdraws a counter. For a
// sliding window it is the estimate's excess, rounded up.
func Overdrawn(a Algorithm, st State, now time.Time, limit int64, w Window) int64 {
	us := now.UnixMicro()
	switch a {
	case SlidingWindow:
		_, _, est := slidingStep(st, us, 0, limit, w.Micros())
		return over(est - float64(limit))
	case TokenBucket:
		us = max(us, st.Start)
		interval := float64(w.Micros()) / float64(limit)
		off := math.Max(0, st.TAT-float64(us-st.Start))
		return over((off - gcraCapacity(w.Micros(), interval)) / interval)
	default:
		_, next, _ := fixedStep(st, us, 0, limit, w)
		return max(0, next.Count-limit)
	}
}

// over rounds a positive excess up to whole units, 0 for none; an excess
// within a millionth of a unit of a whole number is that number, the rest
// being float rounding.
func over(x float64) int64 {
	if !(x > 1e-6) { // false for NaN too
		return 0
	}
	if r := math.Round(x); math.Abs(x-r) < 1e-6 {
		return int64(r)
	}
	return int64(math.Ceil(x))
}
