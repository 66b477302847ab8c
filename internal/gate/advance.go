package gate

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// Tollgate's own ceilings (per-IP L2, the tenant's quotas, the allotment,
// the sandbox) are large numbers that need not cost a shared write per
// check. An instance takes an advance of units from a ceiling's shared counter:
// the units are consumed in the store when they are taken, in the same
// round trip as a check that needs the store anyway, so that all instances
// together never admit more than the limit. The instance then spends them
// locally, one per request, and lets what it did not spend lapse when the
// counter's window (for a sliding window, its current bucket) ends or the
// process stops. Units taken early only make the shared counter
// conservative: a unit is counted no later than it is used.
//
// An advance's size adapts: about advanceTraffic of this instance's recent
// traffic on the counter, never more than an advanceShare of what the counter
// had left at the last grant, nor than the traffic expected before the
// window ends; and 1 (an exact round trip per request, as without advances)
// when traffic is slow or the counter is near its limit. So one instance
// alone stays exact (the 61st request at 60 a minute is refused: every unit
// it took, it spent), and several instances under-admit only by what the
// others hold when the counter runs out, which the share keeps small.
//
// In a counter request an advance is two items on the ceiling's key: the
// ceiling itself at cost 1, which decides the request exactly as it would
// without advances, then an advisory top-up for the rest of the advance, which
// is granted only when the counter has room for all of it and never refuses
// anything (counter.Item.Advisory).
const (
	// advanceTraffic is how much of an instance's traffic one advance covers.
	advanceTraffic = 200 * time.Millisecond
	// advanceShare bounds an advance by what the counter had left.
	advanceShare = 8
	// maxAdvance bounds an advance in units whatever the traffic.
	maxAdvance = 1_000_000
	// advanceShards and advancesPerShard bound the advances an instance holds.
	advanceShards    = 16
	advancesPerShard = 1024
	// advancesPerTenant is a tenant's share of a shard: past it, the
	// tenant's next advance makes room from its own, so that one tenant's
	// many counters (per-IP counters of many client addresses) cannot evict
	// its neighbours' advances; it takes eight such tenants to fill a shard.
	advancesPerTenant = advancesPerShard / 8
)

// advances are this instance's advances, by tenant and counter key. Safe for
// concurrent use; bounded (advanceShards × advancesPerShard entries, of which
// a tenant holds at most advanceShards × advancesPerTenant), an entry evicted
// when room is needed letting its units lapse.
type advances struct {
	seed   maphash.Seed
	shards [advanceShards]advanceShard
}

type advanceShard struct {
	// mu guards m and every advance's fields but cur, which take reads and
	// spends without waiting: a hot ceiling (a tenant's quota) is taken
	// from by every check of the tenant, and take holds the lock for
	// reading only, so those checks never wait for each other.
	mu sync.RWMutex
	m  map[advanceID]*advance
	// tenants counts m's entries by group (tenant).
	tenants map[string]int
}

// advanceID names a counter of a tenant: the counter request's Group and the
// item's Key.
type advanceID struct{ group, key string }

// advance is one counter's advance. Times are this instance's clock.
type advance struct {
	// cur holds the units to spend: replaced, never changed but for its
	// units, at each grant.
	cur   atomic.Pointer[units]
	limit int64
	// rate is the units a second this instance spent, estimated at each
	// grant from how fast the previous advance went.
	rate    float64
	takenAt time.Time
	// granted is what the advance held right after its last grant (units
	// carried over from the one before included), and the unit the
	// request that took it spent: spent since, at the next, they give the
	// rate.
	granted int64
	// renewing is set while a request renews the advance with a top-up, so
	// that requests meanwhile ask for one unit each rather than an advance each;
	// it lapses at renewing's time in case that request never comes back.
	renewing time.Time
}

// units are a grant's units not yet spent, until end; remaining is what the
// counter had left after the grant, as the store said: the share of it
// other instances may still take.
type units struct {
	end       time.Time
	remaining int64
	left      atomic.Int64
}

// retired is what a replaced grant's left is set to: no take spends from it
// again (a take that loaded it still finds nothing, and goes to the store).
const retired = math.MinInt64 / 2

// spend takes n of u's units at now, if it holds n: all of them or none.
func (u *units) spend(now time.Time, n int64) bool {
	if u == nil || !now.Before(u.end) {
		return false
	}
	for {
		left := u.left.Load()
		if left < n {
			return false
		}
		if u.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// held is how many units u holds, at most: 0 for none or retired ones.
func (u *units) held() int64 {
	if u == nil {
		return 0
	}
	return max(u.left.Load(), 0)
}

func newAdvances() *advances {
	l := &advances{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[advanceID]*advance)
		l.shards[i].tenants = make(map[string]int)
	}
	return l
}

func (l *advances) shard(k advanceID) *advanceShard {
	return &l.shards[(maphash.String(l.seed, k.key)^maphash.String(l.seed, k.group))%advanceShards]
}

// take spends one unit of the advance on k, if there is one with units left
// at now, and reports it with what the counter has left as far as this
// instance knows (what it holds and what the store had after the last
// grant), when the advance lapses, and the units it was spent from, for
// giveBack.
func (l *advances) take(k advanceID, now time.Time) (ok bool, remaining int64, resetIn time.Duration, from *units) {
	return l.takeN(k, now, 1)
}

// takeN is take for n requests at once (a batch's checks): it spends n
// units if the advance holds n, else none, and remaining is what the
// counter has left after the n.
func (l *advances) takeN(k advanceID, now time.Time, n int64) (ok bool, remaining int64, resetIn time.Duration, from *units) {
	sh := l.shard(k)
	sh.mu.RLock()
	ls := sh.m[k]
	sh.mu.RUnlock()
	if ls == nil {
		return false, 0, 0, nil
	}
	u := ls.cur.Load()
	if !u.spend(now, n) {
		return false, 0, 0, nil
	}
	return true, u.remaining + u.held(), u.end.Sub(now), u
}

// giveBack returns a unit take spent from u, for a request another ceiling
// refused: its ceilings are all counted or none is. A unit given back to
// units a grant has replaced since lapses.
func (l *advances) giveBack(u *units) {
	if u != nil {
		u.left.Add(1)
	}
}

// size is how many units to ask for on k at now, to lapse at end: 1 when
// nothing is known of the traffic on it, or another request is renewing
// the advance already.
func (l *advances) size(k advanceID, now, end time.Time) int64 {
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[k].size(now, end)
}

// size is advances.size for ls, under its shard's lock.
func (ls *advance) size(now, end time.Time) int64 {
	if ls == nil || now.Before(ls.renewing) {
		return 1
	}
	var remaining int64
	if u := ls.cur.Load(); u != nil {
		remaining = u.remaining
	}
	want := ls.nextRate(now) * min(advanceTraffic, end.Sub(now)).Seconds()
	n := min(want, float64(remaining)/advanceShare, maxAdvance)
	if math.IsNaN(n) || n < 2 {
		return 1
	}
	ls.renewing = now.Add(time.Second)
	return int64(n)
}

// refillSize is how many units a batch of n checks that the advance on k
// paid at now (takeN) is to ask for, to lapse at end, so that the advance
// does not run out under the batches that follow: 0 while it holds enough
// (more than two such batches, and half of its last grant), while another
// request is renewing it, or when nothing is known of the traffic on it.
// Asked for on its own (a refill: an advisory item, the batch's other
// requests beside it), the units come before the advance runs out, and the
// batches' checks keep finding their units paid, their store requests their
// policies' items alone: without it each batch that found the advance short
// sent a ceiling item for each of its checks the advance could not pay.
func (l *advances) refillSize(k advanceID, now, end time.Time, n int64) int64 {
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[k]
	if ls == nil {
		return 0
	}
	if held := ls.cur.Load().held(); held > 2*n && held > ls.granted/2 {
		return 0
	}
	if size := ls.size(now, end); size > 1 {
		return size
	}
	return 0
}

// grant records granted units on k, one of which the request at now spent,
// lapsing at end; remaining is what the store said the counter had left
// after them. Units of an advance that has not lapsed are kept: requests that
// renewed it at once add up.
func (l *advances) grant(k advanceID, now, end time.Time, lim, granted, remaining int64) {
	l.record(k, now, end, lim, granted, 1, remaining)
}

// refill records the granted units of a refill (refillSize) on k, none of
// them spent, as grant does.
func (l *advances) refill(k advanceID, now, end time.Time, lim, granted, remaining int64) {
	l.record(k, now, end, lim, granted, 0, remaining)
}

// record is grant and refill: granted units on k, spent of them by the
// request at now.
func (l *advances) record(k advanceID, now, end time.Time, lim, granted, spent, remaining int64) {
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[k]
	if ls == nil {
		switch {
		case sh.tenants[k.group] >= advancesPerTenant:
			sh.evictOwn(k.group, now)
		case len(sh.m) >= advancesPerShard:
			sh.evict(now)
		}
		ls = &advance{}
		sh.m[k] = ls
		sh.tenants[k.group]++
	}
	if granted > 1 {
		ls.renewing = time.Time{}
	}
	old := ls.cur.Load()
	if granted == 1 && spent == 1 && old.held() > 0 && now.Before(old.end) {
		// One unit asked for and spent while the advance still holds units:
		// the advance is as it was, but for what the store says is left.
		next := &units{end: old.end, remaining: remaining}
		next.left.Store(max(old.left.Swap(retired), 0))
		ls.cur.Store(next)
		return
	}
	// A grant at the instant of the last (a batch's checks renewing one by
	// one, at the batch's instant) measures no rate: its units join the
	// last grant's, for the next grant to measure.
	again := !now.After(ls.takenAt)
	if !again {
		ls.rate = ls.nextRate(now)
	}
	next := &units{end: end, remaining: remaining}
	left := granted - spent
	if old != nil {
		// Whatever takes spent of old's units until now stays spent; what
		// is left moves over, if it is of the same window (its end as two
		// requests' clocks put it), or lapses.
		held := max(old.left.Swap(retired), 0)
		if now.Before(old.end) && old.end.Sub(end).Abs() < time.Second/2 {
			left += held
		}
	}
	next.left.Store(left)
	ls.cur.Store(next)
	ls.limit = lim
	if again {
		ls.granted += granted
		return
	}
	ls.takenAt, ls.granted = now, left+spent
}

// nextRate is the rate estimate once the advance is renewed at now: the
// previous estimate averaged with how fast the advance's spent units went.
func (ls *advance) nextRate(now time.Time) float64 {
	spent := ls.granted - ls.cur.Load().held()
	dt := now.Sub(ls.takenAt).Seconds()
	if spent <= 0 || dt <= 0 {
		return ls.rate / 2
	}
	return (ls.rate + float64(spent)/dt) / 2
}

// evict drops one advance to make room: a lapsed or spent one if the first
// few looked at hold one, else any. Its units lapse.
func (sh *advanceShard) evict(now time.Time) {
	seen := 0
	var any advanceID
	for k, ls := range sh.m {
		if u := ls.cur.Load(); u.held() <= 0 || !now.Before(u.end) {
			sh.remove(k)
			return
		}
		any = k
		if seen++; seen == 8 {
			break
		}
	}
	sh.remove(any)
}

// evictOwn drops one of group's advances to make room for another of its
// own: a lapsed or spent one if the first few of its own looked at hold
// one, else any of its own. A tenant at its share holds an eighth of the
// shard or more, so the walk finds its own within a few dozen entries.
func (sh *advanceShard) evictOwn(group string, now time.Time) {
	seen := 0
	var any advanceID
	for k, ls := range sh.m {
		if k.group != group {
			continue
		}
		if u := ls.cur.Load(); u.held() <= 0 || !now.Before(u.end) {
			sh.remove(k)
			return
		}
		any = k
		if seen++; seen == 8 {
			break
		}
	}
	if seen > 0 {
		sh.remove(any)
	}
}

// remove drops k's advance and its count.
func (sh *advanceShard) remove(k advanceID) {
	if _, ok := sh.m[k]; !ok {
		return
	}
	delete(sh.m, k)
	if sh.tenants[k.group]--; sh.tenants[k.group] <= 0 {
		delete(sh.tenants, k.group)
	}
}

// advanceEnd is when units taken at storeNow on a counter of window w lapse,
// on this instance's clock at now: the end of the window, or of a sliding
// window's current bucket.
func advanceEnd(w limit.Window, now, storeNow time.Time) time.Time {
	_, end := w.Bounds(storeNow.UnixMicro())
	return now.Add(time.Duration(end-storeNow.UnixMicro()) * time.Microsecond)
}

// advanceItems are the counter items of a ceiling whose advance has run out:
// the ceiling at cost 1 and, when the advance is to be larger, an advisory
// top-up for the rest on the same key.
func advanceItems(c counter.Item, size int64) []counter.Item {
	if size <= 1 {
		return []counter.Item{c}
	}
	top := c
	top.Cost = min(size-1, c.Limit)
	top.Advisory = true
	return []counter.Item{c, top}
}
