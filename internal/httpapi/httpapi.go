// Package httpapi is Tollgate's HTTP surface: the tenant API under /v1
// (checks, leases, policies, envoyproxy/ratelimit files, usage, billing),
// the billing links of 402
// answers, Stripe webhooks, the OpenAPI document and its rendered reference
// (/docs), health, readiness and metrics, and the Echo instance the
// dashboard mounts on, with the client-IP rules, body budgets and
// public-page ceiling they share. It decodes, calls the domain packages and
// encodes; it never imports pgstore, a driver or the dashboard, and it maps
// errors to statuses in one place (problem.go).
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/webhooks"
	"github.com/tollgate/tollgate/web"
)

// Config holds what the HTTP layer calls.
type Config struct {
	Logger *slog.Logger
	// Ready reports whether the system of record answers; /readyz is 200 only
	// while it returns nil.
	Ready func(ctx context.Context) error
	// CounterReady asks the counter store for one round trip; /readyz is
	// 503 until it has returned nil once, and it is not called after that:
	// an instance whose store has never answered could only fail open, while
	// one whose store fails later answers by its fail modes (degraded mode),
	// and readiness does not flap with the store's health. Nil means the
	// store needs no answer (it is in memory, or the database Ready pings).
	CounterReady func(ctx context.Context) error
	// Gate admits tenant requests; with Policies and Usage it serves /v1.
	// When nil, only the health routes are served.
	Gate     Gate
	Policies PolicyService
	Usage    UsageService
	// Envoy serves /v1/envoy/domains, the tenant's envoyproxy/ratelimit
	// files; nil serves none.
	Envoy EnvoyService
	// Audit records a tenant's change that is not a policy's (a counter
	// reset, by kind counter_reset, naming the key that did it, with detail
	// sandbox for a test key); nil records nothing. It must not block on
	// I/O for long, and bound what one tenant writes (cmd/tollgate queues
	// it under the tenant's audit budget). A failure to audit is the
	// callee's to log.
	Audit func(ctx context.Context, tenantID, kind string, detail map[string]any)
	// ClientIP says whom to believe about client addresses.
	ClientIP ClientIPConfig
	// SecureTransport says that every request reached Tollgate over HTTPS,
	// TLS being ended by a proxy in front (TOLLGATE_SECURE_COOKIES): answers
	// carry Strict-Transport-Security as they do over TLS.
	SecureTransport bool
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
	// PublicURL is this service's address as tenants reach it, for links.
	PublicURL string
	// BillingKey signs the billing links of 402 answers.
	BillingKey []byte
	// LinkLimiter counts opens of billing links against their limits: in
	// the shared counter store across instances, else in this instance's
	// memory (gate.NewLimiter). Nil counts nowhere: every open is answered
	// 503.
	LinkLimiter *gate.Limiter
	// BillingLanding, when set, says where a tenant's billing link leads
	// instead of the Stripe portal: an address of this service (the
	// console's billing page) for a tenant whose people use the console,
	// "" for one they do not (a tenant an operator made with the CLI),
	// whose link opens the portal. It is called only once a link's
	// signature is verified; it must not call Stripe, and its answer is
	// not counted against the links' limits.
	BillingLanding func(ctx context.Context, tenantID string) (string, error)
	// Billing serves /v1/billing, the billing links and Stripe webhooks;
	// nil answers them 503.
	Billing BillingService
	// StripeWebhooks verifies Stripe webhook signatures; nil (no
	// STRIPE_WEBHOOK_SECRET) answers webhooks 503.
	StripeWebhooks WebhookVerifier
	// Public, when set, is the ceiling of the pages that take no API key:
	// "/", /admin, /billing/portal/…, /v1/openapi.json, the API reference
	// (/docs) and unknown paths.
	// Health, readiness, metrics and the Stripe webhook are exempt, as is
	// /v1, which Gate admits.
	Public PublicGate
	// BodyBytesPerTenant and BodyBytesTotal bound the /v1 request body
	// bytes in flight of one tenant and of all tenants (beyond what each
	// holds within its floor, one check's body); BodyBytesPerIP and
	// BodyBytesKeyless bound the other bodies (the Stripe webhook, the
	// dashboard's forms) in flight from one client IP and in all. Zero
	// takes the Default of the same name. A request past a bound is
	// refused, 429 or 503, before its body is read; a /v1 body is read
	// only once its key authenticates.
	BodyBytesPerTenant, BodyBytesTotal int64
	BodyBytesPerIP, BodyBytesKeyless   int64
	// Instruments are the collectors the HTTP layer feeds; nil feeds a set
	// of its own.
	Instruments *metrics.Metrics
	// Webhooks serves /v1/webhooks, the tenant's outbound webhook
	// endpoints, and lists the disabled ones in /v1/usage; nil serves
	// neither.
	Webhooks TenantWebhooks
	// WebhookTestLimiter counts test sends (POST /v1/webhooks/{id}/test)
	// against WebhookTestsPerMinute per tenant, as LinkLimiter counts
	// billing links. Nil counts nowhere: every test send is answered 503.
	WebhookTestLimiter *gate.Limiter
	// WebhookTestsPerMinute is how many test events a tenant may send a
	// minute (TOLLGATE_WEBHOOK_TEST_SENDS; 0 is DefaultWebhookTestsPerMinute).
	WebhookTestsPerMinute int64
	// Dashboard, when set, mounts the operators' dashboard (/admin) on the
	// same Echo, so that it shares the client-IP rules and the recovery
	// middleware; httpapi knows nothing else of it.
	Dashboard func(*echo.Echo)
	// Console, when set, mounts the tenants' console (/console) the same
	// way.
	Console func(*echo.Echo)
}

// api holds what the /v1 handlers share.
type api struct {
	cfg    Config
	gate   Gate
	bodies *bodyBudget
}

// New returns the Echo instance serving Tollgate's machine-facing routes.
func New(cfg Config) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(cfg.Logger)
	e.IPExtractor = ipExtractor(cfg.ClientIP)
	if cfg.Instruments == nil {
		cfg.Instruments = metrics.New()
	}
	timers := newRouteTimers(cfg.Instruments)
	bodies := newBodyBudget(cfg, cfg.Instruments)
	e.Use(edge(cfg, bodies, timers))
	if cfg.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(cfg.Metrics))
	}
	registerOpenAPI(e)
	if cfg.Gate != nil {
		a := &api{cfg: cfg, gate: cfg.Gate, bodies: bodies}
		v1 := e.Group("/v1")
		v1.POST("/check", a.check)
		v1.POST("/check/batch", a.checkBatch)
		// Proxies may forward the original request's method.
		v1.Any("/forward-auth/:policy", a.forwardAuth)
		registerPolicies(v1.Group("", a.admit("policies")), cfg.Policies)
		if cfg.Envoy != nil {
			registerEnvoy(v1.Group("/envoy", a.admit("envoy")), cfg.Envoy)
		}
		v1.GET("/usage", a.usage, a.admit("usage"))
		registerBilling(v1.Group("/billing", a.admit("billing")), a)
		registerLeases(v1, a)
		registerReservations(v1, a)
		registerTenantWebhooks(v1.Group("/webhooks", a.admit("webhooks")), cfg)
	}
	e.GET("/billing/portal/:token", portalLink(cfg))
	e.POST("/webhooks/stripe", stripeWebhook(cfg))
	e.GET("/", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
		c.Response().WriteHeader(http.StatusOK)
		return web.Home().Render(c.Request().Context(), c.Response())
	})
	if cfg.Dashboard != nil {
		cfg.Dashboard(e)
	}
	if cfg.Console != nil {
		cfg.Console(e)
	}
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	var counterAnswered atomic.Bool
	e.GET("/readyz", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
		defer cancel()
		if err := cfg.Ready(ctx); err != nil {
			cfg.Logger.WarnContext(ctx, "not ready", "err", err)
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "database unavailable"})
		}
		if cfg.CounterReady != nil && !counterAnswered.Load() {
			if err := cfg.CounterReady(ctx); err != nil {
				cfg.Logger.WarnContext(ctx, "not ready: the counter store has not answered since start", "err", err)
				return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "counter store has not answered since start"})
			}
			if counterAnswered.CompareAndSwap(false, true) {
				cfg.Logger.InfoContext(ctx, "counter store answered; ready")
			}
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
	timers.learn(e)
	return e
}

// Problem is an RFC 9457 problem body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// errorHandler writes every error as application/problem+json, its status
// from the one table in problem.go; an error the table does not account for
// is an internal error whose cause is logged, never shown.
//
// An error of a request whose client went away (its context canceled: the
// store call, the database read or the body read it was waiting on gave
// up with it) is nobody's fault here: it is logged at debug level as
// "client went away" and answered 499, which no client reads but the
// request metrics count.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if clientGone(c) {
			log.DebugContext(c.Request().Context(), "client went away", "method", c.Request().Method, "path", c.Path(), "err", err)
			_ = c.NoContent(statusClientGone)
			return
		}
		p, known := problemFor(err)
		if !known {
			log.ErrorContext(c.Request().Context(), "request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		}
		if p.Status == http.StatusServiceUnavailable || errors.Is(err, gate.ErrBusy) {
			// Unavailable for now, not for good: when to ask again.
			c.Response().Header().Set("Retry-After", "1")
		}
		if errors.Is(err, gate.ErrBusy) {
			c.Response().Header().Set("X-RateLimit-Layer", admission.LayerInflight)
		}
		if errors.Is(err, webhooks.ErrOutboxFull) {
			// Room comes as the endpoint's deliveries are delivered or
			// given up, which nothing here can tell: a pause.
			c.Response().Header().Set("Retry-After", "60")
		}
		sendProblem(c, p)
	}
}

// edge runs what every request passes through, outermost first: the
// request's timing (tollgate_http_request_duration_seconds), the recovery
// of bugs, Strict-Transport-Security, the ceilings of the pages without an
// API key (cfg.Public), the bound on bodies in flight. It is one
// middleware rather than five because Echo builds a request's middleware
// chain anew for every request, one closure a layer: on /v1/check that was
// three allocations a check for nothing.
//
// The timing needs the answer's status, so edge hands an error to Echo's
// error handler itself (as Echo would once edge returned it) before it
// reads the status.
func edge(cfg Config, budget *bodyBudget, timers *routeTimers) echo.MiddlewareFunc {
	secure, proxies := cfg.SecureTransport, cfg.ClientIP.TrustedProxies
	var public *api
	if cfg.Public != nil {
		public = &api{cfg: cfg}
	}
	log := cfg.Logger
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			start := time.Now()
			defer func() {
				if err != nil {
					c.Error(err)
					err = nil
				}
				timers.observe(c, start)
			}()
			defer recoverBug(log, c, &err)
			if overTLS(c.Request(), secure, proxies) {
				c.Response().Header().Set("Strict-Transport-Security", hstsValue)
			}
			if public != nil {
				if refused, err := public.publicRefusal(c); refused {
					return err
				}
			}
			return budget.around(c, next)
		}
	}
}

// recoverBugs turns a panic into a logged bug and a 500: the one recover in
// Tollgate (edge runs it for every request; tests mount it alone).
func recoverBugs(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer recoverBug(log, c, &err)
			return next(c)
		}
	}
}

// recoverBug, deferred, turns a panic of the request c into a logged bug
// and an error (a 500) in *err.
func recoverBug(log *slog.Logger, c echo.Context, err *error) {
	r := recover()
	if r == nil {
		return
	}
	if r == http.ErrAbortHandler {
		panic(r)
	}
	log.ErrorContext(c.Request().Context(), "bug: handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	*err = errors.New("handler panicked")
}
