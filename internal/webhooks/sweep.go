package webhooks

import (
	"context"
	"log/slog"
	"time"
)

// SweepEvery is how often an instance looks for the events decided by
// looking: allotment thresholds crossed, alerts resolved.
const SweepEvery = 30 * time.Second

// EventRetention is how long events and their settled deliveries are
// kept: past a month, so that a threshold's idempotency key outlives its
// month.
const EventRetention = 40 * 24 * time.Hour

// Sweep runs store.Sweep every SweepEvery until ctx is cancelled. Every
// instance may run it: the idempotency keys write each event once.
func Sweep(ctx context.Context, store Store, log *slog.Logger, now func() time.Time) error {
	t := time.NewTicker(SweepEvery)
	defer t.Stop()
	for {
		at := now()
		if _, err := store.Sweep(ctx, at, at.Add(-EventRetention)); err != nil && ctx.Err() == nil {
			log.ErrorContext(ctx, "webhook sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
