package countertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

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
		t.Fatalf("first request refused: %+v", res)
	}
	res := check(t, s, counter.Request{Items: []counter.Item{wide, narrow}, Now: base})
	if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed || res.Decisions[0].Remaining != 4 {
		t.Fatalf("second request: got %+v, want refused by the narrow item only, the wide one with its 4 left", res)
	}
	// The refused request consumed nothing from the item that allowed.
	res = check(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{wide}, Now: base})
	if got := res.Decisions[0].Remaining; got != 4 {
		t.Fatalf("wide remaining after a refused request: got %d, want 4", got)
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

func windowsRollOver(t *testing.T, b Backend) {
	s := open(t, b)
	cases := []struct {
		alg  limit.Algorithm
		win  limit.Window
		next time.Time // an instant at which a full counter admits again
	}{
		{limit.FixedWindow, limit.Every(time.Minute), base.Truncate(time.Minute).Add(time.Minute)},
		{limit.FixedWindow, limit.Month, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		// A billing period anchored on the 31st at 10:00 ends on November's
		// last day at that hour.
		{limit.FixedWindow, anchoredOn31st, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
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
	anchored := counter.Item{Key: "edge-anchored", Algorithm: limit.FixedWindow, Limit: 1, Window: anchoredOn31st, Cost: 1}
	for i, req := range []counter.Request{
		{Group: long, Items: []counter.Item{item("edge", limit.FixedWindow, 1, limit.Every(time.Hour))}, Now: base},
		{Group: "0b3f5c1e-6f3a-4a7e-9d2c-5b8e1f0a9c42", Items: []counter.Item{fixedMonth}, Now: base},
		{Group: "first", Items: []counter.Item{fixedMonth, anchored, item("edge-sliding", limit.SlidingWindow, 1, limit.Every(time.Minute)), item("edge-bucket", limit.TokenBucket, 1, limit.Every(time.Minute))}, Now: first},
		{Group: "last", Items: []counter.Item{fixedMonth, anchored, item("edge-sliding", limit.SlidingWindow, 1, limit.Every(time.Minute)), item("edge-bucket", limit.TokenBucket, 1, limit.Every(time.Minute))}, Now: last},
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
