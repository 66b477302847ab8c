package cache_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/kit/cache"
)

var errUnknown = errors.New("unknown")

// TestBoundsHold: past MaxEntries or MaxWeight other values go, the one
// just loaded stays, and a drop gives its weight back.
func TestBoundsHold(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	c := cache.New(cache.Config[string]{
		Load: func(_ context.Context, k string) (string, error) { loads.Add(1); return k, nil },
		TTL:  time.Hour, MaxEntries: 3, Weight: func(v string) int { return len(v) }, MaxWeight: 10,
	})
	ctx := context.Background()
	for _, k := range []string{"a", "bb", "ccc", "dddd"} {
		if _, err := c.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
		if c.Len() > 3 || c.Weight() > 10 {
			t.Fatalf("after %s: %d values weighing %d", k, c.Len(), c.Weight())
		}
	}
	if _, err := c.Get(ctx, "eeeeeeeeeeee"); err != nil { // 12: over the bound alone
		t.Fatal(err)
	}
	if c.Len() != 1 || c.Weight() != 12 {
		t.Errorf("a value over the weight bound alone: %d values weighing %d, want it kept alone", c.Len(), c.Weight())
	}
	before := loads.Load()
	c.Get(ctx, "eeeeeeeeeeee")
	if loads.Load() != before {
		t.Error("the value just loaded was dropped")
	}
	c.Drop("eeeeeeeeeeee")
	if c.Len() != 0 || c.Weight() != 0 {
		t.Errorf("after a drop: %d values weighing %d", c.Len(), c.Weight())
	}
}

// TestMissesAreRememberedAndBounded: a miss is answered from memory for
// MissTTL, at most MaxMisses of them, the oldest forgotten first; other
// errors are not remembered.
func TestMissesAreRememberedAndBounded(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := cache.New(cache.Config[string]{
		Load: func(_ context.Context, k string) (string, error) {
			loads.Add(1)
			if strings.HasPrefix(k, "down") {
				return "", errors.New("store down")
			}
			return "", fmt.Errorf("key %s: %w", k, errUnknown)
		},
		TTL: time.Hour, Miss: func(err error) bool { return errors.Is(err, errUnknown) }, MissTTL: 5 * time.Second, MaxMisses: 2,
		Now: func() time.Time { return now },
	})
	ctx := context.Background()
	for range 3 {
		if _, err := c.Get(ctx, "x"); !errors.Is(err, errUnknown) {
			t.Fatalf("miss: %v", err)
		}
		c.Get(ctx, "down")
	}
	if n := loads.Load(); n != 4 {
		t.Errorf("3 asks of a miss and of a failure: %d loads, want 1 and 3", n)
	}
	c.Get(ctx, "y")
	c.Get(ctx, "z") // x's entry goes
	if c.Misses() != 2 {
		t.Errorf("%d misses held, want 2", c.Misses())
	}
	before := loads.Load()
	c.Get(ctx, "x")
	if loads.Load() != before+1 {
		t.Error("the oldest miss was not forgotten")
	}
	now = now.Add(5 * time.Second)
	before = loads.Load()
	c.Get(ctx, "z")
	if loads.Load() != before+1 {
		t.Error("a miss served past MissTTL")
	}
}

// gatedLoader counts its loads and holds each on gate until it closes (or
// the load's context ends), reporting on started when it begins.
type gatedLoader struct {
	loads         atomic.Int64
	gate, started chan struct{}
}

func newGatedLoader() *gatedLoader {
	return &gatedLoader{gate: make(chan struct{}), started: make(chan struct{}, 10)}
}

func (l *gatedLoader) load(ctx context.Context, _ string) (int64, error) {
	n := l.loads.Add(1)
	l.started <- struct{}{}
	select {
	case <-l.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return n, nil
}

// TestLoadsOutliveTheirCaller: callers of one key share one load, which
// runs detached from them: the caller that started it may give up, the
// others get its value.
func TestLoadsOutliveTheirCaller(t *testing.T) {
	t.Parallel()
	l := newGatedLoader()
	c := cache.New(cache.Config[int64]{Load: l.load, TTL: time.Hour})
	first, cancel := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() { _, err := c.Get(first, "k"); firstErr <- err }()
	<-l.started
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v", err)
	}
	got := make(chan int64, 5)
	for range 5 {
		go func() { v, _ := c.Get(context.Background(), "k"); got <- v }()
	}
	close(l.gate)
	for range 5 {
		if v := <-got; v != 1 {
			t.Fatalf("a waiter got %d, want the first load's 1", v)
		}
	}
	if n := l.loads.Load(); n != 1 {
		t.Errorf("%d loads, want 1", n)
	}
}

// TestDropDuringALoad: a drop during a load keeps that load's value out of
// the cache; its caller gets it, the next caller loads again.
func TestDropDuringALoad(t *testing.T) {
	t.Parallel()
	l := newGatedLoader()
	c := cache.New(cache.Config[int64]{Load: l.load, TTL: time.Hour})
	got := make(chan int64, 1)
	go func() { v, _ := c.Get(context.Background(), "k"); got <- v }()
	<-l.started
	c.Drop("k")
	close(l.gate)
	if v := <-got; v != 1 {
		t.Errorf("the caller of the dropped load got %d, want 1", v)
	}
	v, err := c.Get(context.Background(), "k")
	<-l.started
	if err != nil || v != 2 || c.Len() != 1 {
		t.Errorf("after the drop: %d, %v, %d held; want a new load's 2, held", v, err, c.Len())
	}
}

// switchable is a store whose answer, a value or an error, the test sets.
type switchable struct {
	mu    sync.Mutex
	v     int64
	err   error
	loads atomic.Int64
}

func (s *switchable) set(v int64, err error) {
	s.mu.Lock()
	s.v, s.err = v, err
	s.mu.Unlock()
}

func (s *switchable) load(context.Context, string) (int64, error) {
	s.loads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.err
}

var errDown = errors.New("store down")

// clock is a time the test moves; loads read it too.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// staleCache is a Cache over s that serves stale values on any error but
// errUnknown, on a clock the test moves.
func staleCache(s *switchable, clk *clock, cfg cache.Config[int64]) *cache.Cache[int64] {
	cfg.Load = s.load
	cfg.TTL = cmp.Or(cfg.TTL, time.Hour)
	cfg.Stale = func(err error) bool { return !errors.Is(err, errUnknown) }
	cfg.Now = clk.now
	return cache.New(cfg)
}

// waitFor polls cond, failing t after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestStaleValueServedWhileTheStoreFails: a value marked stale (or past
// its TTL) is refreshed by the next Get; while the store fails, the value
// last read is served, at once after the first failure, the store being
// tried again once per Retry; once it answers, the new value is served. The
// store's answer that the value is gone drops it.
func TestStaleValueServedWhileTheStoreFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s := &switchable{v: 1}
	c := staleCache(s, clk, cache.Config[int64]{TTL: time.Minute, Retry: time.Second})
	get := func(what string, want int64) {
		t.Helper()
		if v, err := c.Get(ctx, "k"); err != nil || v != want {
			t.Fatalf("%s: got %d, %v; want %d", what, v, err, want)
		}
	}
	get("first", 1)
	c.MarkStale("k")
	s.set(2, errDown)
	get("marked stale, store down", 1)
	if n := s.loads.Load(); n != 2 {
		t.Fatalf("%d loads, want 2: the marked value was not refreshed", n)
	}
	get("again, within Retry", 1)
	if n := s.loads.Load(); n != 2 {
		t.Fatalf("%d loads, want 2: a failed refresh is tried again only after Retry", n)
	}
	clk.add(time.Second)
	get("after Retry, store still down", 1)
	waitFor(t, "the background refresh", func() bool { return s.loads.Load() == 3 })
	clk.add(2 * time.Minute) // past the TTL too
	s.set(2, nil)
	get("store back: served as it is while the refresh runs", 1)
	waitFor(t, "the refreshed value", func() bool { v, _ := c.Get(ctx, "k"); return v == 2 })

	c.MarkStale("k")
	s.set(0, errUnknown)
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errUnknown) {
		t.Fatalf("the store says the value is gone: got %v, want errUnknown", err)
	}
	if c.Len() != 0 {
		t.Errorf("%d values held after the store said the value is gone, want 0", c.Len())
	}
}

// TestStaleWaitIsBounded: a refresh that hangs (a store that stopped
// answering) holds a Get for StaleWait at most, and the later ones not at
// all; the value it finally reads is kept.
func TestStaleWaitIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := newGatedLoader()
	c := cache.New(cache.Config[int64]{
		Load: l.load, TTL: time.Hour, StaleWait: 20 * time.Millisecond,
		Stale: func(error) bool { return true },
	})
	first := make(chan int64)
	go func() { v, _ := c.Get(ctx, "k"); first <- v }()
	<-l.started
	l.gate <- struct{}{}
	if v := <-first; v != 1 {
		t.Fatalf("first: %d, want 1", v)
	}
	c.MarkStale("k")
	began := time.Now()
	if v, err := c.Get(ctx, "k"); err != nil || v != 1 {
		t.Fatalf("marked stale, refresh hanging: %d, %v; want 1", v, err)
	}
	<-l.started
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the Get waited %s for a hanging refresh, StaleWait 20 ms", took)
	}
	began = time.Now()
	for range 10 {
		if v, err := c.Get(ctx, "k"); err != nil || v != 1 {
			t.Fatalf("later: %d, %v; want 1", v, err)
		}
	}
	if took := time.Since(began); took >= 20*time.Millisecond {
		t.Errorf("10 later Gets took %s: they waited for the hanging refresh", took)
	}
	close(l.gate)
	waitFor(t, "the refreshed value", func() bool { v, _ := c.Get(ctx, "k"); return v == 2 })
	if n := l.loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2", n)
	}
}

// TestSweepKeepsStaleValuesInUse: with Stale, Sweep forgets a stale value
// only when nobody asked for it for Keep: one served through an outage
// stays.
func TestSweepKeepsStaleValuesInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s := &switchable{v: 1}
	c := staleCache(s, clk, cache.Config[int64]{TTL: time.Second, Keep: 10 * time.Second})
	c.Get(ctx, "used")
	c.Get(ctx, "idle")
	s.set(0, errDown)
	for range 4 {
		clk.add(5 * time.Second)
		if v, err := c.Get(ctx, "used"); err != nil || v != 1 {
			t.Fatalf("store down: %d, %v; want the value last read", v, err)
		}
		c.Sweep()
	}
	if v, err := c.Get(ctx, "used"); err != nil || v != 1 {
		t.Errorf("a stale value asked for every 5 s was swept (Keep 10 s): %d, %v", v, err)
	}
	if _, err := c.Get(ctx, "idle"); err == nil {
		t.Errorf("a stale value nobody asked for in 20 s was kept (Keep 10 s)")
	}
}

// TestMarkAllStale: every value is refreshed by its next Get, and misses
// are forgotten.
func TestMarkAllStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s := &switchable{v: 1}
	c := staleCache(s, clk, cache.Config[int64]{
		Miss: func(err error) bool { return errors.Is(err, errUnknown) }, MissTTL: time.Minute, MaxMisses: 10,
	})
	c.Get(ctx, "a")
	c.Get(ctx, "b")
	s.set(2, nil)
	c.MarkAllStale()
	for _, k := range []string{"a", "b"} {
		if v, err := c.Get(ctx, k); err != nil || v != 2 {
			t.Errorf("%s after MarkAllStale: %d, %v; want 2", k, v, err)
		}
	}
	s.set(0, errUnknown)
	c.Get(ctx, "x")
	if c.Misses() != 1 {
		t.Fatalf("%d misses, want 1", c.Misses())
	}
	c.MarkAllStale()
	if c.Misses() != 0 {
		t.Errorf("%d misses after MarkAllStale, want 0", c.Misses())
	}
}

// TestHeld: Held answers the value held, fresh or marked stale, and
// nothing for a key never loaded or dropped, without loading.
func TestHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var loads atomic.Int64
	c := cache.New(cache.Config[string]{
		Load:  func(_ context.Context, k string) (string, error) { loads.Add(1); return k + "!", nil },
		TTL:   time.Hour,
		Stale: func(error) bool { return true },
	})
	if v, ok := c.Held("a"); ok {
		t.Errorf("Held before a load: %q", v)
	}
	c.Get(ctx, "a")
	c.MarkStale("a")
	if v, ok := c.Held("a"); !ok || v != "a!" {
		t.Errorf("Held of a stale value: %q, %v", v, ok)
	}
	c.Drop("a")
	if v, ok := c.Held("a"); ok {
		t.Errorf("Held after a drop: %q", v)
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads, want 1: Held loads nothing", n)
	}
}
