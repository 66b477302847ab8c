package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	rediscounter "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/digest"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// serve runs the HTTP server until ctx is cancelled, then shuts down in
// order: stop taking requests and finish those in flight, close the counter
// store, close the pool, stop the embedded database.
func serve(ctx context.Context, cfg Config, log *slog.Logger, args []string, cio cliIO) error {
	stdout := cio.stdout
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
	dsn, stopDB, err := database(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopDB()
	if err := pgstore.Migrate(dsn); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()

	store, err := counterStore(ctx, cfg, dsn, log)
	if err != nil {
		return err
	}
	defer store.Close()

	// Background work runs on a context of its own, stopped after the HTTP
	// server has drained, so that what requests still in flight record is
	// flushed before the pool closes.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var running sync.WaitGroup
	defer func() { stopBG(); running.Wait() }()

	dir := tenant.NewDirectory(tenant.DirectoryConfig{Store: pgstore.NewTenants(pool), Logger: log})
	policies := pgstore.NewPolicies(pool)
	catalog := policy.NewCatalog(policies, policy.CatalogConfig{})
	auditStore := pgstore.NewAudit(pool)
	auditRec, err := audit.NewRecorder(audit.RecorderConfig{Store: auditStore, Logger: log, AuditRetention: cfg.AuditRetention})
	if err != nil {
		return err
	}
	usageRec, err := usage.NewRecorder(usage.Config{Store: pgstore.NewUsage(pool), Alerts: auditRec, Logger: log})
	if err != nil {
		return err
	}
	// Outbound tenant webhooks: the service of the API and the dashboard,
	// and the delivery worker that runs below.
	hooks, hookWorker, err := webhookWiring(cfg, pool, log)
	if err != nil {
		return err
	}
	met := metrics.New()
	// The queues of writes an operator watches grow when the database does
	// not keep up (tollgate_backlog_items).
	if err := backlogs(met, usageRec, auditRec, hookWorker); err != nil {
		return err
	}
	// Dashboard: degraded answers per minute, for the overview.
	trafficStore := pgstore.NewTraffic(pool)
	degradedRec := traffic.NewRecorder(trafficStore, log)
	// This instance's own counters, in memory: the gate's instance
	// ceiling and per-IP L1 (DESIGN §3's 50,000 keys), and where the
	// dashboard's sign-in limits and the billing links' limits count while
	// the shared store is down (the bound on keys evicts the least
	// recently used; the links' store needs no pruning besides).
	l1 := memory.New(memory.Config{MaxKeys: memory.DefaultMaxKeys})
	defer l1.Close()
	signIns := memory.New(memory.Config{MaxKeys: 100_000})
	defer signIns.Close()
	linkOpens := memory.New(memory.Config{MaxKeys: 10_000, PruneEvery: -1})
	defer linkOpens.Close()
	g, err := gate.New(gate.Config{
		Store: store, Local: l1, Tenants: dir, Policies: catalog, Observer: admission.Observers{usageRec, auditRec, degradedRec},
		Metrics: met, StoreName: cfg.CounterStore, Logger: log, Pepper: cfg.Pepper, InstanceCeiling: cfg.InstanceCeiling,
		TenantInflight:  cfg.TenantInflight,
		TenantMaxLeases: cfg.TenantMaxLeases,
	})
	if err != nil {
		return err
	}

	running.Go(func() { logRun(log, "api key use flush", dir.Run(bg)) })
	running.Go(func() { logRun(log, "usage flush", usageRec.Run(bg)) })
	running.Go(func() { logRun(log, "audit flush", auditRec.Run(bg)) })
	running.Go(func() { logRun(log, "degraded minutes flush", degradedRec.Run(bg)) })
	// Changes made by any instance (or by hand in SQL) reach this one's caches
	// within a second; after a reconnect everything is marked stale (read
	// again on its next use), since notifications may have been missed.
	// Outbound tenant webhooks: every instance delivers from the outbox,
	// woken by the notification of a new delivery, and sweeps for the
	// events decided by looking (idempotency keys write each once).
	running.Go(func() { logRun(log, "webhook delivery", hookWorker.Run(bg)) })
	running.Go(func() { logRun(log, "webhook sweep", webhooks.Sweep(bg, hooks.Store, log, time.Now)) })
	invalidate := func(kind, id string) {
		if kind == "webhook" {
			hookWorker.Wake()
			return
		}
		dir.Invalidate(kind, id)
		if kind == "policy" {
			catalog.Invalidate(id)
		}
	}
	running.Go(func() {
		logRun(log, "change listener", pgstore.Listen(bg, dsn, log, invalidate,
			func() { dir.InvalidateAll(); catalog.InvalidateAll(); hookWorker.Wake() }))
	})

	// Billing with Stripe: webhooks, Checkout and portal links, and the
	// hourly usage reports (one instance at a time reports each hour).
	bill, stripeWebhooks, billingLoops := billingWiring(cfg, pool, dir, log)
	if billingLoops != nil {
		running.Go(func() { logRun(log, "billing loops (usage reporting, event retention)", billingLoops.Run(bg)) })
	}

	// Dashboard (/admin): sign-in counted in the same counter store as the
	// API, changes dropped from this instance's caches at once.
	dash, err := dashboard.New(dashboard.Config{
		Logger: log, Accounts: pgstore.NewAdmins(pool), Tenants: pgstore.NewTenants(pool), Policies: policies,
		Usage: usageRec, Audit: audit.NewLog(auditStore), Traffic: trafficStore,
		Webhooks: bill, Billing: bill, SignInLimiter: gate.NewLimiter("sign-in limiter", store, signIns, log), Leases: g, Counters: g, Pepper: cfg.Pepper, SecureCookies: cfg.SecureCookies,
		Changed:   invalidate,
		Endpoints: hooks,
	})
	if err != nil {
		return err
	}
	running.Go(func() { logRun(log, "dashboard housekeeping", dash.Run(bg)) })

	// Redis must answer once before /readyz says ready: an instance that
	// started while it was down would answer every check degraded. Verify
	// is that round trip, and checks the server's mode, which start-up could
	// not. PostgreSQL's counters are in the database Ready pings; memory's
	// need no answer.
	var counterReady func(context.Context) error
	if rs, ok := store.(*rediscounter.Store); ok {
		counterReady = rs.Verify
	}
	e := httpapi.New(httpapi.Config{
		Logger:       log,
		Ready:        pool.Ping,
		CounterReady: counterReady,
		Gate:         g,
		Policies:     policy.Service{Store: policies, Catalog: catalog, Audit: policyAudit(audit.NewLog(auditStore), log)},
		// Counter resets (DELETE /v1/policies/{name}/subjects/{subject}),
		// under the tenant's audit budget.
		Audit:    notedAudit(auditRec),
		Usage:    usageService{usageRec, dir},
		ClientIP: httpapi.ClientIPConfig{TrustedProxies: cfg.TrustedProxies, Header: cfg.ClientIPHeader, IPv6Prefix: cfg.IPv6Prefix},
		// Behind a TLS-ending proxy: Strict-Transport-Security on every answer.
		SecureTransport: cfg.SecureCookies,
		Metrics:         met.Handler(),
		// The pages without an API key: per-IP buckets and the instance
		// ceiling; bodies in flight bounded per client IP and in all.
		Public:      g,
		Instruments: met,
		PublicURL:   cfg.PublicURL,
		BillingKey:  billingKey(cfg.Pepper),
		LinkLimiter: gate.NewLimiter("billing link limits", store, linkOpens, log),
		// Billing with Stripe.
		Billing:        bill,
		StripeWebhooks: stripeWebhooks,
		// Outbound tenant webhooks; test sends limited per tenant as
		// billing links are, in the same local fallback store.
		Webhooks:              hooks,
		WebhookTestLimiter:    gate.NewLimiter("webhook test limits", store, linkOpens, log),
		WebhookTestsPerMinute: cfg.WebhookTestSends,
		// Dashboard (/admin).
		Dashboard: dash.Register,
	})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_ADDR: %w", err)
	}
	// Connections shared per address until a request on them shows a key,
	// then per tenant.
	conns := httpapi.NewConnShare(httpapi.ConnConfig{PerIP: cfg.ConnsPerIP, Keyless: cfg.ConnsKeyless, PerTenant: cfg.ConnsPerTenant,
		ClientIP: httpapi.ClientIPConfig{TrustedProxies: cfg.TrustedProxies, IPv6Prefix: cfg.IPv6Prefix}, Metrics: met})
	srv := httpServer(cfg, e, log)
	srv.ConnState, srv.ConnContext = conns.ConnState, conns.ConnContext
	served := make(chan error, 1)
	go func() { served <- srv.Serve(conns.Listener(ln)) }()
	if cfg.DebugAddr != "" {
		stop, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.InfoContext(ctx, "tollgate serving", "addr", ln.Addr().String(), "counter_store", cfg.CounterStore)
	if *demo {
		key, err := seedDemo(ctx, pool, cfg, log, stdout)
		if err != nil {
			return err
		}
		if err := seedDemoAdmin(ctx, pool, cfg, stdout); err != nil {
			return err
		}
		running.Go(func() { demoTraffic(bg, "http://"+ln.Addr().String(), key, log) })
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("tollgate shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown: requests still in flight were cut", "err", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	stopBG()
	running.Wait()
	log.Info("tollgate stopped")
	return nil
}

// webhookWiring builds the tenant webhooks' service and delivery worker:
// secrets sealed under a key derived from the pepper, deliveries sent
// through the guarded client with a 10 s timeout.
func webhookWiring(cfg Config, pool *pgxpool.Pool, log *slog.Logger) (*webhooks.Service, *webhooks.Worker, error) {
	sealer, err := webhooks.NewSealer(digest.Key(cfg.Pepper, "tollgate webhook secrets"))
	if err != nil {
		return nil, nil, err
	}
	store := pgstore.NewWebhooks(pool)
	svc := &webhooks.Service{Store: store, Sealer: sealer, AllowPrivate: cfg.WebhookAllowPrivate}
	w := webhooks.NewWorker(webhooks.WorkerConfig{
		Store: store, Sealer: sealer, Logger: log,
		Client: webhooks.NewClient(cfg.WebhookAllowPrivate, webhookTimeout),
	})
	return svc, w, nil
}

// webhookTimeout bounds one delivery attempt, answer included.
const webhookTimeout = 10 * time.Second

// backlogs reports the recorders' queues of writes and the outbox of
// outbound tenant webhooks, with the deliveries it dropped.
func backlogs(met *metrics.Metrics, usageRec *usage.Recorder, auditRec *audit.Recorder, hooks *webhooks.Worker) error {
	firsts := func() int { n, _, _, _ := auditRec.Pending(); return n }
	counts := func() int { _, n, _, _ := auditRec.Pending(); return n }
	checks := func() int { _, _, n, _ := auditRec.Pending(); return n }
	return errors.Join(
		met.Backlog(metrics.QueueUsageRows, usageRec.Pending),
		met.Backlog(metrics.QueueAuditFirstRefusals, firsts),
		met.Backlog(metrics.QueueAuditRefusalCounts, counts),
		met.Backlog(metrics.QueueAlertChecks, checks),
		met.Backlog(metrics.QueueWebhooks, hooks.Backlog),
		met.WebhooksDropped(hooks.Dropped),
	)
}

// maxHeaderBytes bounds a request's headers: far above any browser's or
// API client's, far below net/http's default of 1 MiB per connection.
const maxHeaderBytes = 64 << 10

// httpServer is the HTTP server of serve: every phase of a connection has a
// deadline, so that a client that trickles or stalls is cut off instead of
// holding a connection and its buffers for as long as it likes. Headers
// get 10 s (or cfg.ReadTimeout, when shorter) and at most maxHeaderBytes; a whole request, body included,
// cfg.ReadTimeout; an answer cfg.WriteTimeout from the end of the headers;
// an idle kept-alive connection cfg.IdleTimeout.
func httpServer(cfg Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// policyAudit writes a tenant's policy and override changes, and counter
// resets, to the audit log; the actor is the tenant API, on the tenant's own
// key.
func policyAudit(l *audit.Log, log *slog.Logger) func(ctx context.Context, tenantID, kind string, detail map[string]any) {
	return func(ctx context.Context, tenantID, kind string, detail map[string]any) {
		if err := l.Record(ctx, audit.Entry{TenantID: tenantID, Actor: "tenant api", Kind: kind, Detail: detail}); err != nil {
			log.ErrorContext(ctx, "audit entry lost", "tenant_id", tenantID, "kind", kind, "err", err)
		}
	}
}

// notedAudit writes what a tenant's requests cause (counter resets) to the
// audit log through the Recorder, under the tenant's audit budget per
// minute, apart for its test keys (detail "sandbox"); the actor is the
// tenant API. Anything a client can repeat at its request rate goes here,
// not through policyAudit, which writes every entry.
func notedAudit(rec *audit.Recorder) func(ctx context.Context, tenantID, kind string, detail map[string]any) {
	return func(_ context.Context, tenantID, kind string, detail map[string]any) {
		sandbox, _ := detail["sandbox"].(bool)
		rec.Note(audit.Entry{TenantID: tenantID, Actor: "tenant api", Kind: kind, Detail: detail}, sandbox)
	}
}

// usageService answers /v1/usage from the metering and the tenant cache.
type usageService struct {
	*usage.Recorder
	*tenant.Directory
}

// Usage resolves the ambiguity of the two embedded Run methods by naming the
// one usage method the HTTP layer calls.
func (u usageService) Usage(ctx context.Context, tenantID string, now time.Time) (usage.Report, error) {
	return u.Recorder.Usage(ctx, tenantID, now)
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

func logRun(log *slog.Logger, what string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error(what+" stopped", "err", err)
	}
}

// counterStore opens the configured counter backend.
func counterStore(ctx context.Context, cfg Config, dsn string, log *slog.Logger) (counter.Store, error) {
	switch cfg.CounterStore {
	case "memory":
		// The store of a single instance: its bound is every counter the
		// instance can count exactly at once (past it an expired counter or
		// one not written lately is forgotten), not a damper's.
		return memory.New(memory.Config{MaxKeys: cfg.MemoryMaxKeys}), nil
	case "redis":
		s, err := rediscounter.New(rediscounter.Config{URL: cfg.RedisURL, Timeout: cfg.CounterTimeout, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		// A URL of the wrong mode (one server at a cluster node, a cluster
		// at a plain server) stops start-up. A Redis that does not answer
		// does not: degraded mode is the answer to an outage; /readyz stays
		// 503 until it answers, and checks its mode then (serve).
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = s.Verify(vctx)
		cancel()
		switch {
		case errors.Is(err, counter.ErrUnavailable):
			log.WarnContext(ctx, "redis not answering at start; its mode is unchecked, checks are degraded and /readyz answers 503 until it answers", "err", err)
		case err != nil:
			s.Close()
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return s, nil
	default:
		s, err := pgcounter.New(ctx, pgcounter.Config{DSN: dsn, Timeout: cfg.CounterTimeout, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("counter store: %w", err)
		}
		// Expired counters are deleted in the background until shutdown.
		go s.Run(ctx)
		return s, nil
	}
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
