package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/signin"
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
			return seeOther(c, "/admin/login"+signin.Query("next", adminNext(next)))
		}
		if c.Request().Method != http.MethodGet && c.Request().Method != http.MethodHead {
			if !signin.SameToken(signin.PostedToken(c), s.csrf) {
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
	return &signedIn{admin: a, token: ck.Value, csrf: signin.CSRFFor(realm, ck.Value)}, nil
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
	next := adminNext(c.QueryParam("next"))
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
	v := web.LoginView{Email: email, Next: adminNext(c.FormValue("next"))}

	ck, err := c.Cookie(loginCookie)
	if err != nil || !signin.SameToken(signin.PostedToken(c), ck.Value) {
		v.Error = "The sign-in form expired. Please sign in again."
		return d.renderLogin(c, http.StatusForbidden, v)
	}
	// Emails that are no address still count against their own key, so
	// that junk costs the sender as much as guesses do.
	norm, err := admin.NormalizeEmail(email)
	if err != nil {
		norm = strings.ToLower(email)
	}
	ref, err := d.limiter.Admit(ctx, c.RealIP(), norm)
	if err != nil {
		return d.fail(c, nil, err)
	}
	if ref != nil {
		secs := int64((ref.RetryAfter + time.Second - 1) / time.Second)
		c.Response().Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		v.Error = ref.Message
		v.RetryAfter = "Try again in " + signin.HumanDuration(ref.RetryAfter) + " (after " + d.now().Add(ref.RetryAfter).UTC().Format("15:04:05") + " UTC)."
		d.log.WarnContext(ctx, "admin sign-in refused by the limiter", "by", ref.By)
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
		if err := d.limiter.Failed(ctx, c.RealIP(), norm); err != nil {
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
	client := d.limiter.ClientDigest(ip)
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

// adminNext is next when it is a dashboard page to go on to after signing
// in (signin.SafeNext under /admin), else "".
func adminNext(next string) string { return signin.SafeNext("/admin", next) }
