package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/kit/digest"
	"github.com/tollgate/tollgate/web"
)

// Cookies. The session cookie holds the session token; the sign-in cookie
// holds the sign-in form's CSRF token until there is a session (the
// double-submit pattern: a cross-site page can make the browser send the
// cookie but cannot read it to put it in the form).
const (
	sessionCookie = "tg_admin"
	loginCookie   = "tg_admin_login"
)

// signedIn is the admin of the request's session.
type signedIn struct {
	admin admin.Admin
	token string
	// csrf is the session's form token.
	csrf string
}

// csrfFor derives the session's CSRF token from its token: only the holder
// of the (HttpOnly) session cookie can compute it, and nothing more needs
// storing.
func csrfFor(token string) string {
	return base64.RawURLEncoding.EncodeToString(digest.Key([]byte(token), "tollgate admin csrf"))
}

// postedToken is the form token of a post: from its body only, never from
// the URL's query, which proxies log, browsers keep in their history and
// send on in Referer.
func postedToken(c echo.Context) string {
	return c.Request().PostFormValue("csrf")
}

// sameToken compares two tokens in constant time; empty never matches.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// page wraps a handler of signed-in pages: no session sends the browser to
// sign in (and back here afterwards), a post must carry the session's CSRF
// token, and the handler's error is answered as a page.
func (d *Dashboard) page(h func(c echo.Context, s *signedIn) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		s, err := d.session(c)
		if err != nil {
			return d.fail(c, nil, err)
		}
		if s == nil {
			next := ""
			if c.Request().Method == http.MethodGet {
				next = c.Request().URL.RequestURI()
			}
			return seeOther(c, "/admin/login"+query("next", safeNext(next)))
		}
		if c.Request().Method != http.MethodGet && c.Request().Method != http.MethodHead {
			if !sameToken(postedToken(c), s.csrf) {
				d.log.WarnContext(ctx, "dashboard post without a valid csrf token", "path", c.Path())
				return d.fail(c, s, &pageError{http.StatusForbidden, "Form expired",
					"This form was not sent from a current dashboard page. Go back, reload the page and try again."})
			}
		}
		if err := h(c, s); err != nil {
			return d.fail(c, s, err)
		}
		return nil
	}
}

// session returns the request's signed-in admin, or nil without a valid,
// unexpired session that was used within the idle timeout.
func (d *Dashboard) session(c echo.Context) (*signedIn, error) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return nil, nil
	}
	ctx := c.Request().Context()
	hash := admin.HashToken(ck.Value)
	now := d.now()
	sess, a, err := d.cfg.Accounts.SessionAdmin(ctx, hash, now)
	if errors.Is(err, admin.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	idle := now.Sub(sess.LastSeenAt)
	if idle >= d.cfg.IdleTimeout {
		// Left unused too long: the row goes now rather than at its
		// absolute expiry, so the token opens nothing even if the clock
		// were turned back.
		if err := d.cfg.Accounts.DeleteSession(ctx, hash); err != nil {
			return nil, err
		}
		d.log.InfoContext(ctx, "admin session ended after idling", "admin_id", a.ID)
		return nil, nil
	}
	// Sliding: each request extends the session, but the row is written at
	// most once per touchEvery, not on every page and asset.
	if idle >= d.touchEvery {
		if err := d.cfg.Accounts.TouchSession(ctx, hash, now); err != nil {
			return nil, err
		}
	}
	return &signedIn{admin: a, token: ck.Value, csrf: csrfFor(ck.Value)}, nil
}

// secure says whether cookies get the Secure attribute.
func (d *Dashboard) secure(c echo.Context) bool {
	return d.cfg.SecureCookies || c.Request().TLS != nil
}

func (d *Dashboard) setCookie(c echo.Context, name, value, path string, maxAge int) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: d.secure(c),
	})
}

// loginPage shows the sign-in form, or sends a signed-in admin on.
func (d *Dashboard) loginPage(c echo.Context) error {
	next := safeNext(c.QueryParam("next"))
	if s, err := d.session(c); err == nil && s != nil {
		return seeOther(c, cmp.Or(next, "/admin"))
	}
	v := web.LoginView{Next: next}
	if c.QueryParam("signed_out") != "" {
		v.Notice = "You are signed out."
	}
	return d.renderLogin(c, http.StatusOK, v)
}

// renderLogin renders the sign-in form with a fresh form token.
func (d *Dashboard) renderLogin(c echo.Context, status int, v web.LoginView) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return d.fail(c, nil, err)
	}
	v.CSRF = base64.RawURLEncoding.EncodeToString(b)
	d.setCookie(c, loginCookie, v.CSRF, "/admin/login", 3600)
	return render(c, status, web.Login(v))
}

// login checks a sign-in: the form token, the sign-in limiter (10 a
// minute per IP; 8 failures per account and client IP, and 100 per
// account from everywhere, per 15 minutes, checked before trying and
// counted on failure), then the password, within the Hasher's bound.
func (d *Dashboard) login(c echo.Context) error {
	ctx := c.Request().Context()
	// From the body only: a password in a URL would be kept in logs and
	// histories.
	email := strings.TrimSpace(c.Request().PostFormValue("email"))
	password := c.Request().PostFormValue("password")
	v := web.LoginView{Email: email, Next: safeNext(c.FormValue("next"))}

	ck, err := c.Cookie(loginCookie)
	if err != nil || !sameToken(postedToken(c), ck.Value) {
		v.Error = "The sign-in form expired. Please sign in again."
		return d.renderLogin(c, http.StatusForbidden, v)
	}
	// Emails that are no address still count against their own key, so
	// that junk costs the sender as much as guesses do.
	norm, err := admin.NormalizeEmail(email)
	if err != nil {
		norm = strings.ToLower(email)
	}
	ref, err := d.limiter.admit(ctx, c.RealIP(), norm)
	if err != nil {
		return d.fail(c, nil, err)
	}
	if ref != nil {
		secs := int64((ref.retryAfter + time.Second - 1) / time.Second)
		c.Response().Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		v.Error = ref.message
		v.RetryAfter = "Try again in " + humanDuration(ref.retryAfter) + " (after " + d.now().Add(ref.retryAfter).UTC().Format("15:04:05") + " UTC)."
		d.log.WarnContext(ctx, "admin sign-in refused by the limiter", "by", ref.by)
		return d.renderLogin(c, http.StatusTooManyRequests, v)
	}

	a, err := d.cfg.Accounts.AdminByEmail(ctx, norm)
	ok := false
	switch {
	case errors.Is(err, admin.ErrNotFound):
		err = d.cfg.Hasher.Decoy(ctx, password)
	case err != nil:
		return d.fail(c, nil, err)
	default:
		ok, err = d.cfg.Hasher.Check(ctx, a.PasswordHash, password)
	}
	switch {
	case errors.Is(err, admin.ErrBusy):
		// Not a failure: the password was not tried.
		c.Response().Header().Set("Retry-After", "1")
		v.Error = "Tollgate is busy checking other sign-ins. Please try again in a moment."
		d.log.WarnContext(ctx, "admin sign-in refused: password checks busy")
		return d.renderLogin(c, http.StatusServiceUnavailable, v)
	case err != nil:
		d.log.ErrorContext(ctx, "stored admin password hash unreadable", "admin_id", a.ID, "err", err)
		ok = false
	}
	if !ok {
		if err := d.limiter.failed(ctx, c.RealIP(), norm); err != nil {
			return d.fail(c, nil, err)
		}
		d.signInFailed(ctx, c.RealIP(), a)
		v.Error = "Wrong email or password."
		return d.renderLogin(c, http.StatusUnauthorized, v)
	}

	token, hash, err := admin.NewToken()
	if err != nil {
		return d.fail(c, nil, err)
	}
	now := d.now()
	if err := d.cfg.Accounts.CreateSession(ctx, admin.Session{TokenHash: hash, AdminID: a.ID, CreatedAt: now, ExpiresAt: now.Add(d.cfg.SessionTTL), LastSeenAt: now}); err != nil {
		return d.fail(c, nil, err)
	}
	d.setCookie(c, loginCookie, "", "/admin/login", -1)
	d.setCookie(c, sessionCookie, token, "/admin", int(d.cfg.SessionTTL/time.Second))
	d.log.InfoContext(ctx, "admin signed in", "admin_id", a.ID)
	d.record(ctx, &signedIn{admin: a}, "", KindSignedIn, nil)
	return seeOther(c, cmp.Or(v.Next, "/admin"))
}

// signInFailed logs a failed sign-in (never the password, and the client IP
// only as its digest) and, when the email is an admin's, audits it. Failures
// of unknown emails are logged only: the limiter bounds an account's
// failures (FailuresPerAccountEverywhere per 15 minutes), not the number of
// made-up emails, so auditing those would let anyone fill the audit log; and
// what was typed as an email may be a password typed in the wrong field.
func (d *Dashboard) signInFailed(ctx context.Context, ip string, a admin.Admin) {
	client := d.limiter.clientDigest(ip)
	if a.ID == "" {
		d.log.WarnContext(ctx, "admin sign-in failed: no such account", "client_ip_digest", client)
		return
	}
	d.log.WarnContext(ctx, "admin sign-in failed: wrong password", "admin_id", a.ID, "client_ip_digest", client)
	err := d.cfg.Audit.Record(ctx, audit.Entry{Actor: signInActor, Kind: KindSignInFailed,
		Detail: map[string]any{"account": a.Email, "reason": "wrong password", "client_ip_digest": client}})
	if err != nil {
		d.log.ErrorContext(ctx, "audit entry not written", "kind", KindSignInFailed, "err", err)
	}
}

// signInActor is the actor of a failed sign-in's audit entry: whoever typed
// at the sign-in form, who is not known to be the account's admin.
const signInActor = "sign-in form"

// logout ends the session.
func (d *Dashboard) logout(c echo.Context, s *signedIn) error {
	if err := d.cfg.Accounts.DeleteSession(c.Request().Context(), admin.HashToken(s.token)); err != nil {
		return err
	}
	d.setCookie(c, sessionCookie, "", "/admin", -1)
	return seeOther(c, "/admin/login?signed_out=1")
}

// safeNext returns next when it is a dashboard path of this site, else "":
// the sign-in must not become an open redirect.
func safeNext(next string) string {
	if next == "" || len(next) > 2000 {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		!(u.Path == "/admin" || strings.HasPrefix(u.Path, "/admin/")) ||
		strings.HasPrefix(next, "//") || strings.Contains(next, `\`) ||
		strings.HasPrefix(u.Path, "/admin/login") || strings.HasPrefix(u.Path, "/admin/logout") {
		return ""
	}
	return next
}

// query returns "?name=value", or "" when value is empty.
func query(name, value string) string {
	if value == "" {
		return ""
	}
	return "?" + url.Values{name: {value}}.Encode()
}

// humanDuration says d in words, rounded up to the second: "42 seconds",
// "14 minutes 3 seconds".
func humanDuration(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	secs = max(secs, 1)
	plural := func(n int64, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return strconv.FormatInt(n, 10) + " " + unit + "s"
	}
	m, s := secs/60, secs%60
	switch {
	case m == 0:
		return plural(s, "second")
	case s == 0:
		return plural(m, "minute")
	}
	return plural(m, "minute") + " " + plural(s, "second")
}
