package countertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// runCharges is the contract of counter.Charger: usage counted after the
// fact, past the limit if need be, never refused.
func runCharges(t *testing.T, b Backend) {
	t.Run("ChargePastTheLimit", func(t *testing.T) { t.Parallel(); chargePastTheLimit(t, b) })
	t.Run("ChargesMatchTheModel", func(t *testing.T) { t.Parallel(); chargesMatchModel(t, b) })
	t.Run("ThreeInstancesCharge", func(t *testing.T) { t.Parallel(); chargeThreeInstances(t, b) })
	t.Run("InvalidCharges", func(t *testing.T) { t.Parallel(); invalidCharges(t, b) })
}

func charge(t fataler, s counter.Charger, req counter.Request) counter.Charged {
	t.Helper()
	c, err := s.Charge(context.Background(), req)
	if err != nil {
		t.Fatalf("charge %+v: %v", req, err)
	}
	return c
}

// chargePastTheLimit: a charge is counted whatever is left, overdraws the
// counter, and checks are refused until it recovers; two items on one key
// both count, and each reads the counter the whole charge left.
func chargePastTheLimit(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			it := item("charge-"+alg.String(), alg, 10, limit.Every(time.Minute))
			check(t, s, counter.Request{Items: []counter.Item{withCost(it, 7)}, Now: base})
			c := charge(t, s, counter.Request{Items: []counter.Item{withCost(it, 5), withCost(it, 4)}, Now: base})
			for i, got := range c.Items {
				if got.Remaining != 0 || got.Overdrawn != 6 || got.Amount != []int64{5, 4}[i] || !c.Now.Equal(base) {
					t.Fatalf("7 checked then 5 and 4 charged of 10: item %d %+v at %s, want 0 left, 6 overdrawn", i, got, c.Now)
				}
			}
			if res := check(t, s, counter.Request{Items: []counter.Item{withCost(it, 1)}, Now: base}); res.Allowed {
				t.Fatalf("an overdrawn counter admitted a check: %+v", res)
			}
		})
	}
	// A shadow (advisory) item is charged as well.
	it := item("charge-advisory", limit.FixedWindow, 3, limit.Every(time.Hour))
	it.Advisory = true
	if c := charge(t, s, counter.Request{Items: []counter.Item{withCost(it, 5)}, Now: base}); c.Items[0].Overdrawn != 2 {
		t.Fatalf("advisory charge of 5 of 3: %+v", c.Items[0])
	}
}

func withCost(it counter.Item, cost int64) counter.Item { it.Cost = cost; return it }

// chargesMatchModel pushes random streams of checks and charges, with
// clock jumps, through the store and the model (limit.Admit for checks,
// limit.Adjust for charges) side by side: every answer must be the same.
func chargesMatchModel(t *testing.T, b Backend) {
	s := open(t, b)
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		m := NewModel()
		var defs []counter.Item
		for i := range rapid.IntRange(1, 3).Draw(rt, "counters") {
			alg := limit.Algorithm(rapid.IntRange(1, 3).Draw(rt, "alg"))
			win := limit.Every(rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour}).Draw(rt, "window"))
			if alg == limit.FixedWindow && rapid.Bool().Draw(rt, "month") {
				win = drawMonth(rt)
			}
			defs = append(defs, counter.Item{Key: fmt.Sprintf("k%d", i), Algorithm: alg, Limit: rapid.Int64Range(1, 50).Draw(rt, "limit"), Window: win})
		}
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(40*24*time.Hour)).Draw(rt, "start"))).Truncate(time.Microsecond)
		for step := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Millisecond, time.Second, time.Minute, 20 * 24 * time.Hour}).Draw(rt, "jump"))
			req := counter.Request{Group: group, Now: now, Mode: counter.Consume}
			for range rapid.IntRange(1, 3).Draw(rt, "items") {
				it := defs[rapid.IntRange(0, len(defs)-1).Draw(rt, "which")]
				it.Cost = rapid.Int64Range(1, it.Limit+20).Draw(rt, "cost")
				req.Items = append(req.Items, it)
			}
			if rapid.Bool().Draw(rt, "charge") {
				got := charge(rt, s, req)
				want := m.Charge(req, now)
				for i := range want.Items {
					if got.Items[i] != want.Items[i] {
						rt.Fatalf("step %d charge item %d (%+v):\n got  %+v\n want %+v", step, i, req.Items[i], got.Items[i], want.Items[i])
					}
				}
				continue
			}
			sameResult(rt, step, req, check(rt, s, req), m.Check(req, now))
		}
	})
}

// Charge counts req at now as a store's Charge must (limit.Adjust of each
// item's cost, in order).
func (m *Model) Charge(req counter.Request, now time.Time) counter.Charged {
	us := now.UnixMicro()
	after := make([]limit.State, len(req.Items))
	for i, it := range req.Items {
		k := [2]string{req.Group, it.Key}
		m.states[k] = limit.Adjust(it.Algorithm, m.states[k], us, it.Cost, 0, it.Limit, it.Window)
		after[i] = m.states[k]
	}
	return counter.ChargedOf(req, after, now)
}

// chargeThreeInstances races charges and checks on one counter through
// three stores: the counter ends holding exactly every charge and every
// check admitted, however they interleave.
func chargeThreeInstances(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	const lim = 300
	it := counter.Item{Key: "race", Algorithm: limit.FixedWindow, Limit: lim, Window: limit.Every(time.Hour), Cost: 1}
	var mu sync.Mutex
	var counted int64
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			for n := range 20 {
				req := counter.Request{Group: "charge-race", Items: []counter.Item{withCost(it, int64(1+(w+n)%7))}, Now: base}
				s := stores[(w+n)%3]
				if w%2 == 0 {
					if _, err := s.Charge(context.Background(), req); err != nil {
						t.Errorf("charge: %v", err)
						return
					}
				} else {
					res, err := s.Check(context.Background(), req)
					if err != nil {
						t.Errorf("check: %v", err)
						return
					}
					if !res.Allowed {
						continue
					}
				}
				mu.Lock()
				counted += req.Items[0].Cost
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got := charge(t, stores[1], counter.Request{Group: "charge-race", Items: []counter.Item{it}, Now: base})
	if n := lim - got.Items[0].Remaining + got.Items[0].Overdrawn; n != counted+1 {
		t.Fatalf("charges and admitted checks of %d units (and the probe's 1): the counter holds %d", counted, n)
	}
}

// invalidCharges: a peek, ceilings, or what Validate refuses is ErrInvalid,
// and counts nothing.
func invalidCharges(t *testing.T, b Backend) {
	s := open(t, b)
	it := item("charge-invalid", limit.FixedWindow, 5, limit.Every(time.Hour))
	for name, req := range map[string]counter.Request{
		"peek":          {Mode: counter.Peek, Items: []counter.Item{it}, Now: base},
		"ceilings":      {Ceilings: 1, Items: []counter.Item{it, it}, Now: base},
		"no items":      {Now: base},
		"cost 0":        {Items: []counter.Item{withCost(it, 0)}, Now: base},
		"month sliding": {Items: []counter.Item{{Key: "k", Algorithm: limit.SlidingWindow, Limit: 1, Window: limit.Month, Cost: 1}}, Now: base},
	} {
		if _, err := s.Charge(context.Background(), req); !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if got := left(t, s, "", it, base); got != 5 {
		t.Fatalf("invalid charges counted: %d of 5 left", got)
	}
}
