package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/cache"
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
	c.Get(ctx, "z") // x's slot goes
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
