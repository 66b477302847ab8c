package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
)

func TestConformance(t *testing.T) {
	countertest.Run(t, countertest.Backend{
		Shared: func(t *testing.T) func() counter.Store {
			// One process has one memory store: every "instance" shares it.
			// The suite brings its own clock, in the past: a prune by the
			// real one would expire its leases and reservations mid-test.
			s := memory.New(memory.Config{PruneEvery: -1})
			return func() counter.Store { return s }
		},
	})
}

func TestBoundedKeysForgetTheUnusedFirst(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{MaxKeys: 64 * 4, PruneEvery: -1})
	defer s.Close()
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	hot := counter.Item{Key: "hot", Algorithm: limit.FixedWindow, Limit: 20_000, Window: limit.Every(time.Hour), Cost: 1}
	for i := range 10_000 {
		it := hot
		it.Key = fmt.Sprintf("cold-%d", i)
		if _, err := s.Check(ctx, counter.Request{Items: []counter.Item{it}, Now: now}); err != nil {
			t.Fatal(err)
		}
		// Written between any two new keys, so never one not written lately.
		if _, err := s.Check(ctx, counter.Request{Items: []counter.Item{hot}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got > 64*4 {
		t.Fatalf("store holds %d keys, bound is %d", got, 64*4)
	}
	res, err := s.Check(ctx, counter.Request{Mode: counter.Peek, Items: []counter.Item{hot}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// A peek answers what is left.
	if got, want := res.Decisions[0].Remaining, int64(20_000-10_000); got != want {
		t.Fatalf("hot key remaining %d, want %d: it was evicted although used often", got, want)
	}
}

func TestPruneRemovesExpiredOnly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := now
	s := memory.New(memory.Config{Now: func() time.Time { return clock }, PruneEvery: -1})
	defer s.Close()
	short := counter.Item{Key: "short", Algorithm: limit.FixedWindow, Limit: 5, Window: limit.Every(time.Minute), Cost: 1}
	long := counter.Item{Key: "long", Algorithm: limit.FixedWindow, Limit: 5, Window: limit.Every(time.Hour), Cost: 1}
	for _, it := range []counter.Item{short, long} {
		if _, err := s.Check(context.Background(), counter.Request{Items: []counter.Item{it}}); err != nil {
			t.Fatal(err)
		}
	}
	clock = now.Add(2 * time.Minute)
	if got := s.Prune(); got != 1 {
		t.Fatalf("pruned %d, want 1 (the minute counter)", got)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("%d keys left, want 1", got)
	}
}

func BenchmarkCheck(b *testing.B) {
	s := memory.New(memory.Config{MaxKeys: 1_000_000})
	defer s.Close()
	ctx := context.Background()
	one := []counter.Item{{Key: "one", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Minute), Cost: 1}}
	four := make([]counter.Item, 4)
	for i := range four {
		four[i] = counter.Item{Key: fmt.Sprintf("four-%d", i), Algorithm: limit.Algorithm(i%3 + 1), Limit: limit.MaxLimit, Window: limit.Every(time.Minute), Cost: 1}
	}
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			s.Check(ctx, counter.Request{Items: one})
		}
	})
	b.Run("four", func(b *testing.B) {
		for b.Loop() {
			s.Check(ctx, counter.Request{Items: four})
		}
	})
	b.Run("parallel-hot", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Check(ctx, counter.Request{Items: one})
			}
		})
	})
	// Checks of subjects drawn among a million.
	random := func(s *memory.Store) func(b *testing.B) {
		return func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				it := one[0]
				for pb.Next() {
					it.Key = fmt.Sprintf("r%d", rand.IntN(1_000_000))
					s.Check(ctx, counter.Request{Items: []counter.Item{it}})
				}
			})
		}
	}
	// A store at its bound: nearly every check a new counter in the place
	// of another.
	full := memory.New(memory.Config{MaxKeys: 64_000})
	defer full.Close()
	b.Run("parallel-full", random(full))
	b.Run("parallel-random", random(s))
	// A store at its bound shared by a thousand tenants, each check a new
	// subject of one of them: a shard's share is about one counter, and a
	// counter of the tenant's own goes.
	tenants := make([]string, 1_000)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%d", i)
	}
	shared := memory.New(memory.Config{MaxKeys: 64_000})
	defer shared.Close()
	b.Run("parallel-full-tenants", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			it := one[0]
			for pb.Next() {
				it.Key = fmt.Sprintf("r%d", rand.IntN(1_000_000))
				shared.Check(ctx, counter.Request{Group: tenants[rand.IntN(len(tenants))], Items: []counter.Item{it}})
			}
		})
	})
}

// TestCheckIntoAnswersAsCheck: the gate's allocation-free call answers what
// Check answers, in the caller's buffer, over a random stream of requests
// with shared keys, both tiers, advisory items and both modes.
func TestCheckIntoAnswersAsCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := memory.New(memory.Config{PruneEvery: -1})
	b := memory.New(memory.Config{PruneEvery: -1})
	defer a.Close()
	defer b.Close()
	rng := rand.New(rand.NewPCG(7, 9))
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var buf [2]limit.Decision
	for i := range 5000 {
		now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		n := 1 + rng.IntN(2)
		req := counter.Request{Now: now, Mode: counter.Mode(rng.IntN(2)), Ceilings: rng.IntN(n + 1)}
		for range n {
			req.Items = append(req.Items, counter.Item{
				Key: fmt.Sprintf("k%d", rng.IntN(3)), Algorithm: limit.Algorithm(1 + rng.IntN(3)),
				Limit: int64(1 + rng.IntN(5)), Window: limit.Every(time.Duration(1+rng.IntN(10)) * time.Second),
				Cost: int64(1 + rng.IntN(2)), Advisory: rng.IntN(4) == 0,
			})
		}
		want, err := a.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.CheckInto(ctx, req, buf[:0])
		if err != nil {
			t.Fatal(err)
		}
		if &got.Decisions[0] != &buf[0] {
			t.Fatalf("request %d: decisions not written into the caller's buffer", i)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("request %d %+v:\nCheckInto %+v\nCheck     %+v", i, req, got, want)
		}
	}
}

// TestCountersAreNotHeapObjects: the store holds its counters without a
// heap object each (a key's string, an entry with pointers), which every
// garbage collection would mark: 100,000 counters add a few hundred objects
// (the maps' and slices' arrays), not hundreds of thousands. Not parallel:
// it reads the process's heap statistics.
func TestCountersAreNotHeapObjects(t *testing.T) {
	const n = 100_000
	s := memory.New(memory.Config{MaxKeys: 2 * n, PruneEvery: -1})
	defer s.Close()
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	it := counter.Item{Algorithm: limit.FixedWindow, Limit: 10, Window: limit.Every(time.Hour), Cost: 1}
	objects := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapObjects
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("subject-%d", i)
	}
	before := objects()
	for _, k := range keys {
		it.Key = k
		if _, err := s.Check(ctx, counter.Request{Group: "tenant", Items: []counter.Item{it}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	grown := int64(objects()) - int64(before)
	runtime.KeepAlive(keys)
	if got := s.Len(); got != n {
		t.Fatalf("store holds %d counters, want %d", got, n)
	}
	if grown > n/100 {
		t.Fatalf("%d counters added %d heap objects: want no object per counter (at most %d in all)", n, grown, n/100)
	}
}

// TestFloodKeepsCountersInUse: a tenant sends eight times the store's
// bound of new subjects, half a bound between two rounds of another
// tenant's checks of its own 200 subjects; the store forgets the flood's
// counters, not the neighbour's, which are written between any two passes
// of the clock hand: every one of the neighbour's subjects ends exactly at
// the checks it made. (In turns, not side by side, so that no scheduler
// can starve the neighbour for longer than that; the store's locking is
// the conformance suite's.)
func TestFloodKeepsCountersInUse(t *testing.T) {
	t.Parallel()
	const bound = 64 * 500
	s := memory.New(memory.Config{MaxKeys: bound, PruneEvery: -1})
	defer s.Close()
	ctx := context.Background()
	it := counter.Item{Algorithm: limit.FixedWindow, Limit: 1_000_000, Window: limit.Every(time.Hour), Cost: 1}
	check := func(group, key string) counter.Result {
		t.Helper()
		it.Key = key
		res, err := s.Check(ctx, counter.Request{Group: group, Items: []counter.Item{it}})
		if err != nil || !res.Allowed {
			t.Fatalf("check of %s/%s: %+v, %v", group, key, res, err)
		}
		return res
	}
	const subjects, rounds = 200, 16
	flooded := 0
	for range rounds {
		for i := range subjects {
			check("b", fmt.Sprintf("b-%d", i))
		}
		for range bound / 2 {
			check("a", fmt.Sprintf("flood-%d", flooded))
			flooded++
		}
	}
	for i := range subjects {
		it.Key = fmt.Sprintf("b-%d", i)
		res, err := s.Check(ctx, counter.Request{Group: "b", Mode: counter.Peek, Items: []counter.Item{it}})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := res.Decisions[0].Remaining, it.Limit-rounds; got != want {
			t.Fatalf("neighbour's subject %d: %d left after %d checks beside a flood of %d subjects, want %d (it was forgotten)", i, got, rounds, flooded, want)
		}
	}
	if n := s.Len(); n > bound {
		t.Fatalf("store holds %d counters, bound %d", n, bound)
	}
}

// TestFloodForgetsItsOwn is issue 36's attack on the store: at a bound of
// 1,000, tenant B checks each of its 200 subjects twice against "2 an
// hour", then tenant A sends eight times the bound of new subjects. B's
// counters, idle since, hold far less than half the table: A, past its
// share, forgets its own, and B's third check of every subject is refused.
// (Forgotten, a counter starts again at zero: the third check allowed.)
func TestFloodForgetsItsOwn(t *testing.T) {
	t.Parallel()
	const bound = 1_000
	for _, alg := range []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			s := memory.New(memory.Config{MaxKeys: bound, PruneEvery: -1})
			defer s.Close()
			ctx := context.Background()
			now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
			check := func(group, key string) bool {
				t.Helper()
				it := counter.Item{Key: key, Algorithm: alg, Limit: 2, Window: limit.Every(time.Hour), Cost: 1}
				res, err := s.Check(ctx, counter.Request{Group: group, Items: []counter.Item{it}, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				return res.Allowed
			}
			const subjects = 200
			for range 2 {
				for i := range subjects {
					if !check("b", fmt.Sprintf("b-%d", i)) {
						t.Fatalf("B's subject %d refused within its limit", i)
					}
				}
			}
			for i := range 8 * bound {
				check("a", fmt.Sprintf("flood-%d", i))
			}
			wrong := 0
			for i := range subjects {
				if check("b", fmt.Sprintf("b-%d", i)) {
					wrong++
				}
			}
			if wrong > 0 {
				t.Fatalf("B's third check allowed on %d of %d subjects after A's flood of %d: their counters were forgotten", wrong, subjects, 8*bound)
			}
			if n := s.Len(); n > bound {
				t.Fatalf("store holds %d counters, bound %d", n, bound)
			}
		})
	}
}

// TestPruneExpiresReservations prunes by the store's clock: a reservation
// past its expiry that releases gives its amount back, one that does not
// keeps it, a settled one no longer kept goes, and a live one stays.
func TestPruneExpiresReservations(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := memory.New(memory.Config{PruneEvery: -1, Now: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()
	budget := counter.Item{Key: "tokens", Algorithm: limit.FixedWindow, Limit: 100, Window: limit.Every(24 * time.Hour), Cost: 30}
	for _, g := range []string{"release", "keep", "settled", "live"} {
		r := counter.Reservation{Request: counter.Request{Group: g, Items: []counter.Item{budget}}, ID: "r", TTL: time.Minute, OnExpiryRelease: g == "release"}
		if g == "live" {
			r.TTL = 2 * time.Hour
		}
		if res, err := s.Reserve(ctx, r); err != nil || !res.Allowed {
			t.Fatalf("reserve in %s: %+v, %v", g, res, err)
		}
	}
	if _, err := s.Settle(ctx, counter.SettleRef{Group: "settled", ID: "r", Used: 30}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour - time.Second)
	if n := s.Prune(); n != 2 {
		t.Errorf("prune an hour on: %d gone, want 2 (the expired reservations)", n)
	}
	now = now.Add(time.Second)
	if n := s.Prune(); n < 1 {
		t.Errorf("prune once the settled outcome is no longer kept: %d gone", n)
	}
	for g, want := range map[string]int64{"release": 100, "keep": 70} {
		res, err := s.Check(ctx, counter.Request{Mode: counter.Peek, Group: g, Items: []counter.Item{budget}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Decisions[0].Remaining; got != want {
			t.Errorf("%s after pruning: %d left, want %d", g, got, want)
		}
	}
	for g, wantErr := range map[string]error{"settled": counter.ErrNoReservation, "live": nil} {
		if _, err := s.Settle(ctx, counter.SettleRef{Group: g, ID: "r", Used: 30}); !errors.Is(err, wantErr) {
			t.Errorf("settle in %s after pruning: got %v, want %v", g, err, wantErr)
		}
	}
}
