// Package cache is Tollgate's one in-memory cache of values loaded from a
// store: API keys, tenants and plans (tenant.Directory) and each tenant's
// policies (policy.Catalog). A value is served from memory until it is
// dropped (a change notification) or its TTL passes (the safety net should
// a notification be lost).
//
// One load per key runs at a time, however many callers miss it meanwhile:
// they all wait for that load (single flight). The context rule is one for
// every use: a load runs detached from the callers that wait for it, under
// Config.Timeout and the values of the context of the caller that started
// it, so that a caller giving up (a client that went away) never fails the
// others; each caller waits no longer than its own context. A drop during a
// load keeps that load's result out of the cache (it may be older than the
// change that caused the drop): its callers get it, later callers load
// afresh.
//
// Errors are not cached, except misses when Config.Miss says so (an unknown
// API key asked for again and again), for MissTTL, in a bounded ring. The
// values held may be bounded in number and in weight (the overrides a
// tenant's policies hold).
//
// cache imports only the standard library.
package cache

import (
	"context"
	"sync"
	"time"
)

// DefaultTimeout bounds a load when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Config configures a Cache. Load and TTL are required.
type Config[V any] struct {
	// Load reads the value of key from the store.
	Load func(ctx context.Context, key string) (V, error)
	// TTL is how long a loaded value is served without loading it again.
	TTL time.Duration
	// Timeout bounds one load; zero means DefaultTimeout.
	Timeout time.Duration
	// Miss, when set, says which load errors are misses to remember: the
	// error is answered again, without a load, for MissTTL, for at most
	// MaxMisses keys (the oldest forgotten first). Other errors are never
	// remembered.
	Miss      func(error) bool
	MissTTL   time.Duration
	MaxMisses int
	// MaxEntries, when positive, bounds the values held: past it an
	// arbitrary other one is dropped (a dropped value costs one load).
	MaxEntries int
	// Weight and MaxWeight, when set, bound the values' total weight: past
	// it arbitrary other values are dropped; the value just loaded is kept
	// even when it alone weighs more.
	Weight    func(V) int
	MaxWeight int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Cache holds values loaded by key. It is safe for concurrent use.
type Cache[V any] struct {
	cfg Config[V]

	mu      sync.RWMutex
	hits    map[string]hit[V]
	weight  int // of hits
	flights map[string]*flight[V]
	misses  map[string]miss
	// ring holds the keys of misses in insertion order; a new miss takes
	// the oldest slot and forgets whatever miss was there, so misses never
	// outgrow len(ring).
	ring []string
	next int
}

type hit[V any] struct {
	v      V
	weight int
	exp    time.Time
}

type miss struct {
	err error
	exp time.Time
}

type flight[V any] struct {
	done chan struct{}
	v    V
	err  error
}

// New returns an empty Cache.
func New[V any](cfg Config[V]) *Cache[V] {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Cache[V]{cfg: cfg, hits: map[string]hit[V]{}, flights: map[string]*flight[V]{}}
	if cfg.Miss != nil && cfg.MissTTL > 0 && cfg.MaxMisses > 0 {
		c.misses = map[string]miss{}
		c.ring = make([]string, cfg.MaxMisses)
	} else {
		c.cfg.Miss = nil
	}
	return c
}

// Get returns the value of key: from memory while it is fresh, else from
// the load under way or a new one. It returns ctx's error when ctx ends
// first, and the load's error (not cached, unless it is a miss) when the
// load fails.
func (c *Cache[V]) Get(ctx context.Context, key string) (V, error) {
	now := c.cfg.Now()
	// A hit, every request's case, only reads: readers do not wait for
	// each other.
	c.mu.RLock()
	h, ok := c.hits[key]
	c.mu.RUnlock()
	if ok && now.Before(h.exp) {
		return h.v, nil
	}
	c.mu.Lock()
	if h, ok := c.hits[key]; ok && now.Before(h.exp) {
		c.mu.Unlock()
		return h.v, nil
	}
	if m, ok := c.misses[key]; ok && now.Before(m.exp) {
		c.mu.Unlock()
		var zero V
		return zero, m.err
	}
	f, ok := c.flights[key]
	if !ok {
		f = &flight[V]{done: make(chan struct{})}
		c.flights[key] = f
		go c.fill(context.WithoutCancel(ctx), key, f)
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

// fill runs one load and keeps its result unless key was dropped meanwhile.
func (c *Cache[V]) fill(ctx context.Context, key string, f *flight[V]) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	f.v, f.err = c.cfg.Load(ctx, key)
	cancel()
	c.mu.Lock()
	// Still the current flight: nothing dropped key while it ran.
	if c.flights[key] == f {
		delete(c.flights, key)
		now := c.cfg.Now()
		switch {
		case f.err == nil:
			c.keep(key, f.v, now)
		case c.cfg.Miss != nil && c.cfg.Miss(f.err):
			c.remember(key, miss{err: f.err, exp: now.Add(c.cfg.MissTTL)})
		}
	}
	c.mu.Unlock()
	close(f.done)
}

// keep holds v for key, making room within the bounds; c.mu is held.
func (c *Cache[V]) keep(key string, v V, now time.Time) {
	w := 0
	if c.cfg.Weight != nil {
		w = c.cfg.Weight(v)
	}
	if old, ok := c.hits[key]; ok {
		c.weight -= old.weight
	} else if c.cfg.MaxEntries > 0 && len(c.hits) >= c.cfg.MaxEntries {
		// Which one goes does not matter much (map iteration picks one at
		// random): a dropped value costs one load on its next use.
		for k := range c.hits {
			c.dropLocked(k)
			break
		}
	}
	c.hits[key] = hit[V]{v: v, weight: w, exp: now.Add(c.cfg.TTL)}
	c.weight += w
	if c.cfg.Weight == nil {
		return
	}
	for k := range c.hits {
		if c.weight <= c.cfg.MaxWeight {
			return
		}
		if k != key {
			c.dropLocked(k)
		}
	}
}

// remember records a miss; c.mu is held.
func (c *Cache[V]) remember(key string, m miss) {
	if _, ok := c.misses[key]; !ok {
		if old := c.ring[c.next]; old != "" {
			// The oldest miss goes, or key's own earlier slot if it was
			// dropped and came back: either way one more load, no more.
			delete(c.misses, old)
		}
		c.ring[c.next] = key
		c.next = (c.next + 1) % len(c.ring)
	}
	c.misses[key] = m
}

// dropLocked forgets key's value; c.mu is held.
func (c *Cache[V]) dropLocked(key string) {
	if h, ok := c.hits[key]; ok {
		c.weight -= h.weight
		delete(c.hits, key)
	}
}

// Drop forgets key, and the result of any load of key under way.
func (c *Cache[V]) Drop(key string) {
	c.mu.Lock()
	c.dropLocked(key)
	delete(c.flights, key)
	delete(c.misses, key)
	c.mu.Unlock()
}

// DropAll forgets everything, and the results of the loads under way.
func (c *Cache[V]) DropAll() {
	c.mu.Lock()
	clear(c.hits)
	c.weight = 0
	clear(c.flights)
	clear(c.misses)
	clear(c.ring)
	c.next = 0
	c.mu.Unlock()
}

// Sweep forgets expired values and misses, so that entries nobody asks for
// again do not stay in memory.
func (c *Cache[V]) Sweep() {
	now := c.cfg.Now()
	c.mu.Lock()
	for k, h := range c.hits {
		if !now.Before(h.exp) {
			c.dropLocked(k)
		}
	}
	for k, m := range c.misses {
		if !now.Before(m.exp) {
			delete(c.misses, k)
		}
	}
	c.mu.Unlock()
}

// Len returns how many values are held, expired ones not yet swept
// included: the memory MaxEntries bounds.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hits)
}

// Weight returns the total weight of the values held: what MaxWeight
// bounds.
func (c *Cache[V]) Weight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.weight
}

// Misses returns how many misses are remembered: what MaxMisses bounds.
func (c *Cache[V]) Misses() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.misses)
}
