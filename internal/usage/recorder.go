package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/kit/atomicmap"
	"github.com/tollgate/tollgate/internal/kit/writebehind"
)

// cell is a row's key within one minute.
type cell struct {
	tenantID string
	live     bool
	checked  bool
	outcome  string
}

// minutes holds counts by minute (Unix seconds of its start) and cell.
type minutes map[int64]map[cell]int64

// taken is the counts one flush took from pending.
type taken struct {
	counts minutes
	rows   int
}

// Recorder counts events in memory and flushes them to its Store. It is safe
// for concurrent use. Counts are lost only if the process dies or if more
// than MaxPending rows wait for a database that stays down; none counts
// twice, even when a flush fails after its statement committed (the flush is
// sent again under its id). A process that dies loses the counts observed
// since the last flush whose statement reached the database: those of one
// FlushEvery and of the time the next flush took to be sent (a statement
// sent before the death still commits), so at most FlushEvery plus a flush's
// way to the database, which a busy machine or a slow database stretches.
type Recorder struct {
	store       Store
	alerts      AlertLister
	log         *slog.Logger
	every       time.Duration
	timeout     time.Duration
	maxPending  int
	alertWindow time.Duration
	now         func() time.Time

	// flushMu is held for writing by a flush from taking its counts to
	// settling them, and for reading by Usage: a report never sees a flush
	// both in the table and in memory, nor in neither.
	flushMu sync.RWMutex
	// flushes sends each flush's counts once, a failed flush again under
	// its id before any other; guarded by flushMu.
	flushes *writebehind.Resender[taken]
	// drops counts events dropped since last logged.
	drops writebehind.Drops

	mu      sync.Mutex
	pending minutes
	rows    int // cells in pending
	// hot holds a counter for each cell of the newest minute observed
	// (hotMinute) that has a row: Observe adds to it without taking mu,
	// which every check of every tenant would otherwise wait for. Counts
	// move from hot to pending (fold) before anything reads pending.
	hot       atomicmap.Map[hotKey]
	hotMinute int64
}

// hotKey is a cell of a minute.
type hotKey struct {
	minute int64
	cell   cell
}

var _ admission.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder; call Run to flush its counts.
func NewRecorder(cfg Config) (*Recorder, error) {
	if cfg.Store == nil {
		return nil, errors.New("usage recorder: no store")
	}
	r := &Recorder{
		store:       cfg.Store,
		alerts:      cfg.Alerts,
		log:         cfg.Logger,
		every:       cfg.FlushEvery,
		timeout:     cfg.FlushTimeout,
		maxPending:  cfg.MaxPending,
		alertWindow: cfg.AlertWindow,
		now:         cfg.Now,
		pending:     minutes{},
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.every <= 0 {
		r.every = DefaultFlushEvery
	}
	if r.timeout <= 0 {
		r.timeout = DefaultFlushTimeout
	}
	if r.maxPending <= 0 {
		r.maxPending = DefaultMaxPending
	}
	if r.alertWindow <= 0 {
		r.alertWindow = DefaultAlertWindow
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.flushes = writebehind.NewResender(func(ctx context.Context, id string, t taken) error {
		return r.store.AddUsage(ctx, id, t.counts.rows())
	})
	return r, nil
}

// Observe counts e. The count of a cell of the newest minute is one atomic
// add; a new cell, or an older minute's, takes one mutex for a map
// increment. It never blocks on I/O. Events without a tenant (refused before
// the key was known) are not counted: there is no one to meter. An empty
// Outcome counts as allowed.
func (r *Recorder) Observe(_ context.Context, e admission.Event) {
	if e.TenantID == "" {
		return
	}
	at := e.At
	if at.IsZero() {
		at = r.now()
	}
	m := minuteOf(at)
	c := cell{tenantID: e.TenantID, live: e.Live, checked: e.Checked, outcome: e.Outcome}
	if c.outcome == "" {
		c.outcome = admission.OutcomeAllowed
	}
	k := hotKey{m, c}
	if h, ok := r.hot.Load(k); ok {
		if _, counted := h.Add(1); counted {
			return
		}
		// Retired: its minute is done, or a fold found it idle.
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m > r.hotMinute {
		r.retireHotLocked()
		r.hotMinute = m
	}
	r.addLocked(m, c, 1)
	if _, kept := r.pending[m][c]; kept && m == r.hotMinute {
		// Another Observe of k may have made its count while this one
		// waited for mu: Ensure keeps it. (Counts are made and dropped only
		// under mu.)
		r.hot.Ensure(k)
	}
}

// foldLocked moves the hot counts into pending, as rows of their own where
// a flush took theirs; the counts idle since the last fold leave hot. r.mu
// is held.
func (r *Recorder) foldLocked() {
	r.hot.Take(func(k hotKey, n int64) { r.addLocked(k.minute, k.cell, n) })
}

// retireHotLocked folds the hot counts into pending and retires them, the
// newest minute having moved on; r.mu is held.
func (r *Recorder) retireHotLocked() {
	r.hot.RetireAll(func(k hotKey, n int64) { r.addLocked(k.minute, k.cell, n) })
}

// addLocked adds n to a cell, making room by dropping the oldest minute when
// a new cell would exceed maxPending.
func (r *Recorder) addLocked(m int64, c cell, n int64) {
	b := r.pending[m]
	if _, ok := b[c]; !ok {
		if r.rows >= r.maxPending && !r.evictOlderLocked(m) {
			// This minute is the oldest held: it is the one to drop.
			r.drops.Add(n)
			return
		}
		if b == nil {
			b = make(map[cell]int64)
			r.pending[m] = b
		}
		r.rows++
	}
	b[c] += n
}

// evictOlderLocked drops the oldest minute held if it is older than m, and
// reports whether it did. It scans the minutes, a short list, and runs only
// at the cap.
func (r *Recorder) evictOlderLocked(m int64) bool {
	oldest, found := int64(0), false
	for k := range r.pending {
		if !found || k < oldest {
			oldest, found = k, true
		}
	}
	if !found || oldest >= m {
		return false
	}
	for _, n := range r.pending[oldest] {
		r.drops.Add(n)
	}
	r.rows -= len(r.pending[oldest])
	delete(r.pending, oldest)
	return true
}

// Run flushes the pending counts every FlushEvery until ctx ends, then
// flushes once more and returns that flush's error, nil when every count was
// written (writebehind.Loop). Counts observed after Run returns wait for a Flush.
// Run also prunes the Store's old flush ids.
func (r *Recorder) Run(ctx context.Context) error {
	return writebehind.Loop{
		What: "usage counts", Every: r.every, Timeout: r.timeout, Flush: r.Flush,
		PruneEvery: pruneEvery,
		Prune: func(ctx context.Context) error {
			return r.store.PruneFlushes(ctx, r.now().Add(-flushRetention))
		},
		Drops: &r.drops, DropAttrs: []any{"max_pending", r.maxPending}, Pending: r.Pending, Log: r.log,
	}.Run(ctx)
}

// Flush writes the pending counts in one Store call. On error they stay
// pending, as a flush sent again before any other, and the error is
// returned.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	if err := r.flushes.Resend(ctx); err != nil {
		return fmt.Errorf("flush usage: %w", err)
	}
	r.mu.Lock()
	r.foldLocked()
	t := taken{counts: r.pending, rows: r.rows}
	r.pending, r.rows = minutes{}, 0
	r.mu.Unlock()
	if len(t.counts) == 0 {
		return nil
	}
	if err := r.flushes.Send(ctx, t); err != nil {
		return fmt.Errorf("flush usage: %w", err)
	}
	return nil
}

// Pending returns the number of rows waiting to be flushed: at most
// MaxPending new ones, and up to as many in a failed flush.
func (r *Recorder) Pending() int {
	r.flushMu.RLock()
	held := r.flushes.Held()
	r.flushMu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foldLocked()
	if held != nil {
		return r.rows + held.Items.rows
	}
	return r.rows
}

// minuteOf returns the start of t's minute in Unix seconds.
func minuteOf(t time.Time) int64 {
	s := t.Unix()
	// Floor, not truncation toward zero, so that instants before 1970 (a
	// zero-ish clock) still land in their own minute.
	m := s % 60
	if m < 0 {
		m += 60
	}
	return s - m
}

// rows lists the counts as Rows, in minute order.
func (ms minutes) rows() []Row {
	var out []Row
	for _, m := range ms.sortedMinutes() {
		at := time.Unix(m, 0).UTC()
		for c, n := range ms[m] {
			out = append(out, Row{TenantID: c.tenantID, Minute: at, Live: c.live, Checked: c.checked, Outcome: c.outcome, Count: n})
		}
	}
	return out
}

func (ms minutes) sortedMinutes() []int64 {
	return slices.Sorted(maps.Keys(ms))
}
