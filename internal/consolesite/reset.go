package consolesite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/mail"
	"github.com/tollgate/tollgate/internal/signin"
	"github.com/tollgate/tollgate/web"
)

// MailsPerHour bounds the reset mails that go to one address, and the
// confirmation mails a member has sent again, an hour: whoever asks, an
// address cannot be flooded.
const MailsPerHour = 3

// mailTimeout bounds the sending of a reset mail, which outlives its
// request.
const mailTimeout = time.Minute

// registerReset mounts the password reset's pages and the confirmation
// mail's resend on the console's group.
func (s *Site) registerReset(g *echo.Group) {
	g.GET("/reset", s.resetPage)
	g.POST("/reset", s.reset)
	g.GET("/reset/confirm", s.newPasswordPage)
	g.POST("/reset/confirm", s.setNewPassword)
	g.POST("/confirm/resend", s.page(s.resend))
}

// resetPage asks for the address to mail a reset link to.
func (s *Site) resetPage(c echo.Context) error {
	return s.resetForm(c, http.StatusOK, web.ConsoleResetView{})
}

// resetForm renders the reset form with a fresh signed-out form token.
func (s *Site) resetForm(c echo.Context, status int, v web.ConsoleResetView) error {
	return s.signedOutForm(c, status, func(csrf string) templ.Component { v.CSRF = csrf; return web.ConsoleReset(v) })
}

// reset mails a reset link to the member with the posted address, if there
// is one who may sign in. Its answer is the same whether or not there is,
// and so is its work before answering (the limiter, one lookup): the
// token and the mail are made after the answer. Counted per network as a
// sign-in attempt, and per address (with or without an account, so that
// the cap tells nothing) against MailsPerHour.
func (s *Site) reset(c echo.Context) error {
	ctx := c.Request().Context()
	email := strings.TrimSpace(c.Request().PostFormValue("email"))
	v := web.ConsoleResetView{Email: email}
	if !postedForm(c) {
		v.Error = "The form expired. Please try again."
		return s.resetForm(c, http.StatusForbidden, v)
	}
	if s.mailClosed() {
		return s.noMail(c, "Password reset is not open", "a reset needs its link mailed")
	}
	norm, normErr := admin.NormalizeEmail(email)
	if normErr != nil {
		v.Error = "Enter a valid email address."
		return s.resetForm(c, http.StatusBadRequest, v)
	}
	if ref, err := s.limiter.Attempt(ctx, c.RealIP()); err != nil || ref != nil {
		return s.resetRefused(c, v, ref, err)
	}
	if ref, err := s.limiter.Mail(ctx, "reset", norm, MailsPerHour); err != nil || ref != nil {
		return s.resetRefused(c, v, ref, err)
	}
	m, err := s.cfg.Members.MemberByEmail(ctx, norm)
	switch {
	case errors.Is(err, console.ErrNotFound):
	case err != nil:
		return s.fail(c, err)
	case m.DisabledAt == nil && m.PasswordHash != "":
		// As for signing in, a disabled member or an invited one who has
		// set no password yet (the invitation's link does that) gets
		// nothing. The request's context ends with its answer; the mail
		// does not.
		go s.mailReset(context.WithoutCancel(ctx), m)
	}
	s.setCookie(c, formCookie, "", -1)
	return render(c, http.StatusOK, web.ConsoleReset(web.ConsoleResetView{Sent: true}))
}

// resetRefused answers a reset the limiter refused (429), or its error.
func (s *Site) resetRefused(c echo.Context, v web.ConsoleResetView, ref *signin.Refusal, err error) error {
	if err != nil {
		return s.fail(c, err)
	}
	v.Error, v.RetryAfter = s.retry(c, ref)
	return s.resetForm(c, http.StatusTooManyRequests, v)
}

// retry sets Retry-After for a refusal by the limiter and says it in
// words: its message, and when to try again.
func (s *Site) retry(c echo.Context, ref *signin.Refusal) (msg, when string) {
	secs := int64((ref.RetryAfter + time.Second - 1) / time.Second)
	c.Response().Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	return ref.Message, "Try again in " + signin.HumanDuration(ref.RetryAfter) + " (after " + s.cfg.Now().Add(ref.RetryAfter).UTC().Format("15:04:05") + " UTC)."
}

// mailReset issues a reset token for m and mails its link; a failure is
// logged, as no one waits for it.
func (s *Site) mailReset(ctx context.Context, m console.Member) {
	ctx, cancel := context.WithTimeout(ctx, mailTimeout)
	defer cancel()
	token, err := s.cfg.Members.IssueToken(ctx, m.TenantID, m.ID, console.PurposeReset)
	if err == nil {
		link := s.cfg.PublicURL + "/console/reset/confirm" + signin.Query("token", token)
		err = s.cfg.Mail.Send(ctx, mail.Message{To: m.Email, Subject: "Reset your Tollgate password",
			Text: "Someone (we hope you) asked to reset the password of your Tollgate account.\n\n" +
				"Choose a new one here:\n\n" + link + "\n\n" +
				"The link works once, for an hour; using it signs you out everywhere. If it was not you, ignore this mail: your password stays as it is.\n"})
	}
	if err != nil {
		s.log.ErrorContext(ctx, "console reset mail not sent", "member_id", m.ID, "err", err)
		return
	}
	s.log.InfoContext(ctx, "console reset mail sent", "member_id", m.ID)
}

// newPasswordPage is the mailed link's page: a GET spends nothing, since
// mail scanners follow links.
func (s *Site) newPasswordPage(c echo.Context) error {
	token := c.QueryParam("token")
	if token == "" || len(token) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No reset link", Message: "This link carries no password reset: open the link of the mail as it was sent.", Link: "/console/reset", LinkLabel: "Ask for a new link"})
	}
	return s.newPasswordForm(c, http.StatusOK, web.ConsoleNewPasswordView{Token: token})
}

// newPasswordForm renders the new password's form with a fresh signed-out
// form token.
func (s *Site) newPasswordForm(c echo.Context, status int, v web.ConsoleNewPasswordView) error {
	return s.signedOutForm(c, status, func(csrf string) templ.Component { v.CSRF = csrf; return web.ConsoleNewPassword(v) })
}

// setNewPassword spends a reset token with the posted password: the
// member's password is replaced and every session of theirs ended, and the
// browser sent to sign in. The network's attempt is counted before the
// password is hashed.
func (s *Site) setNewPassword(c echo.Context) error {
	ctx := c.Request().Context()
	token := c.Request().PostFormValue("token")
	password := c.Request().PostFormValue("password")
	if token == "" || len(token) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No reset link", Message: "This form carries no password reset.", Link: "/console/reset", LinkLabel: "Ask for a new link"})
	}
	v := web.ConsoleNewPasswordView{Token: token}
	if !postedForm(c) {
		v.Error = "The form expired. Please try again."
		return s.newPasswordForm(c, http.StatusForbidden, v)
	}
	if admin.ValidatePassword(password) != nil {
		v.Error = fmt.Sprintf("Choose a password of %d to %d characters.", admin.MinPasswordLen, admin.MaxPasswordLen)
		return s.newPasswordForm(c, http.StatusBadRequest, v)
	}
	if ref, err := s.limiter.Attempt(ctx, c.RealIP()); err != nil {
		return s.fail(c, err)
	} else if ref != nil {
		msg, when := s.retry(c, ref)
		v.Error = msg + " " + when
		return s.newPasswordForm(c, http.StatusTooManyRequests, v)
	}
	hash, err := s.cfg.Hasher.Hash(ctx, password, admin.DefaultArgon2)
	if errors.Is(err, admin.ErrBusy) {
		c.Response().Header().Set("Retry-After", "1")
		v.Error = "Tollgate is busy. Please try again in a moment."
		return s.newPasswordForm(c, http.StatusServiceUnavailable, v)
	}
	if err != nil {
		return s.fail(c, err)
	}
	m, err := s.cfg.Members.ResetPassword(ctx, token, hash)
	if errors.Is(err, console.ErrTokenInvalid) {
		return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "This link no longer works",
			Message: "It was used already, or it expired (a reset link works once, for an hour). Your password is unchanged by it; ask for a new link if you still need one.", Link: "/console/reset", LinkLabel: "Ask for a new link"})
	}
	if err != nil {
		return s.fail(c, err)
	}
	s.log.InfoContext(ctx, "console password reset", "member_id", m.ID)
	s.setCookie(c, formCookie, "", -1)
	s.setCookie(c, sessionCookie, "", -1)
	return c.Redirect(http.StatusSeeOther, "/console/login?reset=1")
}

// resend mails an unconfirmed member a new confirmation link, at most
// MailsPerHour an hour; the earlier links keep working until one is used.
func (s *Site) resend(c echo.Context, m *member) error {
	ctx := c.Request().Context()
	if m.ConfirmedAt != nil {
		return s.renderHome(c, m, nil, "Your email is confirmed already.")
	}
	if s.mailClosed() {
		return s.noMail(c, "No mail sent", "a confirmation needs its link mailed")
	}
	ref, err := s.limiter.Mail(ctx, "confirm", m.ID, MailsPerHour)
	if err != nil {
		return s.fail(c, err)
	}
	if ref != nil {
		msg, when := s.retry(c, ref)
		return s.renderHomeAt(c, http.StatusTooManyRequests, m, nil, msg+" "+when)
	}
	token, err := s.cfg.Members.IssueToken(ctx, m.TenantID, m.ID, console.PurposeConfirm)
	if err != nil {
		return s.fail(c, err)
	}
	if err := s.mailConfirmation(ctx, m.Email, token); err != nil {
		s.log.ErrorContext(ctx, "console confirmation mail not sent", "member_id", m.ID, "err", err)
		return s.renderHomeAt(c, http.StatusBadGateway, m, nil, "The mail could not be sent. Please try again in a moment.")
	}
	s.log.InfoContext(ctx, "console confirmation mail sent again", "member_id", m.ID)
	return s.renderHome(c, m, nil, "A new confirmation mail is on its way to "+m.Email+".")
}
