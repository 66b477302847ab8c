package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
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
type minutes = buckets[cell]

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

	// flushes writes counts' cells; Usage holds its mu for reading, so
	// that a report never sees a flush both in the table and in memory,
	// nor in neither.
	flushes *flusher[cell]
	// drops counts events dropped since last logged.
	drops writebehind.Drops

	// counts holds the counts not yet taken by a flush.
	counts *tally[cell]
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
	r.counts = newTally[cell](r.maxPending, &r.drops)
	r.flushes = newFlusher(r.counts, func(ctx context.Context, id string, t taken[cell]) error {
		return r.store.AddUsage(ctx, id, minuteRows(t.counts))
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
	c := cell{tenantID: e.TenantID, live: e.Live, checked: e.Checked, outcome: e.Outcome}
	if c.outcome == "" {
		c.outcome = admission.OutcomeAllowed
	}
	r.counts.add(minuteOf(at), c, 1)
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
	if err := r.flushes.flush(ctx); err != nil {
		return fmt.Errorf("flush usage: %w", err)
	}
	return nil
}

// Pending returns the number of rows waiting to be flushed: at most
// MaxPending new ones, and up to as many in a failed flush.
func (r *Recorder) Pending() int { return r.flushes.pending() }

// minuteOf returns the start of t's minute in Unix seconds.
func minuteOf(t time.Time) int64 { return bucketOf(t.Unix(), 60) }

// minuteRows lists the counts as Rows, in minute order.
func minuteRows(ms minutes) []Row {
	var out []Row
	for _, m := range slices.Sorted(maps.Keys(ms)) {
		at := time.Unix(m, 0).UTC()
		for c, n := range ms[m] {
			out = append(out, Row{TenantID: c.tenantID, Minute: at, Live: c.live, Checked: c.checked, Outcome: c.outcome, Count: n})
		}
	}
	return out
}
