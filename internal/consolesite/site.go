// Package consolesite is the tenants' console (/console, issue 41): a
// developer signs up with an email and a password, gets a test key at once
// and a live key once the address is confirmed, signs in and out, and finds
// the quick start with their own key in it. It is server-rendered (templ
// components in package web, no script), and shares with the operators'
// dashboard its sign-in limiter, form tokens and page headers (package
// signin), its style sheet and its document head.
package consolesite

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/signin"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// realm keeps the console's sign-in counters and form tokens apart from
// the dashboard's.
const realm = "console"

// Cookies: the session's, and the signed-out forms' token (the
// double-submit pattern, as the dashboard's sign-in).
const (
	sessionCookie = "tg_console"
	formCookie    = "tg_console_form"
)

// SignUpsPerNetwork bounds the sign-ups one client network (an IPv4
// address, an IPv6 /64) may make an hour: each that passes the form's
// checks counts, a taken email's too, so that probing which emails have
// accounts costs as making them does.
const SignUpsPerNetwork = 5

// Tenants is what the console reads of its member's tenant.
type Tenants interface {
	Tenant(ctx context.Context, id string) (tenant.Tenant, error)
	Keys(ctx context.Context, tenantID string) ([]tenant.Key, error)
	// CreateKey, RevokeKey and ShortenKeyExpiry are the keys page's
	// changes (tenant.Store's, and pgstore.Tenants' ShortenKeyExpiry).
	CreateKey(ctx context.Context, k tenant.Key) (tenant.Key, error)
	RevokeKey(ctx context.Context, id string) (tenant.Key, error)
	ShortenKeyExpiry(ctx context.Context, tenantID, id string, at time.Time) (tenant.Key, error)
}

// AuditLog is where the keys page records its changes and reads them back
// (an *audit.Log).
type AuditLog interface {
	Record(ctx context.Context, e audit.Entry) error
	List(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

// Config is what the console is built from.
type Config struct {
	Logger  *slog.Logger
	Members console.Store
	Tenants Tenants
	// Hasher bounds the password hashes running at once (shared with the
	// dashboard's sign-ins).
	Hasher *admin.Hasher
	// Limits counts sign-ins and sign-ups (the shared counter store, else
	// this instance's memory); Pepper keys their counters.
	Limits *gate.Limiter
	Pepper []byte
	// Mail sends the confirmation mail. Mailbox, when not nil, is the
	// development mailbox Mail is: the console then refuses sign-ups
	// unless Dev (a production Tollgate would otherwise write the links
	// that open accounts to its log), and shows it at /console/dev/mailbox
	// when Dev.
	Mail    mail.Sender
	Mailbox *mail.Mailbox
	Dev     bool
	// PublicURL is this service's address, for the links mailed and the
	// snippets shown.
	PublicURL     string
	SecureCookies bool
	// SessionTTL is how long a sign-in lasts (default 12 hours).
	SessionTTL time.Duration
	Now        func() time.Time
	// Audit records the members' key changes; Changed, when not nil,
	// drops a changed key from this instance's caches at once.
	Audit   AuditLog
	Changed func(kind, id string)
	// Billing starts Checkout and opens the Stripe portal for the billing
	// page (billing.Service); nil, without STRIPE_API_KEY, shows a note
	// instead of the buttons. Plans gives the allotments and the plans
	// for sale; nil shows none.
	Billing Billing
	Plans   Plans
	// Policies is the tenants' policies store (*pgstore.Policies), which
	// the policies page changes through policy.Service; nil leaves the
	// page out.
	Policies policy.Store
	// Counters tries and unlocks subjects of the policies (*gate.Gate, on
	// the counter store the API counts in); nil leaves those forms out.
	Counters Counters
	// Usage is what the usage page reads; nil (or incomplete) answers it
	// with a 503 page.
	Usage *UsageSources
	// Webhooks is the tenants' webhooks service (webhooks.Service); nil
	// leaves the webhooks page out. WebhookTests counts test sends in the
	// API's limit, WebhookTestsPerMinute of them (default 10).
	Webhooks              Webhooks
	WebhookTests          *gate.Limiter
	WebhookTestsPerMinute int64
}

// Site is the console.
type Site struct {
	cfg     Config
	log     *slog.Logger
	limiter *signin.Limiter
}

// New returns the console over cfg.
func New(cfg Config) (*Site, error) {
	if cfg.Members == nil || cfg.Tenants == nil || cfg.Hasher == nil || cfg.Limits == nil || cfg.Mail == nil || len(cfg.Pepper) == 0 {
		return nil, errors.New("console: members, tenants, hasher, limits, mail and pepper are required")
	}
	if cfg.Audit == nil {
		return nil, errNoAudit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	return &Site{cfg: cfg, log: cfg.Logger, limiter: signin.NewLimiter(cfg.Limits, cfg.Pepper, realm)}, nil
}

// Register mounts the console's pages on e.
func (s *Site) Register(e *echo.Echo) {
	g := e.Group("/console", signin.SecurityHeaders, signin.BodyLimit)
	g.GET("/signup", s.signUpPage)
	g.POST("/signup", s.signUp)
	g.GET("/confirm", s.confirmPage)
	g.POST("/confirm", s.confirm)
	g.GET("/login", s.loginPage)
	g.POST("/login", s.login)
	g.POST("/logout", s.page(s.logout))
	g.GET("", s.page(s.home))
	g.GET("/", s.page(s.home))
	g.GET("/dev/mailbox", s.mailbox)
	s.registerKeys(g)
	s.registerReset(g)
	s.registerTeam(g)
	s.registerUsage(g)
	s.registerBilling(g)
	if s.cfg.Policies != nil {
		s.registerPolicies(g)
	}
	if s.cfg.Webhooks != nil {
		s.registerWebhooks(g)
	}
	if s.cfg.Policies != nil && s.cfg.Counters != nil {
		s.registerPolicyCounters(g)
	}
	g.Any("/*", func(c echo.Context) error {
		return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found", Message: "There is no console page at this address.", Link: "/console", LinkLabel: "The console"})
	})
}

// member is the request's signed-in member.
type member struct {
	console.Member
	token string
	csrf  string
}

// page wraps a signed-in page: no session sends the browser to sign in
// (and back afterwards), and a post must carry the session's form token.
func (s *Site) page(h func(c echo.Context, m *member) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		m, err := s.session(c)
		if err != nil {
			return s.fail(c, err)
		}
		if m == nil {
			next := ""
			if c.Request().Method == http.MethodGet {
				next = c.Request().URL.RequestURI()
			}
			return c.Redirect(http.StatusSeeOther, "/console/login"+signin.Query("next", consoleNext(next)))
		}
		if c.Request().Method != http.MethodGet && !signin.SameToken(signin.PostedToken(c), m.csrf) {
			return s.message(c, http.StatusForbidden, web.ConsoleMessageView{Title: "Form expired",
				Message: "This form was not sent from a current console page. Go back, reload the page and try again.", Link: "/console", LinkLabel: "The console"})
		}
		return h(c, m)
	}
}

// session returns the request's member, or nil without a live session.
func (s *Site) session(c echo.Context) (*member, error) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return nil, nil
	}
	ctx := c.Request().Context()
	_, m, err := s.cfg.Members.SessionMember(ctx, ck.Value)
	if errors.Is(err, console.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if errors.Is(err, tenant.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.Disabled() {
		// Signed out: this session is over, whatever happens to the
		// workspace later. Sessions not presented while it is disabled
		// end the same way at their next request.
		if err := s.cfg.Members.DeleteSession(ctx, ck.Value); err != nil {
			return nil, err
		}
		s.setCookie(c, sessionCookie, "", -1)
		s.log.InfoContext(ctx, "console session of a disabled tenant ended", "tenant_id", t.ID, "member_id", m.ID)
		return nil, errWorkspaceDisabled
	}
	return &member{Member: m, token: ck.Value, csrf: signin.CSRFFor(realm, ck.Value)}, nil
}

// errWorkspaceDisabled is a session or a sign-in of a member whose tenant
// an operator disabled; fail answers it with workspaceDisabled's page.
var errWorkspaceDisabled = errors.New("workspace disabled")

// workspaceDisabled is what a member of a disabled tenant is told: signed
// out, and why. The operator's reason is not shown: it is the operator's
// note.
var workspaceDisabled = web.ConsoleMessageView{Title: "This workspace is disabled",
	Message: "The operator of this Tollgate disabled this workspace: you are signed out, nobody of it can sign in, and the API refuses its keys, until the operator enables it again. Nothing of it is deleted. Ask the operator why.",
	Link:    "/console/login", LinkLabel: "The sign-in page"}

// consoleNext is next when it is a console page to go on to after
// signing in, else "".
func consoleNext(next string) string { return signin.SafeNext("/console", next) }

func (s *Site) setCookie(c echo.Context, name, value string, maxAge int) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: value, Path: "/console", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.cfg.SecureCookies || c.Request().TLS != nil,
	})
}

// formToken sets a fresh signed-out form token and returns it.
func (s *Site) formToken(c echo.Context) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	t := base64.RawURLEncoding.EncodeToString(b)
	s.setCookie(c, formCookie, t, 3600)
	return t, nil
}

// postedForm reports whether a signed-out form carries the token its page
// set.
func postedForm(c echo.Context) bool {
	ck, err := c.Cookie(formCookie)
	return err == nil && signin.SameToken(signin.PostedToken(c), ck.Value)
}

// authPage renders the sign-up or sign-in form with a fresh form token.
func (s *Site) authPage(c echo.Context, status int, v web.ConsoleAuthView) error {
	return s.signedOutForm(c, status, func(csrf string) templ.Component { v.CSRF = csrf; return web.ConsoleAuth(v) })
}

// signedOutForm renders the page page makes around a signed-out form,
// given a fresh form token (formToken) to carry.
func (s *Site) signedOutForm(c echo.Context, status int, page func(csrf string) templ.Component) error {
	t, err := s.formToken(c)
	if err != nil {
		return s.fail(c, err)
	}
	return render(c, status, page(t))
}

// refused fills v for a refusal by the limiter and answers 429.
func (s *Site) refused(c echo.Context, v web.ConsoleAuthView, ref *signin.Refusal) error {
	v.Error, v.RetryAfter = s.retry(c, ref)
	return s.authPage(c, http.StatusTooManyRequests, v)
}

// signUpPage shows the sign-up form, or sends a signed-in member home.
func (s *Site) signUpPage(c echo.Context) error {
	if m, err := s.session(c); err == nil && m != nil {
		return c.Redirect(http.StatusSeeOther, "/console")
	}
	return s.authPage(c, http.StatusOK, web.ConsoleAuthView{SignUp: true})
}

// signUp makes a tenant on the starter plan with a test key, its owner
// (signed in at once), and mails the confirmation link that brings the live
// key. It is counted per client network: every attempt as a sign-in
// attempt, every account made against SignUpsPerNetwork an hour.
func (s *Site) signUp(c echo.Context) error {
	ctx := c.Request().Context()
	email := strings.TrimSpace(c.Request().PostFormValue("email"))
	password := c.Request().PostFormValue("password")
	name := strings.TrimSpace(c.Request().PostFormValue("name"))
	v := web.ConsoleAuthView{SignUp: true, Email: email, Name: name}
	if !postedForm(c) {
		v.Error = "The sign-up form expired. Please try again."
		return s.authPage(c, http.StatusForbidden, v)
	}
	if s.mailClosed() {
		return s.noMail(c, "Sign-up is not open", "a new account needs its address confirmed")
	}
	norm, normErr := admin.NormalizeEmail(email)
	if normErr != nil {
		norm = strings.ToLower(email)
	}
	ref, err := s.limiter.Admit(ctx, c.RealIP(), norm)
	if err != nil {
		return s.fail(c, err)
	}
	if ref != nil {
		return s.refused(c, v, ref)
	}
	switch {
	case normErr != nil:
		v.Error = "Enter a valid email address."
	case admin.ValidatePassword(password) != nil:
		v.Error = fmt.Sprintf("Choose a password of %d to %d characters.", admin.MinPasswordLen, admin.MaxPasswordLen)
	case tenant.ValidateName(name) != nil:
		v.Error = "Name your workspace: 1 to 100 characters of text."
	}
	if v.Error != "" {
		return s.authPage(c, http.StatusBadRequest, v)
	}
	if ref, err := s.limiter.SignUp(ctx, c.RealIP(), SignUpsPerNetwork); err != nil {
		return s.fail(c, err)
	} else if ref != nil {
		return s.refused(c, v, ref)
	}
	hash, err := s.cfg.Hasher.Hash(ctx, password, admin.DefaultArgon2)
	if errors.Is(err, admin.ErrBusy) {
		c.Response().Header().Set("Retry-After", "1")
		v.Error = "Tollgate is busy. Please try again in a moment."
		return s.authPage(c, http.StatusServiceUnavailable, v)
	}
	if err != nil {
		return s.fail(c, err)
	}
	m, created, token, err := s.cfg.Members.SignUp(ctx, norm, hash, name)
	if errors.Is(err, console.ErrEmailTaken) {
		v.Error = "An account with this email exists. Sign in instead."
		return s.authPage(c, http.StatusConflict, v)
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.log.InfoContext(ctx, "console sign-up", "tenant_id", created.Tenant.ID, "member_id", m.ID)
	if err := s.mailConfirmation(ctx, m.Email, token); err != nil {
		s.log.ErrorContext(ctx, "console confirmation mail not sent", "member_id", m.ID, "err", err)
	}
	raw, err := s.cfg.Members.CreateSession(ctx, m.TenantID, m.ID, s.cfg.Now().Add(s.cfg.SessionTTL))
	if err != nil {
		return s.fail(c, err)
	}
	s.setCookie(c, formCookie, "", -1)
	s.setCookie(c, sessionCookie, raw, int(s.cfg.SessionTTL/time.Second))
	signed := &member{Member: m, token: raw, csrf: signin.CSRFFor(realm, raw)}
	return s.renderHome(c, signed, []web.ConsoleNewKey{{Kind: "test", Value: created.Test}}, "Welcome. Your test key works now; confirm your email for a live one.")
}

// mailClosed reports whether this Tollgate may not mail the links that open
// accounts or reset passwords: no SMTP server outside development, where
// the development mailbox would write them to the log.
func (s *Site) mailClosed() bool { return s.cfg.Mailbox != nil && !s.cfg.Dev }

// noMail answers a form that needs a mail while mailClosed (503).
func (s *Site) noMail(c echo.Context, title, why string) error {
	return s.message(c, http.StatusServiceUnavailable, web.ConsoleMessageView{Title: title,
		Message: "This Tollgate cannot send email yet, and " + why + ": its operator sets TOLLGATE_SMTP_URL.", Link: "/console", LinkLabel: "The console"})
}

// mailConfirmation mails to the link that confirms the address.
func (s *Site) mailConfirmation(ctx context.Context, to, token string) error {
	link := s.cfg.PublicURL + "/console/confirm" + signin.Query("token", token)
	return s.cfg.Mail.Send(ctx, mail.Message{To: to, Subject: "Confirm your email for Tollgate",
		Text: "Someone (we hope you) signed up to Tollgate with this address.\n\n" +
			"Confirm it, and get your live API key, here:\n\n" + link + "\n\n" +
			"The link works once, for 48 hours. If it was not you, ignore this mail: nothing happens without it.\n"})
}

// confirmPage asks for a click: a GET must not spend the token, since mail
// scanners follow links.
func (s *Site) confirmPage(c echo.Context) error {
	token := c.QueryParam("token")
	if token == "" || len(token) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No confirmation", Message: "This link carries no confirmation: open the link of the mail as it was sent.", Link: "/console", LinkLabel: "The console"})
	}
	return render(c, http.StatusOK, web.ConsoleConfirm(token))
}

// confirm spends a confirmation token: the address is confirmed and the
// tenant's live key made, shown once on the answer.
func (s *Site) confirm(c echo.Context) error {
	ctx := c.Request().Context()
	token := c.Request().PostFormValue("token")
	if token == "" || len(token) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No confirmation", Message: "This form carries no confirmation.", Link: "/console", LinkLabel: "The console"})
	}
	m, live, err := s.cfg.Members.Confirm(ctx, token)
	if errors.Is(err, console.ErrTokenInvalid) {
		return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "This link no longer works",
			Message: "It was used already, or it expired (after 48 hours). If your address is confirmed, your live key is on the page you saw then; sign in to see your keys.", Link: "/console/login", LinkLabel: "Sign in"})
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.log.InfoContext(ctx, "console email confirmed", "tenant_id", m.TenantID, "member_id", m.ID)
	signed, err := s.session(c)
	if err != nil && !errors.Is(err, errWorkspaceDisabled) {
		return s.fail(c, err)
	}
	// A member of a disabled workspace was signed out by session: the key
	// is shown once all the same (it is refused until the workspace is
	// enabled, and is not shown again then).
	keys := []web.ConsoleNewKey{{Kind: "live", Value: live}}
	if signed != nil && signed.ID == m.ID {
		signed.Member = m
		return s.renderHome(c, signed, keys, "Your email is confirmed: here is your live key.")
	}
	return render(c, http.StatusOK, web.ConsoleConfirmed(web.ConsoleConfirmedView{Key: live}))
}

// loginPage shows the sign-in form, or sends a signed-in member on.
func (s *Site) loginPage(c echo.Context) error {
	next := consoleNext(c.QueryParam("next"))
	if m, err := s.session(c); err == nil && m != nil {
		return c.Redirect(http.StatusSeeOther, cmp.Or(next, "/console"))
	}
	v := web.ConsoleAuthView{Next: next}
	if c.QueryParam("signed_out") != "" {
		v.Notice = "You are signed out."
	}
	if c.QueryParam("reset") != "" {
		v.Notice = "Your password is changed, and you are signed out everywhere: sign in with the new one."
	}
	return s.authPage(c, http.StatusOK, v)
}

// login checks a sign-in as the dashboard's does: the form token, the
// limiter (attempts per network, failures per account), then the password
// within the hasher's bound; a disabled member cannot sign in.
func (s *Site) login(c echo.Context) error {
	ctx := c.Request().Context()
	email := strings.TrimSpace(c.Request().PostFormValue("email"))
	password := c.Request().PostFormValue("password")
	v := web.ConsoleAuthView{Email: email, Next: consoleNext(c.FormValue("next"))}
	if !postedForm(c) {
		v.Error = "The sign-in form expired. Please sign in again."
		return s.authPage(c, http.StatusForbidden, v)
	}
	norm, err := admin.NormalizeEmail(email)
	if err != nil {
		norm = strings.ToLower(email)
	}
	ref, err := s.limiter.Admit(ctx, c.RealIP(), norm)
	if err != nil {
		return s.fail(c, err)
	}
	if ref != nil {
		return s.refused(c, v, ref)
	}
	m, err := s.cfg.Members.MemberByEmail(ctx, norm)
	ok := false
	switch {
	case errors.Is(err, console.ErrNotFound) || err == nil && (m.PasswordHash == "" || m.DisabledAt != nil):
		err = s.cfg.Hasher.Decoy(ctx, password)
	case err != nil:
		return s.fail(c, err)
	default:
		ok, err = s.cfg.Hasher.Check(ctx, m.PasswordHash, password)
	}
	switch {
	case errors.Is(err, admin.ErrBusy):
		c.Response().Header().Set("Retry-After", "1")
		v.Error = "Tollgate is busy checking other sign-ins. Please try again in a moment."
		return s.authPage(c, http.StatusServiceUnavailable, v)
	case err != nil:
		s.log.ErrorContext(ctx, "stored member password hash unreadable", "member_id", m.ID, "err", err)
		ok = false
	}
	if !ok {
		if err := s.limiter.Failed(ctx, c.RealIP(), norm); err != nil {
			return s.fail(c, err)
		}
		s.log.WarnContext(ctx, "console sign-in failed", "client_ip_digest", s.limiter.ClientDigest(c.RealIP()))
		v.Error = "Wrong email or password."
		return s.authPage(c, http.StatusUnauthorized, v)
	}
	// Told only to whoever knows the password: a guesser learns nothing
	// of the workspace.
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	if t.Disabled() {
		s.log.InfoContext(ctx, "console sign-in of a disabled tenant refused", "tenant_id", t.ID, "member_id", m.ID)
		v.Error = "This workspace is disabled by the operator of this Tollgate: nobody of it can sign in until it is enabled again. Ask the operator why."
		return s.authPage(c, http.StatusForbidden, v)
	}
	raw, err := s.cfg.Members.CreateSession(ctx, m.TenantID, m.ID, s.cfg.Now().Add(s.cfg.SessionTTL))
	if err != nil {
		return s.fail(c, err)
	}
	s.setCookie(c, formCookie, "", -1)
	s.setCookie(c, sessionCookie, raw, int(s.cfg.SessionTTL/time.Second))
	s.log.InfoContext(ctx, "console signed in", "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, cmp.Or(v.Next, "/console"))
}

// logout ends the session; a console page posted as next (the page of
// another workspace's billing link) is where the sign-in goes after.
func (s *Site) logout(c echo.Context, m *member) error {
	if err := s.cfg.Members.DeleteSession(c.Request().Context(), m.token); err != nil {
		return s.fail(c, err)
	}
	s.setCookie(c, sessionCookie, "", -1)
	q := url.Values{"signed_out": {"1"}}
	if next := consoleNext(c.Request().PostFormValue("next")); next != "" {
		q.Set("next", next)
	}
	return c.Redirect(http.StatusSeeOther, "/console/login?"+q.Encode())
}

// home is the quick start and the tenant's keys.
func (s *Site) home(c echo.Context, m *member) error {
	return s.renderHome(c, m, nil, "")
}

// renderHome renders the home page for m, with keys shown once.
func (s *Site) renderHome(c echo.Context, m *member, fresh []web.ConsoleNewKey, flash string) error {
	return s.renderHomeAt(c, http.StatusOK, m, fresh, flash)
}

// renderHomeAt renders the home page for m with status.
func (s *Site) renderHomeAt(c echo.Context, status int, m *member, fresh []web.ConsoleNewKey, flash string) error {
	ctx := c.Request().Context()
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	keys, err := s.cfg.Tenants.Keys(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	v := web.ConsoleHomeView{
		Chrome:        web.ConsoleChrome{Title: "Quick start", Section: "home", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf, Flash: flash},
		Plan:          t.Plan,
		Unconfirmed:   m.ConfirmedAt == nil,
		NewKeys:       fresh,
		BaseURL:       cmp.Or(s.cfg.PublicURL, "http://localhost:8080"),
		SandboxChecks: web.Count(tenant.SandboxAllotment),
		Key:           "tg_live_…",
		KeyKind:       "live",
	}
	if len(fresh) > 0 {
		v.Key = fresh[0].Value
	} else if m.ConfirmedAt == nil {
		v.Key, v.KeyKind = "tg_test_…", "test"
	}
	for _, k := range keys {
		v.Keys = append(v.Keys, keyRow(k))
	}
	return render(c, status, web.ConsoleHome(v))
}

// keyRow is how a key is listed.
func keyRow(k tenant.Key) web.ConsoleKey {
	row := web.ConsoleKey{Name: cmp.Or(k.Name, "—"), Prefix: k.Prefix + "…", Kind: "live", Created: k.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"), LastUsed: "never", Status: "active"}
	if k.Test {
		row.Kind = "test"
	}
	if k.LastUsedAt != nil {
		row.LastUsed = k.LastUsedAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if k.RevokedAt != nil {
		row.Status = "revoked"
	}
	return row
}

// mailbox is the development mailbox: only with TOLLGATE_DEV and no SMTP.
func (s *Site) mailbox(c echo.Context) error {
	if !s.cfg.Dev || s.cfg.Mailbox == nil {
		return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found", Message: "There is no console page at this address.", Link: "/console", LinkLabel: "The console"})
	}
	var v web.ConsoleMailboxView
	for _, m := range s.cfg.Mailbox.Messages() {
		v.Messages = append(v.Messages, web.ConsoleMail{ID: m.ID, At: m.At.UTC().Format("15:04:05 UTC"), To: m.To, Subject: m.Subject, Text: m.Text})
	}
	return render(c, http.StatusOK, web.ConsoleMailbox(v))
}

// message answers with a page of one message.
func (s *Site) message(c echo.Context, status int, v web.ConsoleMessageView) error {
	return render(c, status, web.ConsoleMessage(v))
}

// fail answers an error the visitor did not cause: 500, its cause logged.
func (s *Site) fail(c echo.Context, err error) error {
	if errors.Is(err, errWorkspaceDisabled) {
		return s.message(c, http.StatusForbidden, workspaceDisabled)
	}
	s.log.ErrorContext(c.Request().Context(), "console page failed", "path", c.Path(), "err", err)
	return s.message(c, http.StatusInternalServerError, web.ConsoleMessageView{Title: "Something went wrong",
		Message: "Tollgate could not answer this page. Try again in a moment.", Link: "/console", LinkLabel: "The console"})
}

func render(c echo.Context, status int, component templ.Component) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	return component.Render(c.Request().Context(), c.Response())
}
