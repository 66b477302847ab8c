package countertest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// Model is the plain in-memory reference the stores are held to: limit.Admit
// over a map, deciding requests one after the other, the ceilings as one
// all-or-nothing tier and the whole request as another, advisory items left
// out of both verdicts. It is not safe for concurrent use.
type Model struct{ states map[[2]string]limit.State }

// NewModel returns a model with no counters.
func NewModel() *Model { return &Model{states: map[[2]string]limit.State{}} }

// Check decides req at instant now (req.Now is not read), as a store must.
func (m *Model) Check(req counter.Request, now time.Time) counter.Result {
	return counter.Answer(req, m.decide(req, now), now)
}

// decide counts req at now as Check does and returns what each item saw.
func (m *Model) decide(req counter.Request, now time.Time) []counter.Seen {
	us := now.UnixMicro()
	// work holds the tentative states of the request's keys: every item sees
	// the admitted items before it, ceilings and policies, enforced and
	// advisory alike. A refused item, advisory or not, leaves work as it was.
	work := map[[2]string]limit.State{}
	seen := make([]counter.Seen, len(req.Items))
	decide := func(from, to int) bool {
		all := true
		for i := from; i < to; i++ {
			it := req.Items[i]
			k := [2]string{req.Group, it.Key}
			st, ok := work[k]
			if !ok {
				st = m.states[k]
			}
			admit, next := limit.Admit(it.Algorithm, st, us, it.Cost, it.Limit, it.Window)
			seen[i] = counter.Seen{State: st, Allowed: admit}
			if admit {
				work[k] = next
			}
			all = all && (admit || it.Advisory)
		}
		return all
	}
	ceilingsOK := decide(0, req.Ceilings)
	ceilings := maps.Clone(work)
	policiesOK := decide(req.Ceilings, len(req.Items))
	switch {
	case ceilingsOK && policiesOK && req.Mode == counter.Consume:
		maps.Copy(m.states, work)
	case ceilingsOK:
		maps.Copy(m.states, ceilings)
	}
	return seen
}

func sameResult(t fataler, step int, req counter.Request, got, want counter.Result) {
	t.Helper()
	if got.Allowed != want.Allowed {
		t.Fatalf("step %d %+v: allowed %v, want %v", step, req, got.Allowed, want.Allowed)
	}
	for i := range want.Decisions {
		g, w := got.Decisions[i], want.Decisions[i]
		if g != w {
			t.Fatalf("step %d item %d (%+v at %s):\n got  %+v\n want %+v", step, i, req.Items[i], req.Now.Format(time.RFC3339Nano), g, w)
		}
	}
}

// matchesLimit pushes random streams of requests, with their own clock, any
// number of ceilings and any items advisory, through the store and through
// the model side by side: every decision must be the same, field for field.
// As each decision derives from the state its item saw, a store that writes
// what the model does not shows it at the next use of the key.
func matchesLimit(t *testing.T, b Backend) {
	s := open(t, b)
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		m := NewModel()
		type counterDef struct {
			key  string
			alg  limit.Algorithm
			lim  int64
			win  limit.Window
			cost int64
		}
		var defs []counterDef
		for i := range rapid.IntRange(1, 4).Draw(rt, "counters") {
			alg := limit.Algorithm(rapid.IntRange(1, 3).Draw(rt, "alg"))
			win := limit.Every(rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, time.Minute, 15 * time.Minute, time.Hour, 30 * 24 * time.Hour}).Draw(rt, "window"))
			if alg == limit.FixedWindow && rapid.Bool().Draw(rt, "month") {
				win = drawMonth(rt)
			}
			lim := rapid.OneOf(rapid.Int64Range(1, 20), rapid.Int64Range(1, limit.MaxLimit)).Draw(rt, "limit")
			defs = append(defs, counterDef{key: fmt.Sprintf("k%d", i), alg: alg, lim: lim, win: win})
		}
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(40*24*time.Hour)).Draw(rt, "start")))
		now = now.Truncate(time.Microsecond)
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			// Mostly forward, sometimes far, now and then a little back (a
			// store clock that is behind another's).
			jump := rapid.SampledFrom([]time.Duration{0, time.Microsecond, time.Millisecond, 300 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour, 20 * 24 * time.Hour, -time.Millisecond}).Draw(rt, "jump")
			now = now.Add(jump)
			req := counter.Request{Group: group, Now: now, Mode: counter.Consume}
			if rapid.IntRange(0, 4).Draw(rt, "peek") == 0 {
				req.Mode = counter.Peek
			}
			for range rapid.IntRange(1, 3).Draw(rt, "items") {
				d := defs[rapid.IntRange(0, len(defs)-1).Draw(rt, "which")]
				cost := rapid.OneOf(rapid.Just(int64(1)), rapid.Int64Range(1, d.lim), rapid.Int64Range(1, limit.MaxLimit)).Draw(rt, "cost")
				advisory := rapid.IntRange(0, 2).Draw(rt, "advisory") == 0
				req.Items = append(req.Items, counter.Item{Key: d.key, Algorithm: d.alg, Limit: d.lim, Window: d.win, Cost: cost, Advisory: advisory})
			}
			req.Ceilings = rapid.IntRange(0, len(req.Items)).Draw(rt, "ceilings")
			got := check(rt, s, req)
			want := m.Check(req, now)
			if !got.Now.Equal(now) {
				rt.Fatalf("step %d: store used clock %s, asked for %s", step, got.Now, now)
			}
			sameResult(rt, step, req, got, want)
			// Remaining and ResetAt are what each item's counter holds once
			// the request is done, counted or not.
			for i, it := range req.Items {
				rem, reset := limit.Left(it.Algorithm, m.states[[2]string{group, it.Key}], now, it.Limit, it.Window)
				if d := got.Decisions[i]; d.Remaining != rem || !d.ResetAt.Equal(reset) {
					rt.Fatalf("step %d item %d (%+v): remaining %d, reset %s; the counter holds %d, whole at %s", step, i, it, d.Remaining, d.ResetAt, rem, reset)
				}
			}
		}
	})
}
