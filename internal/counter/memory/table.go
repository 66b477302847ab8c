package memory

import (
	"sync"

	"github.com/tollgate/tollgate/internal/limit"
)

// A shard holds its counters in an open-addressed table of entries, each
// one cache line with its key's digest in it, found by linear probing from
// the digest: deciding a counter reads one line of memory, two when its
// probe runs on. (A map from digest to a slice index and a ring of entries
// ordered by last use read five lines a counter, most of them cache misses
// with a hundred thousand counters: a third of a batched check's CPU.)
//
// Nothing in a shard is a pointer the garbage collector follows: a million
// counters are 64 arrays.
//
// A shard is shared fairly by the groups (tenants) holding counters in it:
// a group's share is max ÷ the groups holding counters (the inserting one
// counted). When a shard is full, a new counter takes the place of one of
// the inserting group's own when with the new one it would hold more than
// its share (its limits, no one else's, become loose), else of one of a
// group holding more than its share: never of a group within its share.
// (Refusing the new counter instead would answer the group's checks with
// errors, which its fail_mode would turn into allows or refusals of every
// new subject.)
//
// Of that group's counters, one not used lately goes (CLOCK, the usual
// approximation of least recently used): each group's counters are a ring
// (links, beside the entries), round which the group's hand goes, forgetting
// the first counter that has expired or has not been written since the
// hand last passed it, and marking the others as passed. A new counter
// joins its ring just behind the hand, unmarked, so a stream of subjects
// seen once forgets its own before a counter written twice. A ring per
// group, not one hand over the entries, finds a group's counter in a few
// steps however few of the entries are the group's: one hand passed over a
// thousand entries of others for each of a group's when a thousand tenants
// filled the store (five times the CPU a check). The rings cost 8 bytes a
// entry, about 16 a counter (135 → 151 bytes). Expired counters of the
// other groups wait for prune.
type shard struct {
	mu      sync.Mutex
	entries []entry // a power of two long, at most three quarters full; nil when empty
	links   []link  // beside entries: the ring of each counter's group
	n       int     // counters held
	max     int     // counters held at most

	// groups are the groups holding counters, and some that held them
	// (free), each entry's group an index in it; byID finds a group holding
	// counters by its digest.
	groups []group
	byID   map[uint64]uint32
	free   []uint32
	// over is the group looked at first for one holding more than its
	// share: the last one found.
	over uint32
}

// group is one group's (Request.Group's) counters in a shard.
type group struct {
	id   uint64 // the group's digest
	n    int    // counters held, and while add runs the one it adds
	hand uint32 // the entry of the counter its hand looks at next; noEntry when none
}

// link is an entry's neighbours in its group's ring.
type link struct{ prev, next uint32 }

const noEntry = ^uint32(0)

// digest is a key's 128-bit digest (the store's seeds, random per process,
// key it): two keys share one with a chance of about 2^-128, and a client
// cannot choose keys that do, not knowing the seeds. Its a picks the shard,
// its b the entry.
type digest struct{ a, b uint64 }

// entry is one cell of the table: 64 bytes, a cache line.
type entry struct {
	key     digest
	state   limit.State
	expires int64  // Unix µs
	used    bool   // the entry holds a counter
	written bool   // written since the clock hand last passed it
	group   uint32 // the index of its group in the shard's groups
}

const minEntries = 16

// home is the entry where k's probe starts.
func (sh *shard) home(k digest) int { return int(k.b) & (len(sh.entries) - 1) }

// find returns the entry holding k, or -1.
func (sh *shard) find(k digest) int {
	if sh.n == 0 {
		return -1
	}
	mask := len(sh.entries) - 1
	for i := sh.home(k); ; i = (i + 1) & mask {
		e := &sh.entries[i]
		if !e.used {
			return -1
		}
		if e.key == k {
			return i
		}
	}
}

// get returns the state k holds, or the zero state.
func (sh *shard) get(k digest) limit.State {
	if i := sh.find(k); i >= 0 {
		return sh.entries[i].state
	}
	return limit.State{}
}

// update stores a state for k if the shard holds k, and reports whether it
// did.
func (sh *shard) update(k digest, st limit.State, exp int64) bool {
	i := sh.find(k)
	if i < 0 {
		return false
	}
	e := &sh.entries[i]
	e.state, e.expires, e.written = st, exp, true
	return true
}

// add stores a state for k, which the shard does not hold, as a counter of
// the group of digest g, making room when the shard is full (now, in Unix
// µs, says which counters have expired).
func (sh *shard) add(k digest, g uint64, st limit.State, exp, now int64) {
	gi := sh.group(g)
	// Counted first, the new counter keeps its group from being freed with
	// the group's last other counter.
	sh.groups[gi].n++
	if sh.n >= sh.max {
		sh.evict(now, gi)
	}
	if (sh.n+1)*4 > len(sh.entries)*3 {
		sh.grow()
	}
	sh.join(gi, sh.insert(entry{key: k, state: st, expires: exp, used: true, group: gi}))
}

// group returns the index of the group of digest g, added holding no
// counters if it held none.
func (sh *shard) group(g uint64) uint32 {
	if i, ok := sh.byID[g]; ok {
		return i
	}
	if sh.byID == nil {
		sh.byID = map[uint64]uint32{}
	}
	var i uint32
	if n := len(sh.free); n > 0 {
		i, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		i = uint32(len(sh.groups))
		sh.groups = append(sh.groups, group{})
	}
	sh.groups[i] = group{id: g, hand: noEntry}
	sh.byID[g] = i
	return i
}

// insert places e in the first free entry of its probe, there being one,
// and returns the entry.
func (sh *shard) insert(e entry) int {
	mask := len(sh.entries) - 1
	i := sh.home(e.key)
	for sh.entries[i].used {
		i = (i + 1) & mask
	}
	sh.entries[i] = e
	sh.n++
	return i
}

// join links entry i into the ring of group gi, just behind its hand: the
// last the hand comes to.
func (sh *shard) join(gi uint32, i int) {
	gr := &sh.groups[gi]
	s := uint32(i)
	if gr.hand == noEntry {
		sh.links[i] = link{s, s}
		gr.hand = s
		return
	}
	h := gr.hand
	p := sh.links[h].prev
	sh.links[i] = link{prev: p, next: h}
	sh.links[p].next = s
	sh.links[h].prev = s
}

// grow doubles the table and places every counter again. The rings are
// made again in the order of the old entries, read one after the other
// (following the old rings would read them in no order); the counters
// keep their marks.
func (sh *shard) grow() {
	old := sh.entries
	sh.entries = make([]entry, max(minEntries, 2*len(old)))
	sh.links = make([]link, len(sh.entries))
	sh.n = 0
	for i := range sh.groups {
		sh.groups[i].hand = noEntry
	}
	for _, e := range old {
		if e.used {
			sh.join(e.group, sh.insert(e))
		}
	}
}

// evict forgets one counter to make room for a new one of group gi, already
// counted in gi: of gi's own when gi, with the new counter, holds more than
// its share and holds another; else of a group holding more than its share,
// of which there is one (the shard is full, so the other groups hold more
// than their shares' sum). Of those, the first from the group's hand that
// has expired or has not been written since the hand last passed it: the
// hand goes round at most once and a step further, the first round
// unmarking every counter.
func (sh *shard) evict(now int64, gi uint32) {
	// With g groups holding counters, gi among them, a share is max/g;
	// compared multiplied by g to stay in integers.
	g := len(sh.byID)
	if n := sh.groups[gi].n; n == 1 || n*g <= sh.max {
		gi = sh.overShare(g)
	}
	gr := &sh.groups[gi]
	for {
		h := gr.hand
		e := &sh.entries[h]
		if !e.written || e.expires <= now {
			sh.removeAt(int(h))
			return
		}
		e.written = false
		gr.hand = sh.links[h].next
	}
}

// overShare returns a group holding more than its share among g, holding
// counters: there is one, the shard being full and the inserting group
// within its share. It looks from the last one found on, which a flood
// keeps over its share. (Were there none, it would return the group
// holding most.)
func (sh *shard) overShare(g int) uint32 {
	most := sh.over
	for range len(sh.groups) {
		gi := sh.over
		gr := &sh.groups[gi]
		if gr.hand != noEntry {
			if gr.n*g > sh.max {
				return gi
			}
			if m := &sh.groups[most]; m.hand == noEntry || gr.n > m.n {
				most = gi
			}
		}
		sh.over = (gi + 1) % uint32(len(sh.groups))
	}
	return most
}

// removeAt empties entry i, moving back the counters after it in its run
// that could not be found past the hole (backward-shift deletion: linear
// probing without tombstones), each ring following its counters.
func (sh *shard) removeAt(i int) {
	gi := sh.entries[i].group
	sh.leave(gi, uint32(i))
	mask := len(sh.entries) - 1
	for j := (i + 1) & mask; sh.entries[j].used; j = (j + 1) & mask {
		// The counter in j stays when its home is in (i, j], cyclically:
		// its probe reaches j without passing i.
		h := sh.home(sh.entries[j].key)
		if i <= j {
			if i < h && h <= j {
				continue
			}
		} else if i < h || h <= j {
			continue
		}
		sh.move(j, i)
		i = j
	}
	sh.entries[i] = entry{}
	sh.n--
	gr := &sh.groups[gi]
	gr.n--
	if gr.n == 0 {
		delete(sh.byID, gr.id)
		sh.free = append(sh.free, gi)
	}
}

// leave unlinks entry s from the ring of group gi; its hand moves on if it
// was at s.
func (sh *shard) leave(gi uint32, s uint32) {
	gr := &sh.groups[gi]
	l := sh.links[s]
	if l.next == s {
		gr.hand = noEntry
		return
	}
	sh.links[l.prev].next = l.next
	sh.links[l.next].prev = l.prev
	if gr.hand == s {
		gr.hand = l.next
	}
}

// move moves the counter in entry from to the empty entry to, its ring
// following.
func (sh *shard) move(from, to int) {
	sh.entries[to] = sh.entries[from]
	f, t := uint32(from), uint32(to)
	gr := &sh.groups[sh.entries[to].group]
	if l := sh.links[from]; l.next == f {
		sh.links[to] = link{t, t}
	} else {
		sh.links[to] = l
		sh.links[l.prev].next = t
		sh.links[l.next].prev = t
	}
	if gr.hand == f {
		gr.hand = t
	}
}

// prune forgets every counter expired at now and returns how many.
func (sh *shard) prune(now int64) int {
	n := 0
	for i := 0; i < len(sh.entries); i++ {
		// A removal moves a later counter into i: it is looked at too.
		// Counters only move back, into the hole, so none is passed over.
		for sh.entries[i].used && sh.entries[i].expires <= now {
			sh.removeAt(i)
			n++
		}
	}
	return n
}
