// Package dashboard is Tollgate's operators' dashboard under /admin: sign-in
// with argon2id passwords and server-side sessions, CSRF tokens on every
// form that posts, the sign-in limiter (Tollgate's own counters), and the
// handlers that build web's view models from the domain packages: overview,
// tenants (and creating one), a tenant's page (keys, limits, policies,
// unlocking a subject, alerts, billing) with the pages that ask before
// revoking a key or deleting a policy, Stripe events, plans, admins and the
// audit log.
//
// dashboard imports domain packages and web; never pgstore, a driver or
// httpapi. cmd/tollgate wires the stores and mounts it on httpapi's Echo
// (httpapi.Config.Dashboard).
package dashboard

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/signin"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/traffic"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/internal/usageview"
	"github.com/tollgate/tollgate/web"
)

// TenantStore is what the dashboard reads and changes of tenants, keys and
// plans (tenant.Store).
type TenantStore interface {
	// CreateTenant is tenant.Create's call (tenant.Creator).
	CreateTenant(ctx context.Context, name, plan string, keys ...tenant.Key) (tenant.Tenant, error)
	Tenant(ctx context.Context, id string) (tenant.Tenant, error)
	SetTenantLimits(ctx context.Context, id string, l tenant.TenantLimits) (tenant.Tenant, error)
	// SetTenantDisabled disables the tenant with reason, or enables it
	// (pgstore.Tenants').
	SetTenantDisabled(ctx context.Context, id string, disabled bool, reason string) (tenant.Tenant, error)
	CreateKey(ctx context.Context, k tenant.Key) (tenant.Key, error)
	Keys(ctx context.Context, tenantID string) ([]tenant.Key, error)
	RevokeKey(ctx context.Context, id string) (tenant.Key, error)
	Plans(ctx context.Context) ([]tenant.Plan, error)
	Plan(ctx context.Context, name string) (tenant.Plan, error)
	SetPlanPrice(ctx context.Context, name, stripePriceID string) (tenant.Plan, error)
	SetPlanLimits(ctx context.Context, name string, l tenant.PlanLimits) (tenant.Plan, error)
}

// UsageReporter answers a tenant's usage report (*usage.Recorder), which
// counts what is still in memory too.
type UsageReporter interface {
	Usage(ctx context.Context, tenantID string, now time.Time) (usage.Report, error)
}

// CustomerLinker links a Stripe customer that no tenant had to a tenant and
// applies the events held for it, auditing the link with actor
// (*billing.Service). It returns billing.ErrNotFound for an unknown tenant,
// billing.ErrConflict for a customer another tenant has.
type CustomerLinker interface {
	LinkCustomer(ctx context.Context, tenantID, customerID, actor string) error
}

// WebhookLog reads the Stripe events received (*billing.Service).
type WebhookLog interface {
	// Events lists the events f selects, newest first, without payloads.
	Events(ctx context.Context, f billing.EventFilter) ([]billing.EventRecord, error)
	// Event returns one event with its payload; billing.ErrNotFound when
	// there is none.
	Event(ctx context.Context, id string) (billing.EventRecord, error)
}

// LeaseCounter counts a tenant's live leases of each named policy, live
// keys' only (*gate.Gate).
type LeaseCounter interface {
	InFlight(ctx context.Context, tenantID string, policies []string) ([]int64, error)
}

// BudgetReader says where a tenant's budgets stand, live keys' only
// (*gate.Gate's Budgets).
type BudgetReader interface {
	Budgets(ctx context.Context, tenantID string, policies []string, subject string) ([]gate.Budget, error)
}

// CounterResetter clears one subject's counter of a tenant's policy (for a
// concurrency policy, its leases), live or the sandbox's, as DELETE
// /v1/policies/{name}/subjects/{subject} does (*gate.Gate). It returns the
// counter's key, a digest that names the subject without holding it.
// Errors: *policy.NotFoundError and *policy.FieldError for what the
// operator typed; gate.ErrStoreUnavailable, gate.ErrBusy and
// gate.ErrUnavailable when it could not be done now.
type CounterResetter interface {
	Reset(ctx context.Context, tenantID string, test bool, policy, subject string) (string, error)
}

// AuditLog records and lists audit entries (*audit.Log).
type AuditLog interface {
	Record(ctx context.Context, e audit.Entry) error
	List(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

// Config is what the dashboard calls. Accounts, Tenants, Policies, Usage,
// Audit, Traffic, SignInLimiter and Pepper are required.
type Config struct {
	Logger   *slog.Logger
	Accounts admin.Store
	Tenants  TenantStore
	// Policies are the tenants' policies and overrides, which operators
	// change on a tenant's page (through policy.Service, which audits).
	Policies policy.Store
	Usage    UsageReporter
	// PolicyUsage counts checks and refusals per policy, shown on a
	// tenant's page (*usage.PolicyRecorder); nil: the page says they are
	// not counted.
	PolicyUsage usageview.PolicySource
	Audit       AuditLog
	Traffic     traffic.Store
	// Webhooks is the Stripe event log; nil shows the webhook pages empty,
	// with what to configure.
	Webhooks WebhookLog
	// Endpoints are the tenants' outbound webhook endpoints, listed on a
	// tenant's page where an operator may disable or enable one; nil lists
	// none.
	Endpoints Endpoints
	// Members are the tenants' console members, listed on each tenant's
	// page, where an operator disables one; nil: the page says the console
	// is not wired.
	Members Members
	// Billing links the customers of events held as unknown_customer; nil
	// offers no link form.
	Billing CustomerLinker
	// Leases counts a tenant's leases in flight per concurrency policy
	// (*gate.Gate); nil shows them as unavailable.
	Leases LeaseCounter
	// Budgets shows where each budget of scope global stands on a tenant's
	// page (*gate.Gate); nil shows them as unavailable.
	Budgets BudgetReader
	// Counters unlocks subjects: the tenant page's form resets one
	// subject's counter of a policy through it (*gate.Gate, on the counter
	// store the API counts in); nil offers no form.
	Counters CounterResetter
	// SignInLimiter counts sign-ins against their limits: in the shared
	// counter store, so that they hold across instances, else in this
	// instance's memory (gate.NewLimiter).
	SignInLimiter *gate.Limiter
	// Pepper keys the HMACs that turn client IPs and emails into counter
	// keys.
	Pepper []byte
	// SecureCookies marks cookies Secure even on plain HTTP requests (TLS
	// ended by a proxy); requests that arrive over TLS get Secure anyway.
	SecureCookies bool
	// SessionTTL is how long a sign-in lasts at most, however busy
	// (default 12 h).
	SessionTTL time.Duration
	// IdleTimeout ends a session not used for that long (default 30 min).
	// It slides: each signed-in request extends it, though the session's
	// last-seen time is stored at most once a minute (or once per half
	// IdleTimeout, when that is shorter), so a session may end up to that
	// much early.
	IdleTimeout time.Duration
	// Changed is told what the dashboard changed ("tenant" with an id,
	// "key" with a prefix, "plan" with a name, "policy" with a tenant's id), so that this instance's
	// caches drop it at once; other instances learn it from the database's
	// change notifications. May be nil.
	Changed func(kind, id string)
	// StripeDashboardURL is where customer links point (default
	// https://dashboard.stripe.com).
	StripeDashboardURL string
	// Argon2 is the cost of new password hashes (default
	// admin.DefaultArgon2).
	Argon2 admin.Argon2Params
	// Hasher bounds the sign-in password checks running at once (default
	// admin.NewHasher(0, 0): admin.DefaultMaxHashes, waiting up to
	// admin.DefaultHashWait); a sign-in that finds it busy is answered
	// 503 with Retry-After.
	Hasher *admin.Hasher
	Now    func() time.Time
}

// Dashboard serves /admin. It is safe for concurrent use.
type Dashboard struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	limiter *signin.Limiter
	// touchEvery is how stale a session's stored last-seen time may get
	// before a request writes it again.
	touchEvery time.Duration
}

// New checks cfg and returns the dashboard. Call Run for its housekeeping
// and Register to mount it.
func New(cfg Config) (*Dashboard, error) {
	switch {
	case cfg.Accounts == nil, cfg.Tenants == nil, cfg.Policies == nil, cfg.Usage == nil,
		cfg.Audit == nil, cfg.Traffic == nil, cfg.SignInLimiter == nil:
		return nil, errors.New("dashboard: a required store is missing")
	case len(cfg.Pepper) == 0:
		return nil, errors.New("dashboard: no pepper")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.StripeDashboardURL == "" {
		cfg.StripeDashboardURL = "https://dashboard.stripe.com"
	}
	if cfg.Hasher == nil {
		cfg.Hasher = admin.NewHasher(0, 0)
	}
	if cfg.Argon2 == (admin.Argon2Params{}) {
		cfg.Argon2 = admin.DefaultArgon2
	}
	cfg.StripeDashboardURL = strings.TrimRight(cfg.StripeDashboardURL, "/")
	return &Dashboard{
		cfg: cfg, log: cfg.Logger, now: cfg.Now, touchEvery: min(time.Minute, cfg.IdleTimeout/2),
		limiter: signin.NewLimiter(cfg.SignInLimiter, cfg.Pepper, realm),
	}, nil
}

// Run deletes expired sessions every hour until ctx ends; it returns ctx's
// error.
func (d *Dashboard) Run(ctx context.Context) error {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if err := d.cfg.Accounts.PruneSessions(ctx, d.now()); err != nil && ctx.Err() == nil {
			d.log.WarnContext(ctx, "expired admin sessions not pruned", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Register mounts the dashboard on e under /admin.
func (d *Dashboard) Register(e *echo.Echo) {
	static, _ := fs.Sub(web.Static, "static")
	files := http.StripPrefix("/admin/static/", http.FileServer(http.FS(static)))
	e.GET("/admin/static/*", func(c echo.Context) error {
		// The pages name the sheet with its digest: it may be cached for
		// good.
		c.Response().Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	})

	g := e.Group("/admin", signin.SecurityHeaders, signin.BodyLimit, d.validInput)
	g.GET("/login", d.loginPage)
	g.POST("/login", d.login)
	g.POST("/logout", d.page(d.logout))
	g.GET("", d.page(d.overview))
	g.GET("/", d.page(d.overview))
	g.GET("/tenants", d.page(d.tenants))
	g.POST("/tenants", d.page(d.createTenant))
	g.GET("/tenants/:id", d.page(d.tenantPage))
	g.POST("/tenants/:id/keys", d.page(d.createKey))
	g.GET("/tenants/:id/keys/:key/revoke", d.page(d.confirmRevokeKey))
	g.POST("/tenants/:id/keys/:key/revoke", d.page(d.revokeKey))
	g.POST("/tenants/:id/endpoints/:endpoint/disable", d.page(d.disableEndpoint))
	g.POST("/tenants/:id/endpoints/:endpoint/enable", d.page(d.enableEndpoint))
	g.POST("/tenants/:id/members/:member/disable", d.page(d.disableMember))
	g.POST("/tenants/:id/members/:member/enable", d.page(d.enableMember))
	g.POST("/tenants/:id/limits", d.page(d.setLimits))
	g.GET("/tenants/:id/disable", d.page(d.confirmDisableTenant))
	g.POST("/tenants/:id/disable", d.page(d.disableTenant))
	g.POST("/tenants/:id/enable", d.page(d.enableTenant))
	g.POST("/tenants/:id/subjects/reset", d.page(d.unlockSubject))
	g.POST("/tenants/:id/policies", d.page(d.putPolicy))
	g.GET("/tenants/:id/policies/:name/delete", d.page(d.confirmDeletePolicy))
	g.POST("/tenants/:id/policies/:name/delete", d.page(d.deletePolicy))
	g.POST("/tenants/:id/policies/:name/overrides", d.page(d.putOverride))
	g.POST("/tenants/:id/policies/:name/overrides/delete", d.page(d.deleteOverride))
	g.GET("/webhooks", d.page(d.webhooks))
	g.GET("/webhooks/:id", d.page(d.webhooks))
	g.POST("/webhooks/:id/link", d.page(d.linkCustomer))
	g.GET("/plans", d.page(d.plans))
	g.POST("/plans/:name", d.page(d.setPlan))
	g.GET("/admins", d.page(d.admins))
	g.POST("/admins", d.page(d.createAdmin))
	g.GET("/audit", d.page(d.auditPage))
	g.Any("/*", d.page(func(c echo.Context, s *signedIn) error {
		return notFound("There is no dashboard page at this address.")
	}))
}

// pageError is an error a page answers with its own status and a message
// for the operator.
type pageError struct {
	status  int
	title   string
	message string
}

func (e *pageError) Error() string { return e.title + ": " + e.message }

func notFound(msg string) error {
	return &pageError{http.StatusNotFound, "Not found", msg}
}

func badRequest(msg string) error {
	return &pageError{http.StatusBadRequest, "Bad request", msg}
}

// render writes component with status.
func render(c echo.Context, status int, component templ.Component) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	return component.Render(c.Request().Context(), c.Response())
}

// fail answers err as a page: its own status for a pageError or a known
// sentinel, else 500 with the cause logged and not shown.
func (d *Dashboard) fail(c echo.Context, s *signedIn, err error) error {
	var pe *pageError
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, tenant.ErrNotFound), errors.Is(err, billing.ErrNotFound):
		pe = &pageError{http.StatusNotFound, "Not found", "Nothing here by that name: it may have been deleted, or the link is mistyped."}
	default:
		d.log.ErrorContext(c.Request().Context(), "dashboard request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		pe = &pageError{http.StatusInternalServerError, "Something went wrong", "The page could not be built. The error is in the server log; try again in a moment."}
	}
	v := web.ErrorView{Status: pe.status, Message: pe.message}
	v.Title = pe.title
	if s == nil {
		return render(c, pe.status, web.ErrorSignedOut(v))
	}
	v.Chrome = d.chrome(s, pe.title, "")
	return render(c, pe.status, web.Error(v))
}

// chrome fills what every signed-in page shares.
func (d *Dashboard) chrome(s *signedIn, title, section string) web.Chrome {
	return web.Chrome{Title: title, Section: section, AdminEmail: s.admin.Email, CSRF: s.csrf}
}

// changed tells the caches what changed.
func (d *Dashboard) changed(kind, id string) {
	if d.cfg.Changed != nil {
		d.cfg.Changed(kind, id)
	}
}

// record writes an audit entry by the signed-in admin. A failure is logged
// and does not undo the change it describes: the change committed first.
func (d *Dashboard) record(ctx context.Context, s *signedIn, tenantID, kind string, detail map[string]any) {
	err := d.cfg.Audit.Record(ctx, audit.Entry{TenantID: tenantID, Actor: s.admin.Email, Kind: kind, Detail: detail})
	if err != nil {
		d.log.ErrorContext(ctx, "audit entry not written", "kind", kind, "tenant_id", tenantID, "err", err)
	}
}

// seeOther redirects after a post, so that reloading does not post again.
func seeOther(c echo.Context, path string) error {
	return c.Redirect(http.StatusSeeOther, path)
}
