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
// When a shard is full, a new counter takes the place of one not used lately
// (CLOCK, the usual approximation of least recently used): a hand goes round
// the slots, forgetting the first counter that has expired or has not been
// written since the hand last passed it, and marking the others as passed.
// A new counter starts unmarked, so a stream of subjects seen once forgets
// its own before a counter written twice.
type shard struct {
	mu    sync.Mutex
	slots []entry // a power of two long, at most three quarters full; nil when empty
	n     int     // counters held
	max   int     // counters held at most
	hand  int     // the clock hand: the next slot it looks at
}

// digest is a key's 128-bit digest (the store's seeds, random per process,
// key it): two keys share one with a chance of about 2^-128, and a client
// cannot choose keys that do, not knowing the seeds. Its a picks the shard,
// its b the slot.
type digest struct{ a, b uint64 }

// entry is a slot: 64 bytes, a cache line.
type entry struct {
	key     digest
	state   limit.State
	expires int64 // Unix µs
	used    bool  // the slot holds a counter
	written bool  // written since the clock hand last passed it
}

const minSlots = 16

// home is the slot where k's probe starts.
func (sh *shard) home(k digest) int { return int(k.b) & (len(sh.slots) - 1) }

// find returns the slot holding k, or -1.
func (sh *shard) find(k digest) int {
	if sh.n == 0 {
		return -1
	}
	mask := len(sh.slots) - 1
	for i := sh.home(k); ; i = (i + 1) & mask {
		e := &sh.slots[i]
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
		return sh.slots[i].state
	}
	return limit.State{}
}

// put stores a state for k, making room when the shard is full (now, in
// Unix µs, says which counters have expired).
func (sh *shard) put(k digest, st limit.State, exp, now int64) {
	if i := sh.find(k); i >= 0 {
		e := &sh.slots[i]
		e.state, e.expires, e.written = st, exp, true
		return
	}
	if sh.n >= sh.max {
		sh.evict(now)
	}
	if (sh.n+1)*4 > len(sh.slots)*3 {
		sh.grow()
	}
	sh.insert(entry{key: k, state: st, expires: exp, used: true})
}

// insert places e in the first free slot of its probe; there is one.
func (sh *shard) insert(e entry) {
	mask := len(sh.slots) - 1
	i := sh.home(e.key)
	for sh.slots[i].used {
		i = (i + 1) & mask
	}
	sh.slots[i] = e
	sh.n++
}

// grow doubles the table and places every counter again.
func (sh *shard) grow() {
	old := sh.slots
	sh.slots = make([]entry, max(minSlots, 2*len(old)))
	sh.n = 0
	for _, e := range old {
		if e.used {
			sh.insert(e)
		}
	}
	sh.hand = 0
}

// evict forgets one counter: the first, from the hand on, that has expired
// or has not been written since the hand last passed it. It goes round at
// most once and a slot further, the first round unmarking every counter.
func (sh *shard) evict(now int64) {
	mask := len(sh.slots) - 1
	for {
		h := sh.hand & mask
		e := &sh.slots[h]
		if e.used {
			if !e.written || e.expires <= now {
				// The hand stays: a counter moved back into h is looked at next.
				sh.removeAt(h)
				return
			}
			e.written = false
		}
		sh.hand = h + 1
	}
}

// removeAt empties slot i, moving back the counters after it in its run
// that could not be found past the hole (backward-shift deletion: linear
// probing without tombstones).
func (sh *shard) removeAt(i int) {
	mask := len(sh.slots) - 1
	for j := (i + 1) & mask; sh.slots[j].used; j = (j + 1) & mask {
		// The counter in j stays when its home is in (i, j], cyclically:
		// its probe reaches j without passing i.
		h := sh.home(sh.slots[j].key)
		if i <= j {
			if i < h && h <= j {
				continue
			}
		} else if i < h || h <= j {
			continue
		}
		sh.slots[i] = sh.slots[j]
		i = j
	}
	sh.slots[i] = entry{}
	sh.n--
}

// prune forgets every counter expired at now and returns how many.
func (sh *shard) prune(now int64) int {
	n := 0
	for i := 0; i < len(sh.slots); i++ {
		// A removal moves a later counter into i: it is looked at too.
		// Counters only move back, into the hole, so none is passed over.
		for sh.slots[i].used && sh.slots[i].expires <= now {
			sh.removeAt(i)
			n++
		}
	}
	return n
}
