package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/consolesite"
	"github.com/tollgate/tollgate/internal/counter/memory"
	rediscounter "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/rls"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// Parts are the services New built, each once, that the HTTP layers and
// the background loops share.
type Parts struct {
	Tenants  *tenant.Directory
	Policies *pgstore.Policies
	Catalog  *policy.Catalog
	// EnvoyDomains holds every tenant's envoyproxy/ratelimit files,
	// parsed, by domain; Envoy is their store.
	EnvoyDomains *envoyconf.Catalog
	Envoy        *pgstore.EnvoyDomains
	AuditStore   *pgstore.Audit
	Audit        *audit.Recorder
	Usage        *usage.Recorder
	PolicyUsage  *usage.PolicyRecorder // checks and refusals per policy and hour
	Hooks        *webhooks.Service
	HookWorker   *webhooks.Worker
	Metrics      *metrics.Metrics
	Traffic      *pgstore.Traffic
	Degraded     *traffic.Recorder
	Gate         *gate.Gate
	Billing      *billing.Service
	Dashboard    *dashboard.Dashboard
	Console      *consolesite.Site
	// Mail sends email: over SMTP when Config.SMTPURL is set, else into
	// Mailbox, which is then the same Sender (nil with SMTP), for the
	// development-only mailbox page.
	Mail    mail.Sender
	Mailbox *mail.Mailbox

	stripeWebhooks httpapi.WebhookVerifier
	billingLoops   *billingLoops
	// This instance's own counters, in memory: the gate's instance
	// ceiling and per-IP L1 (DESIGN §3's 50,000 keys), and where the
	// dashboard's sign-in limits and the billing links' limits count while
	// the shared store is down (the bound on keys evicts the least
	// recently used; the links' store needs no pruning besides).
	l1, signIns, linkOpens *memory.Store
	// hasher bounds the password hashes of the dashboard and the console
	// together.
	hasher *admin.Hasher
}

// build builds the parts, starts their loops and the HTTP API.
func (a *App) build(deps Deps) error {
	if err := a.buildDomain(); err != nil {
		return err
	}
	if err := a.buildGate(); err != nil {
		return err
	}
	a.startLoops(deps.DSN)
	if err := a.buildConsole(); err != nil {
		return err
	}
	if err := a.buildDashboard(deps.Dashboard); err != nil {
		return err
	}
	a.Echo = httpapi.New(a.apiConfig(deps.API))
	return nil
}

// buildDomain builds the tenant and policy caches, the recorders of audit,
// usage and degraded minutes, the webhooks, the mail and the metrics.
func (a *App) buildDomain() error {
	p, cfg, log := &a.Parts, a.cfg, a.log
	p.Tenants = tenant.NewDirectory(tenant.DirectoryConfig{Store: pgstore.NewTenants(a.Pool), Logger: log})
	p.Policies = pgstore.NewPolicies(a.Pool)
	p.Catalog = policy.NewCatalog(p.Policies, policy.CatalogConfig{})
	p.Envoy = pgstore.NewEnvoyDomains(a.Pool)
	p.EnvoyDomains = envoyconf.NewCatalog(p.Envoy, envoyconf.CatalogConfig{Logger: log})
	p.AuditStore = pgstore.NewAudit(a.Pool)
	var err error
	p.Audit, err = audit.NewRecorder(audit.RecorderConfig{Store: p.AuditStore, Logger: log, AuditRetention: cfg.AuditRetention})
	if err != nil {
		return err
	}
	usageStore := pgstore.NewUsage(a.Pool)
	p.Usage, err = usage.NewRecorder(usage.Config{Store: usageStore, Alerts: p.Audit, Logger: log})
	if err != nil {
		return err
	}
	p.PolicyUsage, err = usage.NewPolicyRecorder(usage.PolicyConfig{Store: usageStore, Logger: log})
	if err != nil {
		return err
	}
	// Outbound tenant webhooks: the service of the API and the dashboard,
	// and the delivery worker that runs below.
	p.Hooks, p.HookWorker, err = webhookWiring(cfg, a.Pool, log)
	if err != nil {
		return err
	}
	// Outgoing email, for the tenant console (issue 41).
	if p.Mail, p.Mailbox, err = mailWiring(cfg, log); err != nil {
		return err
	}
	p.Metrics = metrics.New()
	// The queues of writes an operator watches grow when the database does
	// not keep up (tollgate_backlog_items).
	if err := backlogs(p.Metrics, p.Usage, p.Audit, p.HookWorker); err != nil {
		return err
	}
	// Dashboard: degraded answers per minute, for the overview.
	p.Traffic = pgstore.NewTraffic(a.Pool)
	p.Degraded = traffic.NewRecorder(p.Traffic, log)
	// Billing with Stripe: webhooks, Checkout and portal links, and the
	// hourly usage reports (one instance at a time reports each hour).
	p.Billing, p.stripeWebhooks, p.billingLoops = billingWiring(cfg, a.Pool, p.Tenants, log)
	return nil
}

// buildGate builds this instance's memory counters and the gate.
func (a *App) buildGate() error {
	p, cfg := &a.Parts, a.cfg
	p.l1 = memory.New(memory.Config{MaxKeys: memory.DefaultMaxKeys})
	p.signIns = memory.New(memory.Config{MaxKeys: 100_000})
	p.hasher = admin.NewHasher(0, 0)
	p.linkOpens = memory.New(memory.Config{MaxKeys: 10_000, PruneEvery: -1})
	a.closing = append(a.closing, func() { p.l1.Close() }, func() { p.signIns.Close() }, func() { p.linkOpens.Close() })
	var err error
	p.Gate, err = gate.New(gate.Config{
		Store: a.store, Local: p.l1, Tenants: p.Tenants, Policies: p.Catalog, Observer: admission.Observers{p.Usage, p.PolicyUsage, p.Audit, p.Degraded},
		Metrics: p.Metrics, StoreName: cfg.CounterStore, Logger: a.log, Pepper: cfg.Pepper, InstanceCeiling: cfg.InstanceCeiling,
		TenantInflight:        cfg.TenantInflight,
		TenantMaxLeases:       cfg.TenantMaxLeases,
		TenantMaxReservations: cfg.TenantMaxReservations,
	})
	return err
}

// invalidate drops what changed from this instance's caches, or wakes the
// webhook worker for a new delivery.
func (a *App) invalidate(kind, id string) {
	p := &a.Parts
	if kind == "webhook" {
		p.HookWorker.Wake()
		return
	}
	p.Tenants.Invalidate(kind, id)
	switch kind {
	case "policy", "tenant":
		// A tenant's row holds its billing anchor, which its policies of
		// window "billing" count from (policy sets are loaded with it).
		p.Catalog.Invalidate(id)
	case "envoy":
		p.EnvoyDomains.Invalidate(id)
	}
}

// startLoops starts the background loops on the background context.
func (a *App) startLoops(dsn string) {
	p, log := &a.Parts, a.log
	a.running.Go(func() { logRun(log, "api key use flush", p.Tenants.Run(a.bg)) })
	a.running.Go(func() { logRun(log, "usage flush", p.Usage.Run(a.bg)) })
	a.running.Go(func() { logRun(log, "policy usage flush", p.PolicyUsage.Run(a.bg)) })
	a.running.Go(func() { logRun(log, "audit flush", p.Audit.Run(a.bg)) })
	a.running.Go(func() { logRun(log, "degraded minutes flush", p.Degraded.Run(a.bg)) })
	// Outbound tenant webhooks: every instance delivers from the outbox,
	// woken by the notification of a new delivery, and sweeps for the
	// events decided by looking (idempotency keys write each once).
	a.running.Go(func() { logRun(log, "webhook delivery", p.HookWorker.Run(a.bg)) })
	a.running.Go(func() { logRun(log, "webhook sweep", webhooks.Sweep(a.bg, p.Hooks.Store, log, time.Now)) })
	// Changes made by any instance (or by hand in SQL) reach this one's caches
	// within a second; after a reconnect everything is marked stale (read
	// again on its next use), since notifications may have been missed.
	a.running.Go(func() {
		logRun(log, "change listener", pgstore.Listen(a.bg, dsn, log, a.invalidate,
			func() {
				p.Tenants.InvalidateAll()
				p.Catalog.InvalidateAll()
				p.EnvoyDomains.InvalidateAll()
				p.HookWorker.Wake()
			}))
	})
	if p.billingLoops != nil {
		a.running.Go(func() { logRun(log, "billing loops (usage reporting, event retention)", p.billingLoops.Run(a.bg)) })
	}
}

// buildConsole builds the tenants' console (/console): its sign-ins and
// sign-ups counted as the dashboard's are, its passwords hashed within the
// bound the dashboard's share (p.hasher).
func (a *App) buildConsole() error {
	p, cfg, log := &a.Parts, a.cfg, a.log
	var err error
	p.Console, err = consolesite.New(consolesite.Config{
		Logger: log, Members: pgstore.NewMembers(a.Pool, nil), Tenants: pgstore.NewTenants(a.Pool),
		Hasher: p.hasher, Limits: gate.NewLimiter("console sign-in limiter", a.store, p.signIns, log), Pepper: cfg.Pepper,
		Mail: p.Mail, Mailbox: p.Mailbox, Dev: cfg.Dev, PublicURL: cfg.PublicURL, SecureCookies: cfg.SecureCookies,
		Audit: audit.NewLog(p.AuditStore), Changed: a.invalidate,
		Plans: p.Tenants, Billing: consoleBilling(cfg, p.Billing),
		Policies: p.Policies, Counters: p.Gate,
		Usage: &consolesite.UsageSources{Usage: p.Usage, Traffic: p.Traffic, Policies: p.PolicyUsage, Budgets: p.Gate},
		// The API's webhooks service and test send limit (counted as
		// the API's: same counters, same group).
		Webhooks: p.Hooks, WebhookTestsPerMinute: cfg.WebhookTestSends,
		WebhookTests: gate.NewLimiter("webhook test limits", a.store, p.linkOpens, log),
	})
	return err
}

// consoleBilling is the console's billing: the service of the API's
// billing routes once STRIPE_API_KEY is set, else nil (the page says so).
func consoleBilling(cfg Config, svc *billing.Service) consolesite.Billing {
	if cfg.StripeAPIKey == "" || svc == nil {
		return nil
	}
	return svc
}

// buildDashboard builds the dashboard (/admin): sign-in counted in the same
// counter store as the API, changes dropped from this instance's caches at
// once. hook, when not nil, changes its configuration first.
func (a *App) buildDashboard(hook func(*dashboard.Config)) error {
	p, cfg, log := &a.Parts, a.cfg, a.log
	dcfg := dashboard.Config{
		Logger: log, Accounts: pgstore.NewAdmins(a.Pool), Tenants: pgstore.NewTenants(a.Pool), Policies: p.Policies,
		Usage: p.Usage, PolicyUsage: p.PolicyUsage, Audit: audit.NewLog(p.AuditStore), Traffic: p.Traffic,
		Webhooks: p.Billing, Billing: p.Billing, SignInLimiter: gate.NewLimiter("sign-in limiter", a.store, p.signIns, log), Leases: p.Gate, Budgets: p.Gate, Counters: p.Gate, Pepper: cfg.Pepper, SecureCookies: cfg.SecureCookies,
		Changed:   a.invalidate,
		Endpoints: p.Hooks,
		Hasher:    p.hasher,
		Members:   pgstore.NewMembers(a.Pool, nil),
	}
	if hook != nil {
		hook(&dcfg)
	}
	var err error
	p.Dashboard, err = dashboard.New(dcfg)
	if err != nil {
		return err
	}
	a.running.Go(func() { logRun(log, "dashboard housekeeping", p.Dashboard.Run(a.bg)) })
	return nil
}

// apiConfig is the HTTP API's configuration; hook, when not nil, changes it.
func (a *App) apiConfig(hook func(*httpapi.Config)) httpapi.Config {
	p, cfg, store, log := &a.Parts, a.cfg, a.store, a.log
	// Redis must answer once before /readyz says ready: an instance that
	// started while it was down would answer every check degraded. Verify
	// is that round trip, and checks the server's mode, which start-up could
	// not. PostgreSQL's counters are in the database Ready pings; memory's
	// need no answer.
	var counterReady func(context.Context) error
	if rs, ok := store.(*rediscounter.Store); ok {
		counterReady = rs.Verify
	}
	acfg := httpapi.Config{
		Logger:       log,
		Ready:        a.Pool.Ping,
		CounterReady: counterReady,
		Gate:         p.Gate,
		Policies:     policy.Service{Store: p.Policies, Catalog: p.Catalog, Audit: policyAudit(audit.NewLog(p.AuditStore), log)},
		Envoy:        envoyconf.Service{Store: p.Envoy, Catalog: p.EnvoyDomains, Audit: policyAudit(audit.NewLog(p.AuditStore), log)},
		// Counter resets (DELETE /v1/policies/{name}/subjects/{subject}),
		// under the tenant's audit budget.
		Audit:    notedAudit(p.Audit),
		Usage:    usageService{p.Usage, p.Tenants},
		ClientIP: httpapi.ClientIPConfig{TrustedProxies: cfg.TrustedProxies, Header: cfg.ClientIPHeader, IPv6Prefix: cfg.IPv6Prefix},
		// Behind a TLS-ending proxy: Strict-Transport-Security on every answer.
		SecureTransport: cfg.SecureCookies,
		Metrics:         p.Metrics.Handler(),
		// The pages without an API key: per-IP buckets and the instance
		// ceiling; bodies in flight bounded per client IP and in all.
		Public:      p.Gate,
		Instruments: p.Metrics,
		PublicURL:   cfg.PublicURL,
		BillingKey:  cfg.BillingKey,
		LinkLimiter: gate.NewLimiter("billing link limits", store, p.linkOpens, log),
		// A billing link of a tenant whose people use the console leads
		// to its billing page there, without a Stripe call.
		BillingLanding: p.Console.BillingLanding,
		// Billing with Stripe.
		Billing:        p.Billing,
		StripeWebhooks: p.stripeWebhooks,
		// Outbound tenant webhooks; test sends limited per tenant as
		// billing links are, in the same local fallback store.
		Webhooks:              p.Hooks,
		WebhookTestLimiter:    gate.NewLimiter("webhook test limits", store, p.linkOpens, log),
		WebhookTestsPerMinute: cfg.WebhookTestSends,
		// Dashboard (/admin).
		Dashboard: p.Dashboard.Register,
		// The tenants' console (/console).
		Console: p.Console.Register,
	}
	if hook != nil {
		hook(&acfg)
	}
	return acfg
}

// listen opens the listener on cfg.Addr and builds the HTTP server over it:
// connections shared per address until a request on them shows a key, then
// per tenant.
func (a *App) listen() error {
	cfg := a.cfg
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_ADDR: %w", err)
	}
	conns := httpapi.NewConnShare(httpapi.ConnConfig{PerIP: cfg.ConnsPerIP, Keyless: cfg.ConnsKeyless, PerTenant: cfg.ConnsPerTenant,
		ClientIP: httpapi.ClientIPConfig{TrustedProxies: cfg.TrustedProxies, IPv6Prefix: cfg.IPv6Prefix}, Metrics: a.Parts.Metrics})
	a.ln = conns.Listener(ln)
	a.closing = append(a.closing, func() { _ = ln.Close() })
	a.srv = httpServer(cfg, a.Echo, a.log)
	a.srv.ConnState, a.srv.ConnContext = conns.ConnState, conns.ConnContext
	return a.listenGRPC()
}

// listenGRPC opens the rate limit service's listener on cfg.GRPCAddr and
// builds its server, when the address is set.
func (a *App) listenGRPC() error {
	cfg := a.cfg
	if cfg.GRPCAddr == "" {
		return nil
	}
	var tlsConf *tls.Config
	if cfg.GRPCTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.GRPCTLSCert, cfg.GRPCTLSKey)
		if err != nil {
			return fmt.Errorf("TOLLGATE_GRPC_TLS_CERT, TOLLGATE_GRPC_TLS_KEY: %w", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	}
	ln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_GRPC_ADDR: %w", err)
	}
	a.grpcLn = ln
	a.closing = append(a.closing, func() { _ = ln.Close() })
	// A domain with an uploaded file is matched by it; any other is native.
	svc := rls.New(rls.Config{Gate: a.Parts.Gate, Domains: a.Parts.EnvoyDomains.Config, Log: a.log, IPv6Prefix: cfg.IPv6Prefix})
	a.grpcSrv = rls.NewServer(svc, rls.ServerConfig{TLS: tlsConf, ShutdownTimeout: cfg.ShutdownTimeout})
	return nil
}
