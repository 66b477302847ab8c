package memory

import (
	"testing"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/limit"
)

// TestShardTableAgainstAMap runs random puts, removals, prunes and
// evictions on one shard beside a Go map of what it should hold. Digests
// are drawn from a few dozen entry numbers, so probes collide, runs wrap
// round the table's end and removals move counters back; counters belong
// to one of four groups. After every step each counter the map holds is
// found with its state, the shard holds no other, every held counter is
// found where its probe reaches, the groups' counts are the map's, each
// group's ring holds its counters, and a full shard forgets exactly one
// counter for a new one, never the new one: one of the inserting group's
// own when with the new one it would hold more than its share, else one of
// a group holding more than its share; of that group's, the first from its
// hand that has expired or is unwritten since the hand last passed it, or
// with none such the first from its hand.
func TestShardTableAgainstAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sh := &shard{max: rapid.IntRange(1, 40).Draw(t, "max")}
		type held struct {
			st    limit.State
			exp   int64
			group uint64
		}
		want := map[digest]held{}
		keyGen := rapid.Custom(func(t *rapid.T) digest {
			return digest{a: rapid.Uint64Range(0, 3).Draw(t, "a"), b: rapid.Uint64Range(0, 47).Draw(t, "b")}
		})
		now := int64(1000)
		for step := range rapid.IntRange(1, 300).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				k := keyGen.Draw(t, "remove")
				if i := sh.find(k); i >= 0 {
					sh.removeAt(i)
				}
				delete(want, k)
			case 1:
				now += rapid.Int64Range(0, 50).Draw(t, "later")
				n := sh.prune(now)
				expired := 0
				for k, h := range want {
					if h.exp <= now {
						delete(want, k)
						expired++
					}
				}
				if n != expired {
					t.Fatalf("step %d: prune forgot %d counters, %d had expired", step, n, expired)
				}
			default:
				k := keyGen.Draw(t, "put")
				h := held{st: limit.State{Count: rapid.Int64Range(1, 1e6).Draw(t, "count")}, exp: now + rapid.Int64Range(-10, 100).Draw(t, "ttl")}
				old, had := want[k]
				if had {
					// A counter stays its group's.
					h.group = old.group
					if !sh.update(k, h.st, h.exp) {
						t.Fatalf("step %d: update of held counter %v failed", step, k)
					}
					want[k] = h
					break
				}
				h.group = rapid.Uint64Range(100, 103).Draw(t, "group")
				full := sh.n >= sh.max
				// Whose counter may go: the inserting group's own when, with
				// the new one, it would hold more than its share and it
				// holds one, else a group holding more than its share (the
				// share being max ÷ the groups holding counters, the
				// inserting one counted).
				counts := map[uint64]int{h.group: 0}
				for _, o := range want {
					counts[o.group]++
				}
				g := len(counts)
				own := counts[h.group] > 0 && (counts[h.group]+1)*g > sh.max
				mayGo := func(group uint64) bool {
					if own {
						return group == h.group
					}
					return counts[group]*g > sh.max
				}
				// Which of a group's goes: the first from its hand that has
				// expired or is unwritten since the hand passed it, else
				// (the hand unmarking all in a round) the first.
				next := map[uint64]digest{}
				for grp, ring := range rings(sh) {
					next[grp] = sh.entries[ring[0]].key
					for _, s := range ring {
						if e := sh.entries[s]; !e.written || e.expires <= now {
							next[grp] = e.key
							break
						}
					}
				}
				if sh.update(k, h.st, h.exp) {
					t.Fatalf("step %d: update of new counter %v stored it", step, k)
				}
				sh.add(k, h.group, h.st, h.exp, now)
				want[k] = h
				// A new counter is the last its group's hand comes to.
				if ring := rings(sh)[h.group]; len(ring) == 0 || int(ring[len(ring)-1]) != sh.find(k) {
					t.Fatalf("step %d: new counter %v in entry %d, its group's ring %v", step, k, sh.find(k), ring)
				}
				if full {
					var gone []digest
					for o := range want {
						if sh.find(o) < 0 {
							gone = append(gone, o)
						}
					}
					if len(gone) != 1 || gone[0] == k {
						t.Fatalf("step %d: a full shard took a new counter and forgot %v, want one other", step, gone)
					}
					o := want[gone[0]]
					if !mayGo(o.group) {
						t.Fatalf("step %d: group %d's new counter made group %d forget %v (counts %v, max %d)", step, h.group, o.group, gone[0], counts, sh.max)
					}
					if next[o.group] != gone[0] {
						t.Fatalf("step %d: group %d forgot %v, its hand came to %v first", step, o.group, gone[0], next[o.group])
					}
					delete(want, gone[0])
				}
			}
			if sh.n != len(want) || sh.n > sh.max {
				t.Fatalf("step %d: shard holds %d counters (max %d), want %d", step, sh.n, sh.max, len(want))
			}
			counts := map[uint64]int{}
			for _, h := range want {
				counts[h.group]++
			}
			if len(sh.byID) != len(counts) {
				t.Fatalf("step %d: shard counts %d groups, want %d", step, len(sh.byID), len(counts))
			}
			for g, n := range counts {
				i, ok := sh.byID[g]
				if !ok || sh.groups[i].n != n {
					t.Fatalf("step %d: group %d holds %d counters, shard counts %+v", step, g, n, sh.groups[i])
				}
			}
			for grp, ring := range rings(sh) {
				if len(ring) != counts[grp] {
					t.Fatalf("step %d: group %d's ring holds %d entries, the group %d counters", step, grp, len(ring), counts[grp])
				}
				for _, s := range ring {
					if e := sh.entries[s]; !e.used || sh.groups[e.group].id != grp {
						t.Fatalf("step %d: group %d's ring holds entry %d, %+v", step, grp, s, e)
					}
				}
			}
			for k, h := range want {
				i := sh.find(k)
				if i < 0 || sh.entries[i].state != h.st || sh.entries[i].expires != h.exp || sh.groups[sh.entries[i].group].id != h.group {
					t.Fatalf("step %d: counter %v not found as put (entry %d)", step, k, i)
				}
			}
			used := 0
			for i, e := range sh.entries {
				if e.used {
					used++
					if sh.find(e.key) != i {
						t.Fatalf("step %d: entry %d holds %v where its probe does not find it", step, i, e.key)
					}
				} else if e != (entry{}) {
					t.Fatalf("step %d: empty entry %d not zeroed", step, i)
				}
			}
			if used != sh.n || (len(sh.entries) > 0 && used*4 > len(sh.entries)*3) {
				t.Fatalf("step %d: %d entries of %d used, count %d", step, used, len(sh.entries), sh.n)
			}
		}
	})
}

// rings returns each group's ring of entries, from its hand, checking that
// every link goes both ways.
func rings(sh *shard) map[uint64][]uint32 {
	out := map[uint64][]uint32{}
	for _, i := range sh.byID {
		gr := sh.groups[i]
		var ring []uint32
		for s := gr.hand; s != noEntry && len(ring) <= len(sh.entries); {
			ring = append(ring, s)
			if n := sh.links[s].next; sh.links[n].prev != s {
				ring = append(ring, noEntry) // a one-way link: no group holds it
				break
			}
			if s = sh.links[s].next; s == gr.hand {
				break
			}
		}
		out[gr.id] = ring
	}
	return out
}

// TestEntryIsACacheLine: a counter is one cache line, its group's index
// included.
func TestEntryIsACacheLine(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 64 {
		t.Fatalf("entry is %d bytes, want 64", got)
	}
}
