package countertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/faultnet"
	"github.com/tollgate/tollgate/internal/limit"
)

// Run runs the conformance suite against backend b.
func Run(t *testing.T, b Backend) {
	t.Run("MatchesLimitOnRandomStreams", func(t *testing.T) { t.Parallel(); matchesLimit(t, b) })
	t.Run("PeekNeverCounts", func(t *testing.T) { t.Parallel(); peekNeverCounts(t, b) })
	t.Run("AllOrNothing", func(t *testing.T) { t.Parallel(); allOrNothing(t, b) })
	t.Run("RemainingIsWhatIsLeft", func(t *testing.T) { t.Parallel(); remainingIsLeft(t, b) })
	t.Run("SameKeyTwiceInOneRequest", func(t *testing.T) { t.Parallel(); sameKeyTwice(t, b) })
	t.Run("CeilingsConsumedWhenAPolicyRefuses", func(t *testing.T) { t.Parallel(); ceilingsWithoutPolicies(t, b) })
	t.Run("CeilingRefusalConsumesNothing", func(t *testing.T) { t.Parallel(); ceilingRefuses(t, b) })
	t.Run("PeekConsumesCeilingsOnly", func(t *testing.T) { t.Parallel(); peekWithCeilings(t, b) })
	t.Run("CeilingAndPolicyOnOneKey", func(t *testing.T) { t.Parallel(); ceilingAndPolicyOnOneKey(t, b) })
	t.Run("AdvisoryRefusalDoesNotBlock", func(t *testing.T) { t.Parallel(); advisoryRefuses(t, b) })
	t.Run("AdvisoryNotConsumedWhenItsTierFails", func(t *testing.T) { t.Parallel(); advisoryTierFails(t, b) })
	t.Run("AdvisoryCeilingRefusalKeepsCeilings", func(t *testing.T) { t.Parallel(); advisoryCeilingRefuses(t, b) })
	t.Run("AdvisoryConsumedWhenItsTierIs", func(t *testing.T) { t.Parallel(); advisoryConsumed(t, b) })
	t.Run("WindowsRollOver", func(t *testing.T) { t.Parallel(); windowsRollOver(t, b) })
	t.Run("ServerClock", func(t *testing.T) { t.Parallel(); serverClock(t, b) })
	t.Run("GroupsAreSeparate", func(t *testing.T) { t.Parallel(); groupsAreSeparate(t, b) })
	t.Run("InvalidRequests", func(t *testing.T) { t.Parallel(); invalidRequests(t, b) })
	t.Run("EdgesOfValidRequests", func(t *testing.T) { t.Parallel(); edgesOfValid(t, b) })
	t.Run("TwentyGoroutinesLimitTen", func(t *testing.T) { t.Parallel(); twentyGoroutines(t, b) })
	t.Run("ThreeInstancesOneStore", func(t *testing.T) { t.Parallel(); threeInstances(t, b) })
	t.Run("ThreeInstancesCeilingAndPolicy", func(t *testing.T) { t.Parallel(); threeInstancesCeilings(t, b) })
	t.Run("ThreeInstancesAdvisory", func(t *testing.T) { t.Parallel(); threeInstancesAdvisory(t, b) })
	runLeases(t, b)
	if b.Breakable != nil {
		t.Run("Unavailable", func(t *testing.T) { unavailable(t, b) })
	}
}

// open returns one store on a fresh namespace, closed when the test ends.
func open(t *testing.T, b Backend) counter.Store {
	t.Helper()
	return opener(t, b)()
}

// opener returns a function opening independent instances on one fresh
// namespace; every instance is closed when the test ends.
func opener(t *testing.T, b Backend) func() counter.Store {
	t.Helper()
	newStore := b.Shared(t)
	var once sync.Map
	return func() counter.Store {
		s := newStore()
		if _, dup := once.LoadOrStore(s, true); !dup {
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close store: %v", err)
				}
			})
		}
		return s
	}
}

// fataler is what check needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func check(t fataler, s counter.Store, req counter.Request) counter.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Check(ctx, req)
	if err != nil {
		t.Fatalf("check %+v: %v", req, err)
	}
	if len(res.Decisions) != len(req.Items) {
		t.Fatalf("check: %d decisions for %d items", len(res.Decisions), len(req.Items))
	}
	return res
}

// base is the start of the streams that bring their own clock: mid-month, in
// 2026, microsecond precision as every store keeps.
var base = time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)

// Model is the plain in-memory reference the stores are held to: limit.Admit
// over a map, deciding requests one after the other, the ceilings as one
// all-or-nothing tier and the whole request as another, advisory items left
// out of both verdicts. It is not safe for concurrent use.
type Model struct{ states map[[2]string]limit.State }

// NewModel returns a model with no counters.
func NewModel() *Model { return &Model{states: map[[2]string]limit.State{}} }

// Check decides req at instant now (req.Now is not read), as a store must.
func (m *Model) Check(req counter.Request, now time.Time) counter.Result {
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
	return counter.Answer(req, seen, now)
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
				win = limit.Month
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

func item(key string, alg limit.Algorithm, lim int64, w limit.Window) counter.Item {
	return counter.Item{Key: key, Algorithm: alg, Limit: lim, Window: w, Cost: 1}
}

var algorithms = []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}

func peekNeverCounts(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			it := item("peek-"+alg.String(), alg, 3, limit.Every(time.Hour))
			for i := range 10 {
				res := check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{it}, Now: base})
				if !res.Allowed || res.Decisions[0].Remaining != 3 {
					t.Fatalf("peek %d: allowed %v remaining %d, want true 3", i, res.Allowed, res.Decisions[0].Remaining)
				}
			}
			for i := range 3 {
				res := check(t, s, counter.Request{Items: []counter.Item{it}, Now: base})
				if !res.Allowed || res.Decisions[0].Remaining != int64(2-i) {
					t.Fatalf("consume %d after peeks: allowed %v remaining %d, want true %d", i, res.Allowed, res.Decisions[0].Remaining, 2-i)
				}
			}
			res := check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{it}, Now: base})
			if res.Allowed || res.Decisions[0].RetryAfter <= 0 {
				t.Fatalf("peek when spent: allowed %v retry %s, want refused with a retry", res.Allowed, res.Decisions[0].RetryAfter)
			}
		})
	}
}

func allOrNothing(t *testing.T, b Backend) {
	s := open(t, b)
	w := limit.Every(time.Hour)
	wide, narrow := item("wide", limit.FixedWindow, 5, w), item("narrow", limit.TokenBucket, 1, w)
	if res := check(t, s, counter.Request{Items: []counter.Item{wide, narrow}, Now: base}); !res.Allowed {
		t.Fatalf("first batch refused: %+v", res)
	}
	res := check(t, s, counter.Request{Items: []counter.Item{wide, narrow}, Now: base})
	if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed || res.Decisions[0].Remaining != 4 {
		t.Fatalf("second batch: got %+v, want refused by the narrow item only, the wide one with its 4 left", res)
	}
	// The refused batch consumed nothing from the item that allowed.
	res = check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{wide}, Now: base})
	if got := res.Decisions[0].Remaining; got != 4 {
		t.Fatalf("wide remaining after a refused batch: got %d, want 4", got)
	}
}

// remainingIsLeft: an item's Remaining is what its counter holds once the
// request is done, what a consume of cost 1 to Remaining would be admitted
// for: after the request when it counted, untouched when it did not (a peek,
// a refused request), whatever the other items on the same key did
// tentatively.
func remainingIsLeft(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			counterOf := func(name string, lim int64) counter.Item { return item(name+"-"+alg.String(), alg, lim, w) }
			want := func(what string, res counter.Result, verdicts string, remaining ...int64) {
				t.Helper()
				got := make([]int64, len(res.Decisions))
				for i, d := range res.Decisions {
					got[i] = d.Remaining
				}
				if g := allowed(res); g != verdicts || fmt.Sprint(got) != fmt.Sprint(remaining) {
					t.Fatalf("%s: allowed (request, items) %s, remaining %v; want %s, %v", what, g, got, verdicts, remaining)
				}
			}

			// A peek on a new counter of 3: all 3 are left.
			fresh := counterOf("fresh", 3)
			want("peek on a new counter of 3", check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{fresh}, Now: base}), "[true true]", 3)
			fresh.Cost = 4
			want("peek of cost 4 on it", check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{fresh}, Now: base}), "[false false]", 3)

			// A limit of 5 and one earlier call: a check refused by another
			// item leaves the 4 where they were.
			wide, spent := counterOf("wide", 5), counterOf("spent", 1)
			want("first call of 5", check(t, s, counter.Request{Items: []counter.Item{wide}, Now: base}), "[true true]", 4)
			want("spending a counter of 1", check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}), "[true true]", 0)
			want("refused by the spent item", check(t, s, counter.Request{Items: []counter.Item{wide, spent}, Now: base}), "[false true false]", 4, 0)
			want("peek after it", check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{wide}, Now: base}), "[true true]", 4)

			// Two items on one key: the second is decided after the first's
			// tentative 2, but nothing counted, so both have the 5 left.
			twice := counterOf("twice", 5)
			twice.Cost = 2
			want("2 and 2 of 5, refused by the spent item", check(t, s, counter.Request{Items: []counter.Item{twice, twice, spent}, Now: base}), "[false true true false]", 5, 5, 0)
			want("2 and 2 of 5 in a peek", check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{twice, twice}, Now: base}), "[true true true]", 5, 5)
			// Counted, both have what the request left.
			want("2 and 2 of 5 counted", check(t, s, counter.Request{Items: []counter.Item{twice, twice}, Now: base}), "[true true true]", 1, 1)

			// The ceilings count when a policy refuses: a ceiling has what it
			// left, the policy that allowed what it had.
			ceiling := counterOf("ceiling", 10)
			want("ceiling, then a policy refused", check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, wide, spent}, Now: base}), "[false true true false]", 9, 4, 0)
			// A ceiling that refuses counts nothing, not even the ceiling
			// that allowed.
			want("a ceiling refused", check(t, s, counter.Request{Ceilings: 2, Items: []counter.Item{ceiling, spent, wide}, Now: base}), "[false true false true]", 9, 0, 4)
			// A peek counts its ceilings.
			want("peek with a ceiling", check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 1, Items: []counter.Item{ceiling, wide}, Now: base}), "[true true true]", 8, 4)
		})
	}
}

func sameKeyTwice(t *testing.T, b Backend) {
	s := open(t, b)
	it := item("twice", limit.FixedWindow, 3, limit.Every(time.Minute))
	it.Cost = 2
	res := check(t, s, counter.Request{Items: []counter.Item{it, it}, Now: base})
	if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed || res.Decisions[0].Remaining != 3 || res.Decisions[1].Remaining != 3 {
		t.Fatalf("2+2 on a limit of 3: got %+v, want the second item refused, both with the 3 left", res)
	}
	it.Cost = 1
	res = check(t, s, counter.Request{Items: []counter.Item{it, it, it}, Now: base})
	if !res.Allowed || res.Decisions[0].Remaining != 0 || res.Decisions[1].Remaining != 0 || res.Decisions[2].Remaining != 0 {
		t.Fatalf("1+1+1 on a limit of 3: got %+v, want allowed, remaining 0 for each", res)
	}
}

// remaining peeks at it with cost 1, no ceilings and not advisory, and
// returns what the peek answers: what is left (0 when the peek refuses).
func remaining(t *testing.T, s counter.Store, it counter.Item) int64 {
	t.Helper()
	it.Cost, it.Advisory = 1, false
	res := check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{it}, Now: base})
	if res.Allowed != (res.Decisions[0].Remaining > 0) {
		t.Fatalf("peek of cost 1 on %s: allowed %v with remaining %d", it.Key, res.Allowed, res.Decisions[0].Remaining)
	}
	return res.Decisions[0].Remaining
}

// ceilingsWithoutPolicies refuses a request by one of its policies: its
// ceilings are consumed all the same, its policies (the one that allowed
// too) are not.
func ceilingsWithoutPolicies(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip, quota := item("ip-"+alg.String(), alg, 10, w), item("quota-"+alg.String(), alg, 10, w)
			spare, spent := item("spare-"+alg.String(), alg, 5, w), item("spent-"+alg.String(), alg, 1, w)
			if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
				t.Fatalf("spending the policy: refused %+v", res)
			}
			req := counter.Request{Ceilings: 2, Items: []counter.Item{ip, quota, spare, spent}, Now: base}
			for i := range 3 {
				res := check(t, s, req)
				got := []bool{res.Allowed, res.Decisions[0].Allowed, res.Decisions[1].Allowed, res.Decisions[2].Allowed, res.Decisions[3].Allowed}
				if want := []bool{false, true, true, true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("request %d: allowed (request, items) %v, want %v", i, got, want)
				}
			}
			// Three ceilings consumed, and the peek's own.
			for _, it := range []counter.Item{ip, quota} {
				if got := remaining(t, s, it); got != 7 {
					t.Errorf("ceiling %s after 3 requests refused by a policy: peek remaining %d, want 7", it.Key, got)
				}
			}
			if got := remaining(t, s, spare); got != 5 {
				t.Errorf("policy that allowed, in 3 refused requests: peek remaining %d, want 5 (untouched)", got)
			}
			if got := remaining(t, s, spent); got != 0 {
				t.Errorf("policy that refused: peek remaining %d, want 0", got)
			}
		})
	}
}

// ceilingRefuses refuses a request by one of its ceilings, in either mode:
// nothing is consumed, not even the ceilings that allowed.
func ceilingRefuses(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip, quota, policy := item("ip-"+alg.String(), alg, 10, w), item("quota-"+alg.String(), alg, 1, w), item("policy-"+alg.String(), alg, 5, w)
			if res := check(t, s, counter.Request{Items: []counter.Item{quota}, Now: base}); !res.Allowed {
				t.Fatalf("spending the quota: refused %+v", res)
			}
			for _, mode := range []counter.Mode{counter.Consume, counter.Peek} {
				res := check(t, s, counter.Request{Mode: mode, Ceilings: 2, Items: []counter.Item{ip, quota, policy}, Now: base})
				got := []bool{res.Allowed, res.Decisions[0].Allowed, res.Decisions[1].Allowed, res.Decisions[2].Allowed}
				if want := []bool{false, true, false, true}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("mode %d: allowed (request, items) %v, want %v", mode, got, want)
				}
			}
			if got := remaining(t, s, ip); got != 10 {
				t.Errorf("ceiling that allowed beside one that refused: peek remaining %d, want 10 (untouched)", got)
			}
			if got := remaining(t, s, policy); got != 5 {
				t.Errorf("policy behind a refusing ceiling: peek remaining %d, want 5 (untouched)", got)
			}
		})
	}
}

// peekWithCeilings peeks with ceilings: the ceilings are consumed, the
// policies are not; with every item a ceiling, every item is consumed.
func peekWithCeilings(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip, policy := item("ip-"+alg.String(), alg, 10, w), item("policy-"+alg.String(), alg, 5, w)
			res := check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 1, Items: []counter.Item{ip, policy}, Now: base})
			if !res.Allowed || res.Decisions[0].Remaining != 9 || res.Decisions[1].Remaining != 5 {
				t.Fatalf("peek with a ceiling: got %+v, want allowed, remaining 9 (counted) and 5 (not)", res)
			}
			if got := remaining(t, s, ip); got != 9 {
				t.Errorf("ceiling after a peek: peek remaining %d, want 9 (consumed once)", got)
			}
			if got := remaining(t, s, policy); got != 5 {
				t.Errorf("policy after a peek: peek remaining %d, want 5 (untouched)", got)
			}
			check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 2, Items: []counter.Item{ip, policy}, Now: base})
			if got := []int64{remaining(t, s, ip), remaining(t, s, policy)}; got[0] != 8 || got[1] != 4 {
				t.Errorf("after a peek whose items are all ceilings: peek remaining %v, want [8 4]", got)
			}
		})
	}
}

// ceilingAndPolicyOnOneKey names one key as a ceiling and as a policy: the
// policy sees what the ceiling took, and when the request keeps its
// ceilings alone, the key keeps the ceiling's consumption alone, even when
// the policy on it allowed.
func ceilingAndPolicyOnOneKey(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			ceiling := item("both-"+alg.String(), alg, 10, limit.Every(time.Hour))
			policy := ceiling
			spent := item("spent-"+alg.String(), alg, 1, limit.Every(time.Hour))
			if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
				t.Fatalf("spending a policy: refused %+v", res)
			}

			ceiling.Cost, policy.Cost = 6, 6
			res := check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy}, Now: base})
			if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
				t.Fatalf("6 then 6 on a limit of 10: got %+v, want the policy refused", res)
			}
			if got := remaining(t, s, ceiling); got != 4 {
				t.Fatalf("after the policy refused: peek remaining %d, want 4 (the ceiling's 6 consumed)", got)
			}

			ceiling.Cost, policy.Cost = 1, 1
			res = check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy, spent}, Now: base})
			if res.Allowed || !res.Decisions[0].Allowed || !res.Decisions[1].Allowed || res.Decisions[0].Remaining != 3 || res.Decisions[1].Remaining != 3 || res.Decisions[2].Allowed {
				t.Fatalf("1 then 1 on the 4 left, then a spent policy: got %+v, want both allowed, both with the 3 the ceiling left, the spent one refused", res)
			}
			if got := remaining(t, s, ceiling); got != 3 {
				t.Fatalf("after another policy refused: peek remaining %d, want 3 (the ceiling's 1 consumed, not the policy's)", got)
			}

			ceiling.Cost, policy.Cost = 1, 2
			if res := check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy}, Now: base}); !res.Allowed || res.Decisions[1].Remaining != 0 {
				t.Fatalf("1 then 2 on the 3 left: got %+v, want allowed, remaining 0", res)
			}
			if got := remaining(t, s, ceiling); got != 0 {
				t.Fatalf("after both were consumed: peek remaining %d, want 0", got)
			}
		})
	}
}

// advisory returns it marked advisory, as a shadow policy's item is.
func advisory(it counter.Item) counter.Item {
	it.Advisory = true
	return it
}

// allowed lists a result's verdicts: the request's, then each item's.
func allowed(res counter.Result) string {
	got := []bool{res.Allowed}
	for _, d := range res.Decisions {
		got = append(got, d.Allowed)
	}
	return fmt.Sprint(got)
}

// advisoryRefuses puts an enforced item that allows and an advisory one that
// refuses in the policies' tier: the request is allowed and the enforced item
// consumed; the advisory item's decision says it refused, its counter is
// untouched, and a later item on its key sees nothing of it.
func advisoryRefuses(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			enforced := item("enforced-"+alg.String(), alg, 5, w)
			shadow := item("shadow-"+alg.String(), alg, 3, w)
			shadow.Cost = 2
			if res := check(t, s, counter.Request{Items: []counter.Item{shadow}, Now: base}); !res.Allowed {
				t.Fatalf("spending 2 of the shadow policy's 3: refused %+v", res)
			}

			res := check(t, s, counter.Request{Items: []counter.Item{enforced, advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true true false]"; got != want {
				t.Fatalf("enforced that allows, advisory that refuses: allowed (request, items) %s, want %s", got, want)
			}
			if d := res.Decisions[1]; d.RetryAfter <= 0 || d.Remaining != 1 {
				t.Fatalf("advisory item's decision: %+v, want a refusal with a retry and the 1 left remaining", d)
			}
			if got := remaining(t, s, enforced); got != 4 {
				t.Errorf("enforced item: peek remaining %d, want 4 (consumed once)", got)
			}
			if got := remaining(t, s, shadow); got != 1 {
				t.Errorf("advisory item that refused: peek remaining %d, want 1 (untouched)", got)
			}

			// A later item on the advisory item's key sees the 1 left, not a
			// consumption of the refused item.
			later := item(shadow.Key, alg, 3, w)
			res = check(t, s, counter.Request{Items: []counter.Item{advisory(shadow), later}, Now: base})
			if got, want := allowed(res), "[true false true]"; got != want || res.Decisions[1].Remaining != 0 {
				t.Fatalf("refused advisory item, then an item of cost 1 on its key: allowed (request, items) %s, remaining %d; want %s, remaining 0", got, res.Decisions[1].Remaining, want)
			}
			if got := remaining(t, s, shadow); got != 0 {
				t.Errorf("after the later item: peek remaining %d, want 0", got)
			}

			// A request of advisory items alone is allowed, whatever they answer.
			res = check(t, s, counter.Request{Items: []counter.Item{advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true false]"; got != want {
				t.Fatalf("one advisory item that refuses: allowed (request, items) %s, want %s", got, want)
			}
		})
	}
}

// advisoryTierFails puts an advisory item that allows beside an enforced one
// that refuses, in the policies' tier and in the ceilings': the tier fails,
// and neither is consumed.
func advisoryTierFails(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		for _, ceilings := range []int{0, 2} {
			t.Run(fmt.Sprint(alg, "/ceilings=", ceilings), func(t *testing.T) {
				w := limit.Every(time.Hour)
				suffix := fmt.Sprint(alg, "-", ceilings)
				shadow, spent := item("shadow-"+suffix, alg, 5, w), item("spent-"+suffix, alg, 1, w)
				if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
					t.Fatalf("spending the enforced item: refused %+v", res)
				}
				res := check(t, s, counter.Request{Ceilings: ceilings, Items: []counter.Item{advisory(shadow), spent}, Now: base})
				if got, want := allowed(res), "[false true false]"; got != want {
					t.Fatalf("advisory that allows, enforced that refuses: allowed (request, items) %s, want %s", got, want)
				}
				if got := remaining(t, s, shadow); got != 5 {
					t.Errorf("advisory item in a failed tier: peek remaining %d, want 5 (untouched)", got)
				}
				if got := remaining(t, s, spent); got != 0 {
					t.Errorf("enforced item that refused: peek remaining %d, want 0", got)
				}
			})
		}
	}
}

// advisoryCeilingRefuses puts an advisory item that refuses among the
// ceilings: the ceilings are kept all the same, without it, in either mode,
// and whether the policies are kept or not.
func advisoryCeilingRefuses(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip := item("ip-"+alg.String(), alg, 10, w)
			shadow := item("shadow-"+alg.String(), alg, 3, w)
			shadow.Cost = 2
			spare, spent := item("spare-"+alg.String(), alg, 5, w), item("spent-"+alg.String(), alg, 1, w)
			for _, it := range []counter.Item{shadow, spent} {
				if res := check(t, s, counter.Request{Items: []counter.Item{it}, Now: base}); !res.Allowed {
					t.Fatalf("spending %s: refused %+v", it.Key, res)
				}
			}

			// A policy refuses: the ceilings alone are kept.
			res := check(t, s, counter.Request{Ceilings: 2, Items: []counter.Item{ip, advisory(shadow), spare, spent}, Now: base})
			if got, want := allowed(res), "[false true false true false]"; got != want {
				t.Fatalf("advisory ceiling that refuses, a policy that refuses: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, ip), remaining(t, s, shadow), remaining(t, s, spare)}; fmt.Sprint(got) != "[9 1 5]" {
				t.Fatalf("after a request refused by a policy: peek remaining (ceiling, advisory ceiling, policy) %v, want [9 1 5]: the enforced ceiling alone consumed", got)
			}

			// Every policy allows: the request is kept but for the advisory
			// ceiling.
			res = check(t, s, counter.Request{Ceilings: 2, Items: []counter.Item{ip, advisory(shadow), spare}, Now: base})
			if got, want := allowed(res), "[true true false true]"; got != want {
				t.Fatalf("advisory ceiling that refuses, policies that allow: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, ip), remaining(t, s, shadow), remaining(t, s, spare)}; fmt.Sprint(got) != "[8 1 4]" {
				t.Fatalf("after an allowed request: peek remaining (ceiling, advisory ceiling, policy) %v, want [8 1 4]", got)
			}

			// A peek keeps the ceilings, the advisory one aside.
			res = check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 2, Items: []counter.Item{ip, advisory(shadow), spare}, Now: base})
			if got, want := allowed(res), "[true true false true]"; got != want {
				t.Fatalf("peek: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, ip), remaining(t, s, shadow), remaining(t, s, spare)}; fmt.Sprint(got) != "[7 1 4]" {
				t.Fatalf("after a peek: peek remaining (ceiling, advisory ceiling, policy) %v, want [7 1 4]", got)
			}
		})
	}
}

// advisoryConsumed checks that an advisory item that allows is consumed
// whenever its tier is: beside an enforced policy that allows, as a ceiling
// when a policy refuses, and as a ceiling of a peek; and not as a policy of
// a peek.
func advisoryConsumed(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			enforced := item("enforced-"+alg.String(), alg, 5, w)
			shadow, shadowCeiling := item("shadow-"+alg.String(), alg, 5, w), item("shadow-ceiling-"+alg.String(), alg, 5, w)
			spent := item("spent-"+alg.String(), alg, 1, w)
			if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
				t.Fatalf("spending a policy: refused %+v", res)
			}

			res := check(t, s, counter.Request{Items: []counter.Item{enforced, advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true true true]"; got != want {
				t.Fatalf("enforced and advisory that allow: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, enforced), remaining(t, s, shadow)}; fmt.Sprint(got) != "[4 4]" {
				t.Fatalf("after both allowed: peek remaining (enforced, advisory) %v, want [4 4]: both consumed", got)
			}

			res = check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{advisory(shadowCeiling), spent}, Now: base})
			if got, want := allowed(res), "[false true false]"; got != want {
				t.Fatalf("advisory ceiling, spent policy: allowed (request, items) %s, want %s", got, want)
			}
			if got := remaining(t, s, shadowCeiling); got != 4 {
				t.Fatalf("advisory ceiling kept beside a refusing policy: peek remaining %d, want 4 (consumed)", got)
			}

			res = check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 1, Items: []counter.Item{advisory(shadowCeiling), advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true true true]"; got != want {
				t.Fatalf("peek of an advisory ceiling and policy: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, shadowCeiling), remaining(t, s, shadow)}; fmt.Sprint(got) != "[3 4]" {
				t.Fatalf("after the peek: peek remaining (advisory ceiling, advisory policy) %v, want [3 4]: the ceiling alone consumed", got)
			}
		})
	}
}

func windowsRollOver(t *testing.T, b Backend) {
	s := open(t, b)
	cases := []struct {
		alg  limit.Algorithm
		win  limit.Window
		next time.Time // an instant at which a full counter admits again
	}{
		{limit.FixedWindow, limit.Every(time.Minute), base.Truncate(time.Minute).Add(time.Minute)},
		{limit.FixedWindow, limit.Month, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{limit.SlidingWindow, limit.Every(time.Minute), base.Truncate(time.Minute).Add(2 * time.Minute)},
		{limit.TokenBucket, limit.Every(time.Minute), base.Add(12 * time.Second)},
	}
	for _, c := range cases {
		t.Run(c.alg.String()+"/"+c.win.String(), func(t *testing.T) {
			it := item("roll-"+c.alg.String()+c.win.String(), c.alg, 10, c.win)
			var last counter.Result
			for range 10 {
				last = check(t, s, counter.Request{Items: []counter.Item{it}, Now: base})
			}
			if !last.Allowed {
				t.Fatalf("10th of 10 refused: %+v", last)
			}
			last = check(t, s, counter.Request{Items: []counter.Item{it}, Now: base})
			if last.Allowed {
				t.Fatalf("11th of 10 allowed")
			}
			retry := base.Add(last.Decisions[0].RetryAfter)
			if retry.After(c.next) {
				t.Fatalf("retry at %s, after %s", retry, c.next)
			}
			if res := check(t, s, counter.Request{Items: []counter.Item{it}, Now: retry}); !res.Allowed {
				t.Fatalf("at retry_after (%s): refused %+v", retry, res)
			}
			if res := check(t, s, counter.Request{Items: []counter.Item{it}, Now: c.next}); !res.Allowed {
				t.Fatalf("in the next window (%s): refused %+v", c.next, res)
			}
		})
	}
}

// serverClock checks a store that uses its server's clock: it reads a time
// close to ours, and its windows are that time's.
func serverClock(t *testing.T, b Backend) {
	s := open(t, b)
	it := item("clock", limit.FixedWindow, 1, limit.Every(time.Hour))
	before := time.Now()
	res := check(t, s, counter.Request{Items: []counter.Item{it}})
	after := time.Now()
	if res.Now.Before(before.Add(-2*time.Second)) || res.Now.After(after.Add(2*time.Second)) {
		t.Fatalf("store clock %s, outside [%s, %s] ± 2s", res.Now, before, after)
	}
	_, end := limit.Every(time.Hour).Bounds(res.Now.UnixMicro())
	if got := res.Decisions[0].ResetAt; got.UnixMicro() != end {
		t.Fatalf("reset_at %s, want the end of the store clock's hour %s", got, time.UnixMicro(end).UTC())
	}
	if res := check(t, s, counter.Request{Items: []counter.Item{it}}); res.Allowed && time.Now().Before(time.UnixMicro(end)) {
		t.Fatalf("second of 1 allowed within the hour")
	}
}

func groupsAreSeparate(t *testing.T, b Backend) {
	s := open(t, b)
	it := item("shared-name", limit.FixedWindow, 1, limit.Every(time.Hour))
	for _, g := range []string{"tenant-a", "tenant-b", "", "_", "-"} {
		if res := check(t, s, counter.Request{Group: g, Items: []counter.Item{it}, Now: base}); !res.Allowed {
			t.Fatalf("group %q: first use refused: another group's counter moved it", g)
		}
	}
}

func invalidRequests(t *testing.T, b Backend) {
	s := open(t, b)
	ok := item("k", limit.FixedWindow, 1, limit.Every(time.Minute))
	bad := map[string]counter.Request{
		"no items":       {},
		"empty key":      {Items: []counter.Item{{Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Minute), Cost: 1}}},
		"zero cost":      {Items: []counter.Item{{Key: "k", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Minute)}}},
		"month sliding":  {Items: []counter.Item{{Key: "k", Algorithm: limit.SlidingWindow, Limit: 1, Window: limit.Month, Cost: 1}}},
		"too many items": {Items: make([]counter.Item, counter.MaxItems+1)},
		"bad mode":       {Mode: 9, Items: []counter.Item{ok}},

		"negative ceilings":    {Ceilings: -1, Items: []counter.Item{ok}},
		"more ceilings":        {Ceilings: 2, Items: []counter.Item{ok}},
		"group of 65 bytes":    {Group: strings.Repeat("g", counter.MaxGroupLen+1), Items: []counter.Item{ok}},
		"group with a slash":   {Group: "tenant/a", Items: []counter.Item{ok}},
		"group with a brace":   {Group: "tenant}a", Items: []counter.Item{ok}},
		"group with a colon":   {Group: "1:a", Items: []counter.Item{ok}},
		"group with a space":   {Group: "tenant a", Items: []counter.Item{ok}},
		"group with a NUL":     {Group: "tenant\x00", Items: []counter.Item{ok}},
		"group not ASCII":      {Group: "ténant", Items: []counter.Item{ok}},
		"group not UTF-8":      {Group: "\xff", Items: []counter.Item{ok}},
		"now before 1970":      {Items: []counter.Item{ok}, Now: time.Unix(0, 0).Add(-time.Microsecond)},
		"now long before 1970": {Items: []counter.Item{ok}, Now: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)},
		"now 2200":             {Items: []counter.Item{ok}, Now: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)},
		"now 2^53 µs":          {Items: []counter.Item{ok}, Now: time.UnixMicro(1 << 53)},
		"now 2200 in UTC+1":    {Items: []counter.Item{ok}, Now: time.Date(2200, 1, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600))},
		"now past int64 µs":    {Items: []counter.Item{ok}, Now: time.Unix(18446744073710, 0)}, // UnixMicro wraps round into 1970
	}
	for name, req := range bad {
		_, err := s.Check(context.Background(), req)
		if !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// edgesOfValid sends requests at the edges of what Validate accepts: the
// longest group of every kind of byte it allows, the first and last
// instants, every item a ceiling. Each is a first use, so each is allowed.
func edgesOfValid(t *testing.T, b Backend) {
	s := open(t, b)
	long := strings.Repeat("AZaz09_-", counter.MaxGroupLen/8)
	first := time.Unix(0, 0)
	last := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Microsecond)
	fixedMonth := counter.Item{Key: "edge", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Month, Cost: 1}
	for i, req := range []counter.Request{
		{Group: long, Items: []counter.Item{item("edge", limit.FixedWindow, 1, limit.Every(time.Hour))}, Now: base},
		{Group: "0b3f5c1e-6f3a-4a7e-9d2c-5b8e1f0a9c42", Items: []counter.Item{fixedMonth}, Now: base},
		{Group: "first", Items: []counter.Item{fixedMonth, item("edge-sliding", limit.SlidingWindow, 1, limit.Every(time.Minute)), item("edge-bucket", limit.TokenBucket, 1, limit.Every(time.Minute))}, Now: first},
		{Group: "last", Items: []counter.Item{fixedMonth, item("edge-sliding", limit.SlidingWindow, 1, limit.Every(time.Minute)), item("edge-bucket", limit.TokenBucket, 1, limit.Every(time.Minute))}, Now: last},
		{Group: "ceilings", Ceilings: 2, Items: []counter.Item{fixedMonth, item("edge-2", limit.TokenBucket, 1, limit.Every(time.Minute))}, Now: base},
	} {
		res := check(t, s, req)
		if !res.Allowed {
			t.Errorf("request %d (group %q at %s): refused %+v", i, req.Group, req.Now.Format(time.RFC3339Nano), res)
		}
		if !res.Now.Equal(req.Now) {
			t.Errorf("request %d: store used clock %s, asked for %s", i, res.Now.Format(time.RFC3339Nano), req.Now.Format(time.RFC3339Nano))
		}
	}
	// The month of the last instant ends at 2200: the reset says so.
	res := check(t, s, counter.Request{Group: "last", Mode: counter.Peek, Items: []counter.Item{fixedMonth}, Now: last})
	if want := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC); res.Allowed || !res.Decisions[0].ResetAt.Equal(want) {
		t.Errorf("month of %s: got %+v, want refused, reset at %s", last, res, want)
	}
}

func twentyGoroutines(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		it := item("twenty-"+alg.String(), alg, 10, limit.Every(30*24*time.Hour))
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if check(t, s, counter.Request{Items: []counter.Item{it}}).Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 10 {
			t.Errorf("%s: 20 goroutines at limit 10: %d allowed, want 10", alg, got)
		}
	}
}

// threeInstances races 1,000 requests through three independent store
// instances on one namespace, as three Tollgate servers would.
func threeInstances(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	for _, alg := range algorithms {
		it := item("three-"+alg.String(), alg, 100, limit.Every(30*24*time.Hour))
		var allowed atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range 1000 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				req := counter.Request{Items: []counter.Item{it}}
				if i%7 == 0 {
					// A second item of its own keeps batches mixed.
					req.Items = append(req.Items, item(fmt.Sprintf("own-%s-%d", alg, i), alg, 5, limit.Every(time.Hour)))
				}
				if check(t, stores[i%3], req).Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Errorf("%s: 1,000 requests over 3 instances at limit 100: %d allowed, want 100", alg, got)
		}
	}
}

// threeInstancesCeilings races 1,000 requests of a ceiling and a policy
// through three store instances on one namespace: the policy admits exactly
// its limit, and the ceiling counts every request, refused by the policy or
// not.
func threeInstancesCeilings(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	const requests = 1000
	for _, alg := range algorithms {
		ceiling := item("ceiling-"+alg.String(), limit.FixedWindow, 1_000_000, limit.Every(30*24*time.Hour))
		policy := item("policy-"+alg.String(), alg, 100, limit.Every(30*24*time.Hour))
		var allowed, ceilingRefused atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range requests {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				res := check(t, stores[i%3], counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy}})
				if res.Allowed {
					allowed.Add(1)
				}
				if !res.Decisions[0].Allowed {
					ceilingRefused.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Errorf("%s: %d requests over 3 instances, policy at limit 100: %d allowed, want 100", alg, requests, got)
		}
		if got := ceilingRefused.Load(); got != 0 {
			t.Errorf("%s: the ceiling refused %d requests, want none", alg, got)
		}
		res := check(t, stores[0], counter.Request{Mode: counter.Peek, Items: []counter.Item{ceiling}})
		// Every request consumed the ceiling; the peek counts nothing.
		if got, want := res.Decisions[0].Remaining, int64(1_000_000-requests); got != want {
			t.Errorf("%s: ceiling after %d requests: peek remaining %d, want %d (%d consumed)", alg, requests, got, want, 1_000_000-got)
		}
	}
}

// threeInstancesAdvisory races 1,000 requests of an enforced item that
// always allows and an advisory one at limit 100, in either tier, through
// three store instances on one namespace: every request is allowed, the
// advisory item admits exactly its limit, and the enforced item counts every
// request.
func threeInstancesAdvisory(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	const requests = 1000
	for _, alg := range algorithms {
		enforced := item("enforced-"+alg.String(), limit.FixedWindow, 1_000_000, limit.Every(30*24*time.Hour))
		shadow := advisory(item("shadow-"+alg.String(), alg, 100, limit.Every(30*24*time.Hour)))
		var allowed, admitted atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range requests {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				// Both policies, the enforced item a ceiling, or both ceilings.
				req := counter.Request{Ceilings: i / 3 % 3, Items: []counter.Item{enforced, shadow}}
				res := check(t, stores[i%3], req)
				if res.Allowed {
					allowed.Add(1)
				}
				if res.Decisions[1].Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != requests {
			t.Errorf("%s: %d requests over 3 instances: %d allowed, want all", alg, requests, got)
		}
		if got := admitted.Load(); got != 100 {
			t.Errorf("%s: %d requests over 3 instances, advisory item at limit 100: %d admitted by it, want 100", alg, requests, got)
		}
		res := check(t, stores[0], counter.Request{Mode: counter.Peek, Items: []counter.Item{enforced}})
		if got, want := res.Decisions[0].Remaining, int64(1_000_000-requests); got != want {
			t.Errorf("%s: enforced item after %d requests: peek remaining %d, want %d (%d consumed)", alg, requests, got, want, 1_000_000-got)
		}
	}
}

// unavailable cuts and stalls the link to the server: the store answers
// ErrUnavailable within its deadline, then recovers by itself.
func unavailable(t *testing.T, b Backend) {
	var p *faultnet.Proxy
	s := b.Breakable(t, func(upstream string) *faultnet.Proxy {
		p = faultnet.New(t, upstream)
		return p
	})
	t.Cleanup(func() { s.Close() })
	it := item("outage", limit.FixedWindow, 1000000, limit.Every(time.Hour))
	req := counter.Request{Items: []counter.Item{it}}
	check(t, s, req)

	const deadline = 50 * time.Millisecond
	const slack = 250 * time.Millisecond
	expectDown := func(what string) {
		t.Helper()
		for i := range 3 {
			start := time.Now()
			_, err := s.Check(context.Background(), req)
			took := time.Since(start)
			if !errors.Is(err, counter.ErrUnavailable) {
				t.Fatalf("%s, call %d: got %v, want ErrUnavailable", what, i, err)
			}
			if took > deadline+slack {
				t.Fatalf("%s, call %d: answered after %s, want within %s", what, i, took, deadline+slack)
			}
		}
	}
	expectBack := func(what string) {
		t.Helper()
		limitAt := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := s.Check(ctx, req)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(limitAt) {
				t.Fatalf("%s: store still failing 10 s after the server came back: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Leases fail alike.
	l := leaser(t, s)
	leaseDown := func(what string) {
		t.Helper()
		start := time.Now()
		_, err := l.Acquire(context.Background(), counter.Acquire{Key: "outage", ID: what, Limit: 1, TTL: time.Second})
		if took := time.Since(start); !errors.Is(err, counter.ErrUnavailable) || took > deadline+slack {
			t.Fatalf("%s: acquire got %v after %s, want ErrUnavailable within %s", what, err, took, deadline+slack)
		}
		if err := l.Release(context.Background(), counter.LeaseRef{ID: what}); !errors.Is(err, counter.ErrUnavailable) {
			t.Fatalf("%s: release got %v, want ErrUnavailable", what, err)
		}
	}

	p.Stall()
	expectDown("stalled link")
	leaseDown("stalled")
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	expectBack("after a stall")

	p.Cut()
	expectDown("cut link")
	leaseDown("cut")
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	expectBack("after a cut")
}
