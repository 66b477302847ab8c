package tenant

import (
	"context"
	"errors"
	"sync"
	"time"
)

// loadTimeout bounds one load from the store. A load runs on its own,
// detached from the caller that started it, so that callers waiting for the
// same entry are not failed by the first one giving up.
const loadTimeout = 5 * time.Second

// cache holds values loaded by key until they are dropped or expire. One
// load per key runs at a time; callers that miss meanwhile wait for it. A
// drop during a load keeps that load's result out of the cache (it may be
// older than the change that caused the drop), and later callers load
// afresh. When misses is on, ErrNotFound is remembered too, for missTTL, in
// at most missMax entries.
type cache[V any] struct {
	load    func(ctx context.Context, k string) (V, error)
	now     func() time.Time
	ttl     time.Duration
	missTTL time.Duration // 0: misses are not remembered

	mu      sync.Mutex
	hits    map[string]hit[V]
	flights map[string]*flight[V]
	misses  map[string]time.Time // key -> expiry
	// ring holds the keys of misses in insertion order; a new miss takes
	// the oldest slot and forgets whatever miss was there, so misses never
	// outgrow len(ring).
	ring []string
	next int
}

type hit[V any] struct {
	v   V
	exp time.Time
}

type flight[V any] struct {
	done chan struct{}
	v    V
	err  error
}

func newCache[V any](load func(context.Context, string) (V, error), now func() time.Time, ttl, missTTL time.Duration, missMax int) *cache[V] {
	c := &cache[V]{
		load:    load,
		now:     now,
		ttl:     ttl,
		hits:    map[string]hit[V]{},
		flights: map[string]*flight[V]{},
	}
	if missTTL > 0 && missMax > 0 {
		c.missTTL = missTTL
		c.misses = map[string]time.Time{}
		c.ring = make([]string, missMax)
	}
	return c
}

// get returns the value of k, from memory when it is there and fresh.
func (c *cache[V]) get(ctx context.Context, k string) (V, error) {
	now := c.now()
	c.mu.Lock()
	if h, ok := c.hits[k]; ok && now.Before(h.exp) {
		c.mu.Unlock()
		return h.v, nil
	}
	if exp, ok := c.misses[k]; ok && now.Before(exp) {
		c.mu.Unlock()
		var zero V
		return zero, ErrNotFound
	}
	f, ok := c.flights[k]
	if !ok {
		f = &flight[V]{done: make(chan struct{})}
		c.flights[k] = f
		go c.fill(context.WithoutCancel(ctx), k, f)
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

func (c *cache[V]) fill(ctx context.Context, k string, f *flight[V]) {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	f.v, f.err = c.load(ctx, k)
	cancel()
	c.mu.Lock()
	// Still the current flight: nothing dropped k while it ran.
	if c.flights[k] == f {
		delete(c.flights, k)
		now := c.now()
		switch {
		case f.err == nil:
			c.hits[k] = hit[V]{v: f.v, exp: now.Add(c.ttl)}
		case c.missTTL > 0 && errors.Is(f.err, ErrNotFound):
			c.remember(k, now.Add(c.missTTL))
		}
	}
	c.mu.Unlock()
	close(f.done)
}

// remember records a miss; c.mu is held.
func (c *cache[V]) remember(k string, exp time.Time) {
	if _, ok := c.misses[k]; !ok {
		if old := c.ring[c.next]; old != "" {
			// The oldest miss goes, or k's own earlier slot if it was
			// dropped and came back: either way one more load, no more.
			delete(c.misses, old)
		}
		c.ring[c.next] = k
		c.next = (c.next + 1) % len(c.ring)
	}
	c.misses[k] = exp
}

// drop forgets k, and the result of any load of k under way.
func (c *cache[V]) drop(k string) {
	c.mu.Lock()
	delete(c.hits, k)
	delete(c.flights, k)
	delete(c.misses, k)
	c.mu.Unlock()
}

// dropAll forgets everything, and the results of the loads under way.
func (c *cache[V]) dropAll() {
	c.mu.Lock()
	clear(c.hits)
	clear(c.flights)
	clear(c.misses)
	clear(c.ring)
	c.next = 0
	c.mu.Unlock()
}

// sweep forgets expired values, so that entries nobody asks for again do not
// stay in memory.
func (c *cache[V]) sweep() {
	now := c.now()
	c.mu.Lock()
	for k, h := range c.hits {
		if !now.Before(h.exp) {
			delete(c.hits, k)
		}
	}
	for k, exp := range c.misses {
		if !now.Before(exp) {
			delete(c.misses, k)
		}
	}
	c.mu.Unlock()
}
