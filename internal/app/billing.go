package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/billing/stripeapi"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
)

// billingWiring builds billing with Stripe from the configuration: the
// service (always: events and links answer 503 by themselves when Stripe is
// not configured), the webhook verifier (nil without STRIPE_WEBHOOK_SECRET)
// and the background loops (always: the usage reporter without
// STRIPE_API_KEY is left out, the prune of old Stripe events never is, since
// the table may hold events from a time the webhook was configured).
func billingWiring(cfg Config, pool *pgxpool.Pool, dir *tenant.Directory, log *slog.Logger) (*billing.Service, httpapi.WebhookVerifier, *billingLoops) {
	store := pgstore.NewBilling(pool)
	var verifier httpapi.WebhookVerifier
	if len(cfg.StripeWebhookSecrets) > 0 {
		verifier = stripeapi.NewVerifier(cfg.StripeWebhookSecrets, cfg.StripeAPIKey)
	} else {
		log.Warn("STRIPE_WEBHOOK_SECRET is not set: /webhooks/stripe answers 503 and billing changes from Stripe are not applied")
	}
	var payments billing.Payments
	var reporter *billing.Reporter
	if cfg.StripeAPIKey != "" {
		sc := stripeapi.New(stripeapi.Config{Key: cfg.StripeAPIKey, APIBase: cfg.StripeAPIBase, Logger: log})
		payments = sc
		reporter = billing.NewReporter(billing.ReporterConfig{
			Cursors: store, Usage: pgstore.NewUsage(pool), Meter: sc, Logger: log,
		})
	}
	svc := billing.NewService(billing.Config{
		Store: store, Tenants: dir, Payments: payments, PublicURL: cfg.PublicURL, Logger: log,
	})
	loops := &billingLoops{
		reporter: reporter,
		pruner:   billing.NewPruner(billing.PrunerConfig{Events: store, Logger: log}),
	}
	return svc, verifier, loops
}

// billingLoops are billing's background loops: the hourly prune of old
// Stripe events and, when STRIPE_API_KEY is set, the usage reporter.
type billingLoops struct {
	reporter *billing.Reporter // nil without STRIPE_API_KEY
	pruner   *billing.Pruner
}

// Run runs the loops until ctx is cancelled, returns when all have, and
// returns their errors joined.
func (l *billingLoops) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var reportErr, pruneErr error
	if l.reporter != nil {
		wg.Go(func() { reportErr = l.reporter.Run(ctx) })
	}
	wg.Go(func() { pruneErr = l.pruner.Run(ctx) })
	wg.Wait()
	return errors.Join(reportErr, pruneErr)
}
