package usage

import (
	"context"
	"sync"

	"github.com/tollgate/tollgate/internal/kit/atomicmap"
	"github.com/tollgate/tollgate/internal/kit/writebehind"
)

// buckets holds counts by bucket (the Unix seconds of a minute's or an
// hour's start) and cell.
type buckets[C comparable] map[int64]map[C]int64

// tally counts cells of type C per bucket in memory, for a write-behind
// recorder (Recorder's minutes, PolicyRecorder's hours). It is safe for
// concurrent use. The count of a cell of the newest bucket is one atomic
// add on a lock-free map (hot); a new cell, or an older bucket's, takes mu
// for a map increment. At most maxPending cells wait; beyond them the
// oldest bucket is dropped (counted in drops).
type tally[C comparable] struct {
	maxPending int
	drops      *writebehind.Drops

	mu      sync.Mutex
	pending buckets[C]
	rows    int // cells in pending
	// hot holds a counter for each cell of the newest bucket observed
	// (hotBucket) that has a row: add adds to it without taking mu, which
	// every check of every tenant would otherwise wait for. Counts move
	// from hot to pending (fold) before anything reads pending.
	hot       atomicmap.Map[slot[C]]
	hotBucket int64
}

// slot is a cell of a bucket.
type slot[C comparable] struct {
	bucket int64
	cell   C
}

func newTally[C comparable](maxPending int, drops *writebehind.Drops) *tally[C] {
	return &tally[C]{maxPending: maxPending, drops: drops, pending: buckets[C]{}}
}

// add counts n in cell c of bucket b. It never blocks on I/O.
func (t *tally[C]) add(b int64, c C, n int64) {
	k := slot[C]{b, c}
	if h, ok := t.hot.Load(k); ok {
		if _, counted := h.Add(n); counted {
			return
		}
		// Retired: its bucket is done, or a fold found it idle.
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b > t.hotBucket {
		// The newest bucket moved on: the hot counts go to pending and
		// retire.
		t.hot.RetireAll(func(k slot[C], n int64) { t.addLocked(k.bucket, k.cell, n) })
		t.hotBucket = b
	}
	t.addLocked(b, c, n)
	if _, kept := t.pending[b][c]; kept && b == t.hotBucket {
		// Another add of k may have made its count while this one waited
		// for mu: Ensure keeps it. (Counts are made and dropped only under
		// mu.)
		t.hot.Ensure(k)
	}
}

// foldLocked moves the hot counts into pending, as rows of their own where
// a flush took theirs; the counts idle since the last fold leave hot. t.mu
// is held.
func (t *tally[C]) foldLocked() {
	t.hot.Take(func(k slot[C], n int64) { t.addLocked(k.bucket, k.cell, n) })
}

// addLocked adds n to a cell, making room by dropping the oldest bucket
// when a new cell would exceed maxPending.
func (t *tally[C]) addLocked(b int64, c C, n int64) {
	m := t.pending[b]
	if _, ok := m[c]; !ok {
		if t.rows >= t.maxPending && !t.evictOlderLocked(b) {
			// This bucket is the oldest held: it is the one to drop.
			t.drops.Add(n)
			return
		}
		if m == nil {
			m = make(map[C]int64)
			t.pending[b] = m
		}
		t.rows++
	}
	m[c] += n
}

// evictOlderLocked drops the oldest bucket held if it is older than b, and
// reports whether it did. It scans the buckets, a short list, and runs only
// at the cap.
func (t *tally[C]) evictOlderLocked(b int64) bool {
	oldest, found := int64(0), false
	for k := range t.pending {
		if !found || k < oldest {
			oldest, found = k, true
		}
	}
	if !found || oldest >= b {
		return false
	}
	for _, n := range t.pending[oldest] {
		t.drops.Add(n)
	}
	t.rows -= len(t.pending[oldest])
	delete(t.pending, oldest)
	return true
}

// take returns the pending counts and their number of cells, and leaves
// none pending.
func (t *tally[C]) take() (buckets[C], int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.foldLocked()
	p, n := t.pending, t.rows
	t.pending, t.rows = buckets[C]{}, 0
	return p, n
}

// read calls f with the pending counts, which it must not keep or change.
func (t *tally[C]) read(f func(buckets[C])) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.foldLocked()
	f(t.pending)
}

// len returns the number of cells pending.
func (t *tally[C]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.foldLocked()
	return t.rows
}

// bucketOf returns the start, in Unix seconds, of the bucket of size
// seconds that holds the instant s (Unix seconds): the floor, not the
// truncation toward zero, so that instants before 1970 (a zero-ish clock)
// still land in their own bucket.
func bucketOf(s, size int64) int64 {
	m := s % size
	if m < 0 {
		m += size
	}
	return s - m
}

// taken is the counts one flush took from a tally, and how many cells.
type taken[C comparable] struct {
	counts buckets[C]
	rows   int
}

// flusher writes a tally's counts through a writebehind.Resender, each
// flush's once, a failed flush again under its id before any other: the
// flush of both recorders.
type flusher[C comparable] struct {
	// mu is held for writing by a flush from taking its counts to settling
	// them, and for reading by whoever must never see a flush both in the
	// store and in memory, nor in neither (Recorder.Usage).
	mu     sync.RWMutex
	sends  *writebehind.Resender[taken[C]]
	counts *tally[C]
}

func newFlusher[C comparable](counts *tally[C], send func(ctx context.Context, id string, t taken[C]) error) *flusher[C] {
	return &flusher[C]{counts: counts, sends: writebehind.NewResender(send)}
}

// flush sends a failed flush again, then the counts pending, in one call
// each. On error the counts stay pending, as a flush to send again.
func (f *flusher[C]) flush(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.sends.Resend(ctx); err != nil {
		return err
	}
	counts, rows := f.counts.take()
	if len(counts) == 0 {
		return nil
	}
	return f.sends.Send(ctx, taken[C]{counts: counts, rows: rows})
}

// pending is the number of cells waiting: the tally's and a failed
// flush's.
func (f *flusher[C]) pending() int {
	f.mu.RLock()
	held := f.sends.Held()
	f.mu.RUnlock()
	n := f.counts.len()
	if held != nil {
		n += held.Items.rows
	}
	return n
}
