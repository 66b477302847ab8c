// Package writebehind is the write-behind machinery of Tollgate's recorders
// (usage, audit, traffic, the keys' last use): what they gather in memory on
// the request path is written by one loop (Loop), a flush at a time, off the
// request path. The loop's rules are the same for every recorder: a flush
// every period under a deadline of its own, a failed flush kept for the
// next one and logged, the items a full queue had no room for counted and
// logged once per flush (Drops), and a final flush when the recorder is
// stopped that the stop does not cut short. A flush written to a store that
// applies each flush id once is sent again, as it was and under its id,
// until it is written (Resender), so that a write whose fate an error left
// unknown counts once.
//
// writebehind imports only the standard library and github.com/google/uuid.
package writebehind

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Loop runs a recorder's flushes. Every field but Prune, Tick, Drops and
// Pending is required.
type Loop struct {
	// What names what the recorder writes ("usage counts", "audit
	// refusals"), in its log lines and in Run's error.
	What string
	// Every is the period of the flushes; Timeout bounds each, the final
	// one included.
	Every, Timeout time.Duration
	// Flush writes what is pending. When it fails, what it did not write
	// must stay pending for the next flush.
	Flush func(ctx context.Context) error
	// Prune, when set, runs every PruneEvery (when positive) to delete what
	// the store no longer needs.
	PruneEvery time.Duration
	Prune      func(ctx context.Context) error
	// Tick, when set, runs after each periodic flush (a sweep of what
	// expired in memory).
	Tick func()
	// Drops counts what the recorder had no room for; after each flush
	// the count is logged, once, with DropAttrs (its bounds), and reset.
	Drops     *Drops
	DropAttrs []any
	// Pending, when set, says how many items wait, for the log line of a
	// failed flush.
	Pending func() int
	Log     *slog.Logger
}

// Run flushes every Every until ctx ends, then flushes once more and returns
// that flush's error, nil when everything was written. Each flush runs under
// Timeout, and ctx's end does not cut one short. A failed periodic flush is
// logged, and what it did not write waits for the next.
func (l Loop) Run(ctx context.Context) error {
	t := time.NewTicker(l.Every)
	defer t.Stop()
	var prune <-chan time.Time
	if l.Prune != nil && l.PruneEvery > 0 {
		pt := time.NewTicker(l.PruneEvery)
		defer pt.Stop()
		prune = pt.C
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.Timeout)
			defer cancel()
			err := l.Flush(fctx)
			l.logDrops(fctx)
			if err != nil {
				return fmt.Errorf("final flush of %s: %w", l.What, err)
			}
			return nil
		case <-t.C:
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.Timeout)
			if err := l.Flush(fctx); err != nil {
				attrs := []any{"err", err}
				if l.Pending != nil {
					attrs = append(attrs, "pending", l.Pending())
				}
				l.Log.WarnContext(ctx, l.What+" not written, kept for the next flush", attrs...)
			}
			cancel()
			l.logDrops(ctx)
			if l.Tick != nil {
				l.Tick()
			}
		case <-prune:
			if err := l.Prune(ctx); err != nil && ctx.Err() == nil {
				l.Log.WarnContext(ctx, l.What+" not pruned", "err", err)
			}
		}
	}
}

func (l Loop) logDrops(ctx context.Context) {
	if l.Drops == nil {
		return
	}
	if n := l.Drops.n.Swap(0); n > 0 {
		l.Log.ErrorContext(ctx, l.What+" dropped: too many waiting for the database", append([]any{"dropped", n}, l.DropAttrs...)...)
	}
}

// Drops counts the items a recorder had no room for, between two flushes.
// It is safe for concurrent use.
type Drops struct{ n atomic.Int64 }

// Add counts n more.
func (d *Drops) Add(n int64) { d.n.Add(n) }

// Resender writes flushes to a store that applies each flush id once: each
// new flush gets a new id (a random UUID), and a flush whose write failed is
// held and sent again, as it was and under its id, before any newer one. It
// is not safe for concurrent use: its caller runs one flush at a time.
type Resender[T any] struct {
	write func(ctx context.Context, id string, items T) error
	held  *Held[T]
}

// Held is a flush whose write failed.
type Held[T any] struct {
	ID    string
	Items T
}

// NewResender returns a Resender writing with write.
func NewResender[T any](write func(ctx context.Context, id string, items T) error) *Resender[T] {
	return &Resender[T]{write: write}
}

// Resend writes the held flush, if there is one; once written it is held no
// more. An error leaves it held.
func (r *Resender[T]) Resend(ctx context.Context) error {
	if r.held == nil {
		return nil
	}
	if err := r.write(ctx, r.held.ID, r.held.Items); err != nil {
		return fmt.Errorf("flush %s again: %w", r.held.ID, err)
	}
	r.held = nil
	return nil
}

// Send writes items as a new flush, under a new id; when the write fails,
// the flush is held for Resend. Call it only when Held is nil (Resend
// succeeded), so that flushes are applied in order.
func (r *Resender[T]) Send(ctx context.Context, items T) error {
	id := uuid.NewString()
	if err := r.write(ctx, id, items); err != nil {
		r.held = &Held[T]{ID: id, Items: items}
		return fmt.Errorf("flush %s: %w", id, err)
	}
	return nil
}

// Held returns the flush whose write failed, or nil.
func (r *Resender[T]) Held() *Held[T] { return r.held }
