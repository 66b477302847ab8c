package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	rediscounter "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/kit/digest"
	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/webhooks"
)

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

// mailWiring chooses the Sender of outgoing email: SMTP to cfg.SMTPURL
// from cfg.MailFrom, or, without a URL, the development mailbox, returned
// twice so that the mailbox page can read it.
func mailWiring(cfg Config, log *slog.Logger) (mail.Sender, *mail.Mailbox, error) {
	if cfg.SMTPURL == "" {
		b := mail.NewMailbox(log)
		return b, b, nil
	}
	s, err := mail.NewSMTP(cfg.SMTPURL, cfg.MailFrom)
	if err != nil {
		return nil, nil, fmt.Errorf("TOLLGATE_SMTP_URL: %w", err)
	}
	return s, nil, nil
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

// policyAudit writes a tenant's changes of policies, overrides and
// envoyproxy/ratelimit files to the audit log, every one; the actor is the
// tenant API, on the tenant's own key.
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

// CounterStore opens the configured counter backend (cfg.CounterStore);
// dsn is the database of the postgres store.
func CounterStore(ctx context.Context, cfg Config, dsn string, log *slog.Logger) (counter.Store, error) {
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
