package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/kit/digest"
	"github.com/tollgate/tollgate/internal/kit/gcheadroom"
	"github.com/tollgate/tollgate/internal/pgstore"
)

// gcHeadroom is how much the heap may grow between garbage collections
// when GOGC is not set (gcheadroom.Run).
const gcHeadroom = 128 << 20

// serve runs the HTTP server until ctx is cancelled, then shuts down in
// order: stop taking requests and finish those in flight, close the counter
// store, close the pool, stop the embedded database (app.App.Shutdown, then
// the database).
func serve(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	fs := newFlags("serve")
	demo := fs.Bool("demo", false, "seed a demo tenant, print its keys and send it a little live traffic")
	rest, err := parseFlags(fs, args)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected %q", rest[0])
	}
	if err != nil {
		return usagef("serve [--demo]", "serve: %v", err)
	}
	log.InfoContext(ctx, "tollgate starting", "config", cfg)
	// The heap grows by about gcHeadroom between collections, unless GOGC
	// says otherwise (internal/kit/gcheadroom, docs/configuration.md).
	go gcheadroom.Run(ctx, gcHeadroom, time.Second)
	dsn, stopDB, err := database(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopDB()
	if err := pgstore.Migrate(dsn); err != nil {
		return err
	}
	a, err := app.New(ctx, appConfig(cfg), app.Deps{Logger: log, DSN: dsn})
	if err != nil {
		return err
	}
	if cfg.DebugAddr != "" {
		stop, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			return errors.Join(err, a.Shutdown())
		}
		defer stop()
	}
	log.InfoContext(ctx, "tollgate serving", "addr", a.Addr(), "counter_store", cfg.CounterStore)
	if *demo {
		if err := startDemo(ctx, a, cfg, log, cio.stdout); err != nil {
			return errors.Join(err, a.Shutdown())
		}
	}
	return a.Run(ctx)
}

// startDemo seeds the demo tenant and admin and sends the tenant a little
// live traffic until shutdown.
func startDemo(ctx context.Context, a *app.App, cfg Config, log *slog.Logger, stdout io.Writer) error {
	key, err := seedDemo(ctx, a.Pool, cfg, log, stdout)
	if err != nil {
		return err
	}
	if err := seedDemoAdmin(ctx, a.Pool, cfg, stdout); err != nil {
		return err
	}
	a.Go(func(bg context.Context) { demoTraffic(bg, "http://"+a.Addr(), key, log) })
	return nil
}

// appConfig is the part of cfg the service is built from.
func appConfig(cfg Config) app.Config {
	return app.Config{
		Addr: cfg.Addr, GRPCAddr: cfg.GRPCAddr, GRPCTLSCert: cfg.GRPCTLSCert, GRPCTLSKey: cfg.GRPCTLSKey, CounterStore: cfg.CounterStore, RedisURL: cfg.RedisURL, CounterTimeout: cfg.CounterTimeout,
		MemoryMaxKeys: cfg.MemoryMaxKeys, Pepper: cfg.Pepper, BillingKey: billingKey(cfg.Pepper),
		InstanceCeiling: cfg.InstanceCeiling, TenantInflight: cfg.TenantInflight, TenantMaxLeases: cfg.TenantMaxLeases,
		TenantMaxReservations: cfg.TenantMaxReservations,
		TrustedProxies:        cfg.TrustedProxies, ClientIPHeader: cfg.ClientIPHeader, IPv6Prefix: cfg.IPv6Prefix,
		PublicURL: cfg.PublicURL, SecureCookies: cfg.SecureCookies,
		ConnsPerIP: cfg.ConnsPerIP, ConnsKeyless: cfg.ConnsKeyless, ConnsPerTenant: cfg.ConnsPerTenant,
		ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout,
		ShutdownTimeout: cfg.ShutdownTimeout, AuditRetention: cfg.AuditRetention,
		WebhookAllowPrivate: cfg.WebhookAllowPrivate, WebhookTestSends: cfg.WebhookTestSends,
		StripeWebhookSecrets: cfg.StripeWebhookSecrets, StripeAPIKey: cfg.StripeAPIKey, StripeAPIBase: cfg.StripeAPIBase,
		SMTPURL: cfg.SMTPURL, MailFrom: cfg.MailFrom, Dev: cfg.Dev,
	}
}

// billingKey derives the key that signs billing links from the pepper. The
// development pepper is public, so under it the key is random instead:
// links then open only on this process, until it stops, and nobody can
// forge one.
func billingKey(pepper []byte) []byte {
	if string(pepper) == devPepper {
		k := make([]byte, 32)
		_, _ = rand.Read(k) // crypto/rand.Read never fails
		return k
	}
	return digest.Key(pepper, "tollgate billing links")
}

// migrateCmd runs `tollgate migrate up|down|version`.
func migrateCmd(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	stdout := cio.stdout
	if len(args) != 1 {
		return fmt.Errorf("migrate up|down|version: %w", errUsage)
	}
	dsn, stopDB, err := database(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopDB()
	m, err := pgstore.NewMigrator(dsn)
	if err != nil {
		return err
	}
	defer m.Close()
	switch args[0] {
	case "up":
		err = m.Up()
	case "down":
		err = m.Down()
	case "version":
	default:
		return fmt.Errorf("migrate %q: want up, down or version: %w", args[0], errUsage)
	}
	if err != nil {
		return err
	}
	v, dirty, err := m.Version()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "{\"version\":%d,\"dirty\":%t}\n", v, dirty)
	return nil
}
