package main

import (
	"log/slog"

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
// and the usage reporter (nil without STRIPE_API_KEY).
func billingWiring(cfg Config, pool *pgxpool.Pool, dir *tenant.Directory, log *slog.Logger) (*billing.Service, httpapi.WebhookVerifier, *billing.Reporter) {
	store := pgstore.NewBilling(pool)
	var verifier httpapi.WebhookVerifier
	if len(cfg.StripeWebhookSecrets) > 0 {
		verifier = stripeapi.NewVerifier(cfg.StripeWebhookSecrets)
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
	return svc, verifier, reporter
}
