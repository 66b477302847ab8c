// Package memory is the in-process counter.Store: sharded
// tables with a bounded number of keys, each shared fairly by the groups
// (tenants) holding counters in it, one not used lately of a group past its
// share forgotten first (table.go), expired keys pruned, and bounded tables
// of leases and reservations (reserve.go). It holds across
// goroutines, not across processes: a single Tollgate instance's shared
// store, each instance's own counters (the gate's instance ceiling and per-IP
// L1 damper, the fallbacks of the sign-in and billing-link limits), and
// tests use it.
//
// memory imports only internal/counter and internal/limit. Like every
// counter backend it is an adapter: only cmd/tollgate (and tests) import it,
// and hand it to the rest as a counter.Store.
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// DefaultMaxKeys bounds a store made with MaxKeys zero.
const DefaultMaxKeys = 50_000

// maxShards is the number of shards of a store of 16,384 counters or more;
// a smaller store has fewer, each of at least minShardKeys. A group's
// (tenant's) share is decided in each shard (table.go), and its counters
// spread over the shards by their digests: holding k counters of a store
// of n shards, it holds about k/n ± √(k/n) in each. Shards of at least 256
// keep that spread small beside a share: in a store of 1,000 (two shards of
// 500), a tenant holding 200 holds at most 200 of a shard, within its share
// of 250 beside one other tenant; in one of 1,000,000 (64 of 15,625), a
// tenant holding 40 % holds 6,250 ± 79 of a shard, against 7,812.
const (
	maxShards    = 64
	minShardKeys = 256
)

// Config configures a Store.
type Config struct {
	// MaxKeys bounds the number of counters kept; when it is reached, one
	// expired or not written lately goes: the inserting group's own when
	// the new counter would take it past its share, else one of a group
	// past its share. A group (Request.Group, "" included) within its share
	// keeps its counters (table.go). Zero means DefaultMaxKeys.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PruneEvery is how often expired counters and leases are removed; zero
	// means every minute, negative never (Prune can still be called).
	PruneEvery time.Duration
	// MaxLeases bounds the leases kept, live or expired and not yet pruned;
	// an Acquire beyond it fails with counter.ErrUnavailable. Zero means
	// DefaultMaxLeases.
	MaxLeases int
	// MaxReservations bounds the reservations kept, live, settled and kept
	// for a repeat, or expired and not yet pruned; a Reserve beyond it
	// fails with counter.ErrUnavailable. Zero means DefaultMaxReservations.
	MaxReservations int
}

// Store is the in-memory counter.Store. It is safe for concurrent use; a
// Check takes the locks of the shards its keys live in, in index order.
type Store struct {
	shards [maxShards]shard
	// mask picks a key's shard: the shards are shards[:mask+1].
	mask uint64
	// seeds make a key's 128-bit digest (digest), by which it is held.
	seeds   [2]maphash.Seed
	now     func() time.Time
	stop    chan struct{}
	stopped sync.Once

	leaseMu sync.Mutex
	leases  leases

	// reserveMu is taken before any shard's lock.
	reserveMu    sync.Mutex
	reservations reservations
}

var _ counter.Store = (*Store)(nil)

// New returns a store; Close stops its pruning.
func New(cfg Config) *Store {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxLeases <= 0 {
		cfg.MaxLeases = DefaultMaxLeases
	}
	s := &Store{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, now: cfg.Now, stop: make(chan struct{})}
	s.leases.init(cfg.MaxLeases)
	if cfg.MaxReservations <= 0 {
		cfg.MaxReservations = DefaultMaxReservations
	}
	s.reservations = reservations{byGroup: map[string]map[string]*reservation{}, max: cfg.MaxReservations}
	n := maxShards
	for n > 1 && cfg.MaxKeys/n < minShardKeys {
		n /= 2
	}
	s.mask = uint64(n - 1)
	for i := range n {
		s.shards[i].max = max(1, cfg.MaxKeys/n)
	}
	every := cfg.PruneEvery
	if every == 0 {
		every = time.Minute
	}
	if every > 0 {
		go s.pruneLoop(every)
	}
	return s
}

// Close stops the background pruning. The store still answers afterwards.
func (s *Store) Close() error {
	s.stopped.Do(func() { close(s.stop) })
	return nil
}

func (s *Store) pruneLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Prune()
		}
	}
}

// Prune removes every counter whose state has expired, and every expired
// lease, expires the reservations due (releasing those that say so) and
// forgets settled ones no longer kept, and returns how many.
func (s *Store) Prune() int {
	now := s.now().UnixMicro()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.prune(now)
		sh.mu.Unlock()
	}
	s.leaseMu.Lock()
	n += s.leases.prune(now)
	s.leaseMu.Unlock()
	s.reserveMu.Lock()
	n += s.pruneReservations(now)
	s.reserveMu.Unlock()
	return n
}

// digestOf returns the digest of the key k (group, NUL, key).
func (s *Store) digestOf(k []byte) digest {
	return digest{maphash.Bytes(s.seeds[0], k), maphash.Bytes(s.seeds[1], k)}
}

// shardOf returns the index of the shard that holds the key of digest d.
func (s *Store) shardOf(d digest) int { return int(d.a & s.mask) }

// Len returns the number of counters held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += s.shards[i].n
		s.shards[i].mu.Unlock()
	}
	return n
}

// Check implements counter.Store. It fails only with counter.ErrInvalid.
func (s *Store) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	return s.CheckInto(ctx, req, nil)
}

// CheckInto implements counter.Store: Check, its decisions written into
// into when it has room.
func (s *Store) CheckInto(_ context.Context, req counter.Request, into []limit.Decision) (counter.Result, error) {
	if err := counter.Validate(req); err != nil {
		return counter.Result{}, err
	}
	now := s.clock(req.Now)
	// Up to eight items, the bookkeeping stays on the stack.
	var seenArr [8]counter.Seen
	seen := s.decide(req, now.UnixMicro(), seenArr[:0])
	// The answer is arithmetic on what was seen: out of the locks, which
	// every check of a hot key (one client address, one tenant) waits for.
	return counter.AnswerInto(req, seen, now, into), nil
}

// decide decides and counts req, which is valid, at us under the locks of
// its keys' shards, and appends what each item saw to seen.
func (s *Store) decide(req counter.Request, us int64, seen []counter.Seen) []counter.Seen {
	var keysArr [8]digest
	var idxArr, lockedArr [8]int
	keys, idx := s.digests(req, keysArr[:0], idxArr[:0])
	locked := s.lock(append(lockedArr[:0], idx...))
	// A bug's panic must not leave the shards locked.
	defer s.unlock(locked)
	var workArr [8]pending
	keep, seen := s.admit(req, keys, idx, us, workArr[:0], seen)
	s.store(keep, req.Group, us)
	return seen
}

// lock takes the locks of the shards idx names, in index order (the lock
// order), and returns the shards locked, for unlock; idx is sorted in place.
func (s *Store) lock(idx []int) []int {
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.shards[i].mu.Lock()
	}
	return idx
}

func (s *Store) unlock(locked []int) {
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
}

// digests appends to keys and idx each item's digest, of its key (group,
// NUL, key) built in one buffer, and the index of its shard.
func (s *Store) digests(req counter.Request, keys []digest, idx []int) ([]digest, []int) {
	var bufArr [512]byte
	size := 0
	for _, it := range req.Items {
		size = max(size, len(req.Group)+1+len(it.Key))
	}
	buf := bufArr[:]
	if size > len(buf) {
		buf = make([]byte, size)
	}
	for _, it := range req.Items {
		n := copy(buf, req.Group)
		buf[n] = 0
		n += 1 + copy(buf[n+1:], it.Key)
		d := s.digestOf(buf[:n])
		keys = append(keys, d)
		idx = append(idx, s.shardOf(d))
	}
	return keys, idx
}

// admit decides req's items, whose shards are locked, at us: it appends
// what each saw to seen, and returns the new states to keep (a prefix of
// work, appended to) with seen.
func (s *Store) admit(req counter.Request, keys []digest, idx []int, us int64, work []pending, seen []counter.Seen) ([]pending, []counter.Seen) {
	// Items are decided in order against working states, so an item on the
	// same key as an earlier one sees its tentative consumption, whichever
	// tier either is in. Only admitted items add to work, advisory or not.
	ceilingsOK, policiesOK := true, true
	// ceilingWork is how many entries of work the ceilings added: as many
	// as admitted, which an advisory ceiling's refusal makes fewer than
	// req.Ceilings.
	ceilingWork := 0
	for i, it := range req.Items {
		st := s.state(work, idx[i], keys[i])
		ok, next := limit.Admit(it.Algorithm, st, us, it.Cost, it.Limit, it.Window)
		seen = append(seen, counter.Seen{State: st, Allowed: ok})
		switch {
		case ok:
			work = append(work, pending{idx[i], keys[i], next, limit.Expiry(it.Algorithm, next, it.Window)})
			if i < req.Ceilings {
				ceilingWork = len(work)
			}
		case it.Advisory:
			// Refused, but it fails no tier.
		case i < req.Ceilings:
			ceilingsOK = false
		default:
			policiesOK = false
		}
	}
	// Each admitted item added one entry, so the first ceilingWork entries
	// are the ceilings'; written in order, the last entry on a key is the
	// state it keeps.
	switch {
	case ceilingsOK && policiesOK && req.Mode == counter.Consume:
		return work, seen
	case ceilingsOK:
		return work[:ceilingWork], seen
	}
	return nil, seen
}

// store writes keep, in order, into the locked shards at us; a new counter
// is group's.
func (s *Store) store(keep []pending, group string, us int64) {
	// The group's digest is made once, for the first new counter.
	var g uint64
	grouped := false
	for _, w := range keep {
		sh := &s.shards[w.shard]
		if sh.update(w.key, w.state, w.exp) {
			continue
		}
		if !grouped {
			g, grouped = maphash.String(s.seeds[0], group), true
		}
		sh.add(w.key, g, w.state, w.exp, us)
	}
}

// pending is an admitted item's new state, not yet stored.
type pending struct {
	shard int
	key   digest
	state limit.State
	exp   int64
}

// state is what the key k (in shard sh) holds for the next item of a
// request: the latest of the request's own pending states on it, else the
// stored one. The shard's lock is held.
func (s *Store) state(work []pending, sh int, k digest) limit.State {
	for j := len(work) - 1; j >= 0; j-- {
		if work[j].key == k {
			return work[j].state
		}
	}
	return s.shards[sh].get(k)
}

// CheckBatch implements counter.Store: each request is checked in turn,
// in memory there being no round trip to share.
func (s *Store) CheckBatch(ctx context.Context, reqs []counter.Request) ([]counter.Result, []error) {
	res, errs := make([]counter.Result, len(reqs)), make([]error, len(reqs))
	if counter.TooLarge(reqs, errs) {
		return res, errs
	}
	// The decisions of every request in one slice.
	n := 0
	for _, req := range reqs {
		n += len(req.Items)
	}
	decisions := make([]limit.Decision, n)
	// A batch is decided at one instant, as the other stores decide it,
	// but for requests that name their own.
	var now time.Time
	for i, req := range reqs {
		k := len(req.Items)
		if req.Now.IsZero() {
			if now.IsZero() {
				now = s.now()
			}
			req.Now = now
		}
		res[i], errs[i] = s.CheckInto(ctx, req, decisions[:k:k])
		decisions = decisions[k:]
	}
	return res, errs
}
