// Package cache is Tollgate's one in-memory cache of values loaded from a
// store: API keys, tenants and plans (tenant.Directory) and each tenant's
// policies (policy.Catalog). A value is served from memory until it is
// dropped (a change notification) or its TTL passes (the safety net should
// a notification be lost).
//
// A known value is never forgotten for nothing when Config.Stale is set: a
// value past its TTL, or marked stale (MarkStale: a change notification), is
// refreshed by the next Get, and while the store cannot be read that Get and
// the later ones are served the value last read, the store being tried
// again in the background every Config.Retry. Only the store's own answer
// (Stale says which errors are not that: "not found" is an answer) or Drop
// removes a value, besides the bounds and Sweep.
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

// Defaults of the Config fields that serve stale values (Config.Stale).
const (
	// DefaultStaleWait is far above a healthy store's answer (a millisecond
	// or two) and keeps an outage of a store that stopped answering at a
	// fraction of a second for each value, once.
	DefaultStaleWait = 250 * time.Millisecond
	// DefaultRetry: once the store can be read again, stale values are
	// fresh within about a second.
	DefaultRetry = time.Second
	// DefaultKeep: a tenant that came in the last ten minutes is still
	// served when the store fails.
	DefaultKeep = 10 * time.Minute
)

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
	// Stale, when set, says which load errors mean that the store could not
	// be read, as opposed to its answer that the value is gone (say, not
	// errors.Is(err, ErrNotFound)). A value past its TTL or marked by
	// MarkStale is then stale: Get refreshes it, waiting for the refresh at
	// most StaleWait (on the real clock) or until its ctx ends, and when the
	// refresh fails with such an error, or takes longer, Get serves the
	// value as it is. Until a refresh succeeds, Get serves it at once and
	// refreshes it in the background, at most once per Retry (on Now).
	// Sweep forgets a stale value only when nobody asked for it for Keep.
	// A load error Stale does not accept drops the value. Zero durations
	// take DefaultStaleWait, DefaultRetry and DefaultKeep.
	Stale     func(error) bool
	StaleWait time.Duration
	Retry     time.Duration
	Keep      time.Duration
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
	// the oldest entry and forgets whatever miss was there, so misses never
	// outgrow len(ring).
	ring []string
	next int
}

type hit[V any] struct {
	v      V
	weight int
	// exp is when v goes stale: zero once MarkStale marked it.
	exp time.Time
	// keep is when Sweep may forget v, once it is stale.
	keep time.Time
	// retry, set when v's last refresh failed, is when the next one may
	// start: until one succeeds v is served without waiting.
	retry time.Time
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
	if cfg.StaleWait <= 0 {
		cfg.StaleWait = DefaultStaleWait
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
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
// load fails; with Config.Stale, a value held is served instead, as that
// field says.
func (c *Cache[V]) Get(ctx context.Context, key string) (V, error) {
	v, _, err := c.Lookup(ctx, key)
	return v, err
}

// Lookup is Get, and says whether the value is one held past a refresh
// that failed (Config.Stale): the store's copy may have changed since.
func (c *Cache[V]) Lookup(ctx context.Context, key string) (_ V, stale bool, _ error) {
	now := c.cfg.Now()
	// A hit, every request's case, only reads: readers do not wait for
	// each other.
	c.mu.RLock()
	h, ok := c.hits[key]
	c.mu.RUnlock()
	if ok && now.Before(h.exp) {
		return h.v, false, nil
	}
	c.mu.Lock()
	h, ok = c.hits[key]
	if ok && now.Before(h.exp) {
		c.mu.Unlock()
		return h.v, false, nil
	}
	held := ok && c.cfg.Stale != nil
	if held {
		h.keep = now.Add(c.cfg.Keep)
		if !h.retry.IsZero() {
			// The store could not be read lately: the value is served at
			// once, and the store tried again now and then.
			if !now.Before(h.retry) {
				h.retry = now.Add(c.cfg.Retry)
				c.start(ctx, key)
			}
			c.hits[key] = h
			c.mu.Unlock()
			return h.v, true, nil
		}
		c.hits[key] = h
	} else if m, ok := c.misses[key]; ok && now.Before(m.exp) {
		c.mu.Unlock()
		var zero V
		return zero, false, m.err
	}
	f := c.start(ctx, key)
	c.mu.Unlock()
	if held {
		wait := time.NewTimer(c.cfg.StaleWait)
		defer wait.Stop()
		select {
		case <-f.done:
			if f.err == nil || !c.cfg.Stale(f.err) {
				return f.v, false, f.err
			}
		case <-wait.C:
			c.failing(key)
		case <-ctx.Done():
		}
		if v, ok := c.held(key); ok {
			return v, true, nil
		}
		// Dropped meanwhile (a revoked key): there is nothing to serve but
		// the load's answer.
	}
	select {
	case <-f.done:
		return f.v, false, f.err
	case <-ctx.Done():
		var zero V
		return zero, false, ctx.Err()
	}
}

// start returns the load of key under way, or starts one; c.mu is held.
func (c *Cache[V]) start(ctx context.Context, key string) *flight[V] {
	f, ok := c.flights[key]
	if !ok {
		f = &flight[V]{done: make(chan struct{})}
		c.flights[key] = f
		go c.fill(context.WithoutCancel(ctx), key, f)
	}
	return f
}

// Held returns the value held for key, fresh or stale, without loading
// it: for a Load that reuses what it can of the value it replaces.
func (c *Cache[V]) Held(key string) (V, bool) { return c.held(key) }

// held returns the value held for key, fresh or not.
func (c *Cache[V]) held(key string) (V, bool) {
	c.mu.RLock()
	h, ok := c.hits[key]
	c.mu.RUnlock()
	return h.v, ok
}

// failing notes that a refresh of key's stale value is taking longer than
// StaleWait: later callers are served the value without waiting for it.
func (c *Cache[V]) failing(key string) {
	now := c.cfg.Now()
	c.mu.Lock()
	if h, ok := c.hits[key]; ok && !now.Before(h.exp) && h.retry.IsZero() {
		h.retry = now.Add(c.cfg.Retry)
		c.hits[key] = h
	}
	c.mu.Unlock()
}

// fill runs one load and keeps its result unless key was dropped or marked
// stale meanwhile.
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
		case c.cfg.Stale != nil && c.cfg.Stale(f.err):
			// The store could not be read: the value held, if any, stays
			// and is served as it is until a later refresh succeeds.
			if h, ok := c.hits[key]; ok {
				h.retry = now.Add(c.cfg.Retry)
				c.hits[key] = h
			}
		default:
			// The store's answer (the value is gone), or a failure past
			// which nothing may be served: the value held, stale, goes.
			c.dropLocked(key)
			if c.cfg.Miss != nil && c.cfg.Miss(f.err) {
				c.remember(key, miss{err: f.err, exp: now.Add(c.cfg.MissTTL)})
			}
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
		c.dropLocked(c.victim(now))
	}
	h := hit[V]{v: v, weight: w, exp: now.Add(c.cfg.TTL)}
	h.keep = h.exp
	if c.cfg.Stale != nil {
		h.keep = h.exp.Add(c.cfg.Keep)
	}
	c.hits[key] = h
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

// victimTries is how many values victim looks at for a stale one.
const victimTries = 8

// victim picks the value to drop for room; c.mu is held. Which one goes
// does not matter much (map iteration picks at random; a dropped value
// costs one load on its next use), but a stale one, kept only for an
// outage, goes before a fresh one when one of a few is.
func (c *Cache[V]) victim(now time.Time) string {
	var first string
	n := 0
	for k, h := range c.hits {
		if !now.Before(h.exp) {
			return k
		}
		if n == 0 {
			first = k
		}
		if n++; n == victimTries {
			break
		}
	}
	return first
}

// remember records a miss; c.mu is held.
func (c *Cache[V]) remember(key string, m miss) {
	if _, ok := c.misses[key]; !ok {
		if old := c.ring[c.next]; old != "" {
			// The oldest miss goes, or key's own earlier entry if it was
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

// MarkStale marks key's value stale (it changed): the next Get refreshes
// it, and serves it as it is only when the store cannot be read. The result
// of a load of key under way is not kept (it may be older than the change),
// and a miss of key is forgotten. Without Config.Stale it is Drop.
func (c *Cache[V]) MarkStale(key string) {
	c.mu.Lock()
	c.markLocked(key)
	delete(c.flights, key)
	delete(c.misses, key)
	c.mu.Unlock()
}

// markLocked marks key's value stale, or drops it without Config.Stale;
// c.mu is held.
func (c *Cache[V]) markLocked(key string) {
	h, ok := c.hits[key]
	switch {
	case !ok:
	case c.cfg.Stale == nil:
		c.dropLocked(key)
	default:
		h.exp, h.retry = time.Time{}, time.Time{}
		c.hits[key] = h
	}
}

// MarkAllStale marks every value stale, as MarkStale does, and forgets
// every miss: for when changes may have gone unnoticed (a change listener
// that reconnected).
func (c *Cache[V]) MarkAllStale() {
	c.mu.Lock()
	for k := range c.hits {
		c.markLocked(k)
	}
	clear(c.flights)
	clear(c.misses)
	clear(c.ring)
	c.next = 0
	c.mu.Unlock()
}

// Sweep forgets expired values and misses, so that entries nobody asks for
// again do not stay in memory; with Config.Stale, a stale value nobody
// asked for in Config.Keep.
func (c *Cache[V]) Sweep() {
	now := c.cfg.Now()
	c.mu.Lock()
	for k, h := range c.hits {
		if !now.Before(h.exp) && !now.Before(h.keep) {
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
