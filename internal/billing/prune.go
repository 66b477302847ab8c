package billing

import (
	"context"
	"log/slog"
	"time"
)

// Defaults of PrunerConfig.
const (
	DefaultPruneEvery     = time.Hour
	DefaultEventRetention = 90 * 24 * time.Hour
)

// EventPruner deletes old events. pgstore.Billing implements it.
type EventPruner interface {
	// PruneEvents deletes the events received before before, except those
	// recorded as OutcomeUnknownCustomer (still waiting for an operator to
	// link their customer), and returns how many it deleted. It is safe to
	// call from any number of instances at once.
	PruneEvents(ctx context.Context, before time.Time) (int64, error)
}

// PrunerConfig configures a Pruner. Events is required.
type PrunerConfig struct {
	Events EventPruner
	Logger *slog.Logger // nil discards
	// Every is the period of Run's passes; zero means DefaultPruneEvery.
	Every time.Duration
	// Retention is how long an event is kept after it was received; zero
	// means DefaultEventRetention.
	Retention time.Duration
	Now       func() time.Time // default time.Now
}

// Pruner keeps the recorded Stripe events from growing without bound: it
// deletes those older than Retention, except the ones still held for an
// operator.
type Pruner struct {
	cfg PrunerConfig
	log *slog.Logger
}

// NewPruner returns a Pruner.
func NewPruner(cfg PrunerConfig) *Pruner {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultPruneEvery
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultEventRetention
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pruner{cfg: cfg, log: cfg.Logger}
}

// Run prunes, then again every Every, until ctx is cancelled; then it
// returns nil. A pass that fails is logged and tried again at the next.
func (p *Pruner) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	for {
		if n, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.log.WarnContext(ctx, "Stripe event prune failed", "deleted", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Prune deletes the events received more than Retention ago, except those
// held for an operator, and returns how many it deleted.
func (p *Pruner) Prune(ctx context.Context) (int64, error) {
	return p.cfg.Events.PruneEvents(ctx, p.cfg.Now().Add(-p.cfg.Retention))
}
