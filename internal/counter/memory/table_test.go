package memory

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/limit"
)

// TestShardTableAgainstAMap runs random puts, removals, prunes and
// evictions on one shard beside a Go map of what it should hold. Digests
// are drawn from a few dozen slot numbers, so probes collide, runs wrap
// round the table's end and removals move counters back. After every step
// each counter the map holds is found with its state, the shard holds no
// other, every held counter is found where its probe reaches, and a full
// shard forgets exactly one counter for a new one, never the new one, and
// only one unwritten since the hand last passed it or expired.
func TestShardTableAgainstAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sh := &shard{max: rapid.IntRange(1, 40).Draw(t, "max")}
		type held struct {
			st  limit.State
			exp int64
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
				_, had := want[k]
				full := sh.n >= sh.max
				// What the hand may forget: the counters unwritten since it
				// last passed them, or expired.
				forgettable := map[digest]bool{}
				for _, e := range sh.slots {
					if e.used && (!e.written || e.expires <= now) {
						forgettable[e.key] = true
					}
				}
				sh.put(k, h.st, h.exp, now)
				want[k] = h
				if !had && full {
					var gone []digest
					for o := range want {
						if sh.find(o) < 0 {
							gone = append(gone, o)
						}
					}
					if len(gone) != 1 || gone[0] == k {
						t.Fatalf("step %d: a full shard took a new counter and forgot %v, want one other", step, gone)
					}
					// A round of the hand unmarks every counter: with none
					// forgettable before, any may go.
					if len(forgettable) > 0 && !forgettable[gone[0]] {
						t.Fatalf("step %d: forgot %v, written since the hand passed and not expired, while %d others were not", step, gone[0], len(forgettable))
					}
					delete(want, gone[0])
				}
			}
			if sh.n != len(want) || sh.n > sh.max {
				t.Fatalf("step %d: shard holds %d counters (max %d), want %d", step, sh.n, sh.max, len(want))
			}
			for k, h := range want {
				i := sh.find(k)
				if i < 0 || sh.slots[i].state != h.st || sh.slots[i].expires != h.exp {
					t.Fatalf("step %d: counter %v not found as put (slot %d)", step, k, i)
				}
			}
			used := 0
			for i, e := range sh.slots {
				if e.used {
					used++
					if sh.find(e.key) != i {
						t.Fatalf("step %d: slot %d holds %v where its probe does not find it", step, i, e.key)
					}
				} else if e != (entry{}) {
					t.Fatalf("step %d: empty slot %d not zeroed", step, i)
				}
			}
			if used != sh.n || (len(sh.slots) > 0 && used*4 > len(sh.slots)*3) {
				t.Fatalf("step %d: %d slots of %d used, count %d", step, used, len(sh.slots), sh.n)
			}
		}
	})
}
