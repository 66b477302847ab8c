package traffic

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/kit/writebehind"
)

// DegradedStore keeps degraded minutes; pgstore implements it.
type DegradedStore interface {
	// AddDegraded adds answers to the stored counts of their minutes, in
	// one statement.
	AddDegraded(ctx context.Context, counts map[time.Time]int64) error
	// PruneDegraded forgets the minutes before before.
	PruneDegraded(ctx context.Context, before time.Time) error
}

// Retention and pace of a Recorder.
const (
	// DegradedRetention is how long degraded minutes are kept: longer than
	// the dashboard's longest chart (a day), short enough to stay small.
	DegradedRetention = 30 * 24 * time.Hour
	flushEvery        = 5 * time.Second
	flushTimeout      = 5 * time.Second
	pruneEvery        = time.Hour
	// maxPending bounds the minutes held while the database is down: a
	// week of minutes, a few hundred kilobytes.
	maxPending = 7 * 24 * 60
)

// Recorder counts degraded answers per minute in memory and writes them
// every few seconds: a admission.Observer that costs a degraded request one map
// increment and the database nothing while the counter store is healthy. It
// is safe for concurrent use.
type Recorder struct {
	store DegradedStore
	log   *slog.Logger
	now   func() time.Time

	// drops counts answers past maxPending minutes, since last logged.
	drops writebehind.Drops

	mu      sync.Mutex
	pending map[time.Time]int64
}

var _ admission.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder writing to store; call Run to flush.
func NewRecorder(store DegradedStore, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{store: store, log: log, now: time.Now, pending: map[time.Time]int64{}}
}

// Observe counts e when it was answered degraded.
func (r *Recorder) Observe(_ context.Context, e admission.Event) {
	if !e.Degraded {
		return
	}
	at := e.At
	if at.IsZero() {
		at = r.now()
	}
	m := at.UTC().Truncate(time.Minute)
	r.mu.Lock()
	if _, ok := r.pending[m]; ok || len(r.pending) < maxPending {
		r.pending[m]++
	} else {
		r.drops.Add(1)
	}
	r.mu.Unlock()
}

// Run flushes the counts every few seconds and prunes old minutes every
// hour, until ctx ends; then it flushes once more and returns that flush's
// error, nil when every count was written (writebehind.Loop).
func (r *Recorder) Run(ctx context.Context) error {
	return writebehind.Loop{
		What: "degraded minutes", Every: flushEvery, Timeout: flushTimeout, Flush: r.Flush,
		PruneEvery: pruneEvery,
		Prune: func(ctx context.Context) error {
			return r.store.PruneDegraded(ctx, r.now().Add(-DegradedRetention))
		},
		Drops: &r.drops, DropAttrs: []any{"max_pending_minutes", maxPending}, Log: r.log,
	}.Run(ctx)
}

// Flush writes the counts held in memory. Counts that fail to be written
// are kept for the next flush: the statement is all or nothing. A flush
// whose fate an error left unknown (a timeout after the commit) may count
// twice; for a chart of outage minutes that is harmless, so the store keeps
// no flush ids as usage's and audit's do.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	counts := r.pending
	r.pending = map[time.Time]int64{}
	r.mu.Unlock()
	if len(counts) == 0 {
		return nil
	}
	if err := r.store.AddDegraded(ctx, counts); err != nil {
		r.mu.Lock()
		for m, n := range counts {
			if _, ok := r.pending[m]; ok || len(r.pending) < maxPending {
				r.pending[m] += n
			} else {
				r.drops.Add(n)
			}
		}
		r.mu.Unlock()
		return fmt.Errorf("add %d degraded minutes: %w", len(counts), err)
	}
	return nil
}
