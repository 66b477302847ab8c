package countertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	t.Run("SameKeyTwiceInOneRequest", func(t *testing.T) { t.Parallel(); sameKeyTwice(t, b) })
	t.Run("WindowsRollOver", func(t *testing.T) { t.Parallel(); windowsRollOver(t, b) })
	t.Run("ServerClock", func(t *testing.T) { t.Parallel(); serverClock(t, b) })
	t.Run("GroupsAreSeparate", func(t *testing.T) { t.Parallel(); groupsAreSeparate(t, b) })
	t.Run("InvalidRequests", func(t *testing.T) { t.Parallel(); invalidRequests(t, b) })
	t.Run("TwentyGoroutinesLimitTen", func(t *testing.T) { t.Parallel(); twentyGoroutines(t, b) })
	t.Run("ThreeInstancesOneStore", func(t *testing.T) { t.Parallel(); threeInstances(t, b) })
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

// model is the plain in-memory reference: limit.Decide over a map, applying
// requests one after the other, all or nothing.
type model struct{ states map[[2]string]limit.State }

func newModel() *model { return &model{states: map[[2]string]limit.State{}} }

func (m *model) check(req counter.Request) counter.Result {
	work := map[[2]string]limit.State{}
	get := func(k [2]string) limit.State {
		if st, ok := work[k]; ok {
			return st
		}
		return m.states[k]
	}
	seen := make([]counter.Seen, len(req.Items))
	all := true
	for i, it := range req.Items {
		k := [2]string{req.Group, it.Key}
		st := get(k)
		ok, next := limit.Admit(it.Algorithm, st, req.Now.UnixMicro(), it.Cost, it.Limit, it.Window)
		seen[i] = counter.Seen{State: st, Allowed: ok}
		if ok {
			work[k] = next
		}
		all = all && ok
	}
	if all && req.Mode == counter.Consume {
		for k, st := range work {
			m.states[k] = st
		}
	}
	return counter.Answer(req, seen, req.Now)
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

// matchesLimit pushes random streams of requests, with their own clock,
// through the store and through the model side by side: every decision must
// be the same, field for field.
func matchesLimit(t *testing.T, b Backend) {
	s := open(t, b)
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		m := newModel()
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
				req.Items = append(req.Items, counter.Item{Key: d.key, Algorithm: d.alg, Limit: d.lim, Window: d.win, Cost: cost})
			}
			got := check(rt, s, req)
			want := m.check(req)
			if !got.Now.Equal(now) {
				rt.Fatalf("step %d: store used clock %s, asked for %s", step, got.Now, now)
			}
			sameResult(rt, step, req, got, want)
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
				if !res.Allowed || res.Decisions[0].Remaining != 2 {
					t.Fatalf("peek %d: allowed %v remaining %d, want true 2", i, res.Allowed, res.Decisions[0].Remaining)
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
	if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("second batch: got %+v, want refused by the narrow item only", res)
	}
	// The refused batch consumed nothing from the item that allowed.
	res = check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{wide}, Now: base})
	if got := res.Decisions[0].Remaining; got != 3 {
		t.Fatalf("wide remaining after a refused batch: got %d, want 3", got)
	}
}

func sameKeyTwice(t *testing.T, b Backend) {
	s := open(t, b)
	it := item("twice", limit.FixedWindow, 3, limit.Every(time.Minute))
	it.Cost = 2
	res := check(t, s, counter.Request{Items: []counter.Item{it, it}, Now: base})
	if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("2+2 on a limit of 3: got %+v, want the second item refused", res)
	}
	it.Cost = 1
	res = check(t, s, counter.Request{Items: []counter.Item{it, it, it}, Now: base})
	if !res.Allowed || res.Decisions[2].Remaining != 0 {
		t.Fatalf("1+1+1 on a limit of 3: got %+v, want allowed, remaining 0", res)
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
	for _, g := range []string{"tenant-a", "tenant-b", ""} {
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
	}
	for name, req := range bad {
		_, err := s.Check(context.Background(), req)
		if !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
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

	p.Stall()
	expectDown("stalled link")
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	expectBack("after a stall")

	p.Cut()
	expectDown("cut link")
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	expectBack("after a cut")
}
