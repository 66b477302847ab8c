package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/rls"
)

// Config is what serve was configured with (cmd/tollgate reads it from
// TOLLGATE_*, REDIS_URL and STRIPE_*; the variable of each field is named
// beside cmd/tollgate's Config).
type Config struct {
	Addr            string        // where the HTTP server listens; "127.0.0.1:0" picks a port
	GRPCAddr        string        // where Envoy's rate limit service listens; empty is off
	GRPCTLSCert     string        // with GRPCTLSKey, PEM files: the rate limit service over TLS
	GRPCTLSKey      string        // TOLLGATE_GRPC_TLS_KEY
	CounterStore    string        // postgres, redis or memory
	RedisURL        string        // with CounterStore redis
	CounterTimeout  time.Duration // the counter call's deadline on the hot path
	MemoryMaxKeys   int           // with CounterStore memory
	Pepper          []byte        // keys' and subjects' HMAC pepper
	BillingKey      []byte        // signs billing links
	InstanceCeiling int64         // requests a second; 0 is off
	TenantInflight  int64
	TenantMaxLeases int64
	// TenantMaxReservations bounds a tenant's live reservations
	// (gate.Config.TenantMaxReservations).
	TenantMaxReservations int64
	TrustedProxies        []*net.IPNet
	ClientIPHeader        string
	IPv6Prefix            int
	PublicURL             string
	SecureCookies         bool
	ConnsPerIP            int
	ConnsKeyless          int
	ConnsPerTenant        int
	ReadTimeout           time.Duration
	WriteTimeout          time.Duration
	IdleTimeout           time.Duration
	ShutdownTimeout       time.Duration
	AuditRetention        time.Duration

	WebhookAllowPrivate bool
	WebhookTestSends    int64

	StripeWebhookSecrets []string
	StripeAPIKey         string
	StripeAPIBase        string

	SMTPURL  string // outgoing email; empty: the development mailbox
	MailFrom string // the sender of every message
	// Dev is TOLLGATE_DEV: the console shows its development mailbox, and
	// opens sign-ups without an SMTP server.
	Dev bool
}

// Deps is what New is given rather than builds: the logger and a migrated
// database, and, for tests, hooks that change the HTTP layers'
// configuration before they are built (nil in serve).
type Deps struct {
	Logger *slog.Logger
	DSN    string // a migrated PostgreSQL database

	Dashboard func(*dashboard.Config)
	API       func(*httpapi.Config)
}

// App is one built Tollgate: its listener is open, its background loops
// run; Run serves until its context ends, Shutdown stops it.
type App struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener
	srv *http.Server
	// The rate limit service's listener and server, when cfg.GRPCAddr is set.
	grpcLn  net.Listener
	grpcSrv *rls.Server

	// Pool is the database pool, for what runs beside the service (the
	// demo's seeding).
	Pool *pgxpool.Pool
	// Echo is the HTTP API with the dashboard mounted, as the server serves it.
	Echo *echo.Echo
	// Parts built along the way, for tests and the demo.
	Parts Parts

	store   counter.Store
	locals  []*memory.Store
	bg      context.Context
	stopBG  context.CancelFunc
	running sync.WaitGroup
	served  chan error // Serve's end, once Run started it
	closing []func()
}

// New builds the service from cfg and deps and starts its background loops
// and its listener on cfg.Addr; requests are served once Run is called.
// On an error everything New opened is closed again.
func New(ctx context.Context, cfg Config, deps Deps) (_ *App, err error) {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &App{cfg: cfg, log: log}
	// Background work runs on a context of its own, stopped after the HTTP
	// server has drained, so that what requests still in flight record is
	// flushed before the pool closes.
	a.bg, a.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	a.Pool, err = pgxpool.New(ctx, deps.DSN)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	a.closing = append(a.closing, a.Pool.Close)
	a.store, err = CounterStore(ctx, cfg, deps.DSN, log)
	if err != nil {
		return nil, err
	}
	a.closing = append(a.closing, func() { a.store.Close() })
	if err := a.build(deps); err != nil {
		return nil, err
	}
	if err := a.listen(); err != nil {
		return nil, err
	}
	return a, nil
}

// EnvoyDomains is every tenant's envoyproxy/ratelimit files, parsed, by
// domain: what the gRPC rate limit service matches Envoy's descriptors
// against, without a database round trip. The change listener keeps it
// current (an upload on any instance reaches it within about a second).
func (a *App) EnvoyDomains() *envoyconf.Catalog { return a.Parts.EnvoyDomains }

// Addr is where the server listens.
func (a *App) Addr() string { return a.ln.Addr().String() }

// GRPCAddr is where the rate limit service listens; "" when it is off.
func (a *App) GRPCAddr() string {
	if a.grpcLn == nil {
		return ""
	}
	return a.grpcLn.Addr().String()
}

// Go runs f on the background context, stopped and waited for at shutdown.
func (a *App) Go(f func(ctx context.Context)) {
	a.running.Go(func() { f(a.bg) })
}

// Run serves until ctx is cancelled or the server fails, then shuts down
// (Shutdown).
func (a *App) Run(ctx context.Context) error {
	a.served = make(chan error, 2)
	go func() { a.served <- a.srv.Serve(a.ln) }()
	if a.grpcSrv != nil {
		go func() {
			if err := a.grpcSrv.Serve(a.grpcLn); err != nil {
				a.served <- fmt.Errorf("rate limit service: %w", err)
			}
		}()
	}
	select {
	case err := <-a.served:
		a.close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return a.Shutdown()
}

// Shutdown, after Run or instead of it, stops the service in order: stop taking requests and finish
// those in flight within cfg.ShutdownTimeout, stop the background loops
// (flushing usage and audit), close the local counters, the shared counter
// store (Redis) and the pool.
func (a *App) Shutdown() error {
	a.log.Info("tollgate shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	// The rate limit service drains beside the HTTP server; both finish
	// what is in flight before the background loops stop.
	stopped := make(chan struct{})
	go func() {
		if a.grpcSrv != nil {
			a.grpcSrv.Stop()
		}
		close(stopped)
	}()
	if err := a.srv.Shutdown(sctx); err != nil {
		a.log.Error("shutdown: requests still in flight were cut", "err", err)
	}
	var err error
	if a.served == nil {
		// Never served: the listener is closed with the rest.
	} else if serr := <-a.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = fmt.Errorf("serve: %w", serr)
	}
	<-stopped
	a.close()
	if err == nil {
		a.log.Info("tollgate stopped")
	}
	return err
}

// close stops the background loops and closes what New opened, the last
// opened first.
func (a *App) close() {
	a.stopBG()
	a.running.Wait()
	for i := len(a.closing) - 1; i >= 0; i-- {
		a.closing[i]()
	}
	a.closing = nil
}

// logRun logs a background loop's end unless it was asked to stop.
func logRun(log *slog.Logger, what string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error(what+" stopped", "err", err)
	}
}
