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

// InvitationsPerTenant bounds the invitations one tenant may send an hour:
// each that passes the form's checks counts, a taken email's too, so that
// the console mails no one in bulk and probing which emails have accounts
// costs as inviting them does.
const InvitationsPerTenant = 20

// inviteTTL is how long an invitation works, in words.
var inviteTTL = strconv.Itoa(int(console.InviteTTL/(24*time.Hour))) + " days"

// registerTeam mounts the team pages on the console's group: the members,
// invitations and removals (signed in), and the invitation's link (signed
// out).
func (s *Site) registerTeam(g *echo.Group) {
	g.GET("/team", s.page(s.team))
	g.POST("/team/invite", s.page(s.invite))
	g.GET("/team/:id/remove", s.page(s.removePage))
	g.POST("/team/:id/remove", s.page(s.remove))
	g.GET("/invite", s.acceptPage)
	g.POST("/invite", s.accept)
}

// team lists the tenant's members, with the invitation form for an owner.
func (s *Site) team(c echo.Context, m *member) error {
	v := web.ConsoleTeamView{}
	switch {
	case c.QueryParam("sent") != "":
		v.Chrome.Flash = "Invitation mailed."
	case c.QueryParam("removed") != "":
		v.Chrome.Flash = "Member removed."
	}
	return s.renderTeam(c, m, http.StatusOK, v)
}

// renderTeam fills v's chrome and members for m and renders the team page.
func (s *Site) renderTeam(c echo.Context, m *member, status int, v web.ConsoleTeamView) error {
	ctx := c.Request().Context()
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	ms, err := s.cfg.Members.Members(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	v.Chrome = web.ConsoleChrome{Title: "Team", Section: "team", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf, Flash: v.Chrome.Flash}
	v.Owner = m.Role == console.RoleOwner
	v.Unconfirmed = m.ConfirmedAt == nil
	v.InviteTTL = inviteTTL
	for _, x := range ms {
		row := web.ConsoleTeamMember{Email: x.Email, Role: string(x.Role), Status: memberStatus(x), Since: x.CreatedAt.UTC().Format("2006-01-02"), You: x.ID == m.ID}
		if v.Owner || row.You {
			row.RemoveHref = "/console/team/" + x.ID + "/remove"
		}
		v.Members = append(v.Members, row)
	}
	return render(c, status, web.ConsoleTeam(v))
}

// memberStatus is how far a member has come: invited (no password yet),
// confirmed or not, or disabled.
func memberStatus(m console.Member) string {
	switch {
	case m.DisabledAt != nil:
		return "disabled"
	case m.PasswordHash == "":
		return "invited"
	case m.ConfirmedAt != nil:
		return "confirmed"
	}
	return "unconfirmed"
}

// forbidden is the answer to a developer who posts an owner's form.
func (s *Site) forbidden(c echo.Context) error {
	return s.message(c, http.StatusForbidden, web.ConsoleMessageView{Title: "Owners only",
		Message: "Only an owner of this workspace invites and removes members.", Link: "/console/team", LinkLabel: "The team"})
}

// invite adds an email to the tenant as a role and mails its member the
// link that sets a password. Owners only; counted against
// InvitationsPerTenant an hour.
func (s *Site) invite(c echo.Context, m *member) error {
	if m.Role != console.RoleOwner {
		return s.forbidden(c)
	}
	if m.ConfirmedAt == nil {
		// The mail carries the workspace's name and the inviter's
		// address: an account nobody has confirmed sends none, lest
		// sign-ups become a way to mail strangers.
		return s.message(c, http.StatusForbidden, web.ConsoleMessageView{Title: "Confirm your email first",
			Message: "Invitations go out from confirmed addresses only: open the link we mailed you, then invite your team.", Link: "/console/team", LinkLabel: "The team"})
	}
	if s.mailClosed() {
		return s.noMail(c, "Invitations are not open", "an invitation needs its link mailed")
	}
	ctx := c.Request().Context()
	f := web.ConsoleInviteForm{Email: strings.TrimSpace(c.Request().PostFormValue("email")), Role: c.Request().PostFormValue("role")}
	refuse := func(status int, msg string) error {
		f.Error = msg
		return s.renderTeam(c, m, status, web.ConsoleTeamView{Invite: f})
	}
	norm, err := admin.NormalizeEmail(f.Email)
	if err != nil {
		return refuse(http.StatusBadRequest, "Enter a valid email address.")
	}
	role := console.Role(f.Role)
	if role != console.RoleOwner && role != console.RoleDeveloper {
		return refuse(http.StatusBadRequest, "Choose a role: owner or developer.")
	}
	ref, err := s.limiter.Invitation(ctx, m.TenantID, InvitationsPerTenant)
	if err != nil {
		return s.fail(c, err)
	}
	if ref != nil {
		msg, when := s.retry(c, ref)
		f.RetryAfter = when
		return refuse(http.StatusTooManyRequests, msg)
	}
	token, err := s.cfg.Members.Invite(ctx, m.TenantID, norm, role)
	if errors.Is(err, console.ErrEmailTaken) {
		return refuse(http.StatusConflict, "This address has a Tollgate account already (one account per email, in this workspace or another). Invite another address.")
	}
	if err != nil {
		return s.fail(c, err)
	}
	if err := s.mailInvitation(ctx, m, norm, token); err != nil {
		// Taken back, so that no member waits for a link never sent.
		s.log.ErrorContext(ctx, "console invitation mail not sent", "tenant_id", m.TenantID, "err", err)
		s.takeBack(ctx, m.TenantID, norm)
		return s.message(c, http.StatusServiceUnavailable, web.ConsoleMessageView{Title: "The invitation did not go",
			Message: "Tollgate could not send the invitation's mail, so it made none. Try again in a moment.", Link: "/console/team", LinkLabel: "The team"})
	}
	s.log.InfoContext(ctx, "console member invited", "tenant_id", m.TenantID, "member_id", m.ID, "role", string(role))
	return c.Redirect(http.StatusSeeOther, "/console/team?sent=1")
}

// mailInvitation mails to the link of an invitation from m.
func (s *Site) mailInvitation(ctx context.Context, m *member, to, token string) error {
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return err
	}
	link := s.cfg.PublicURL + "/console/invite" + signin.Query("token", token)
	return s.cfg.Mail.Send(ctx, mail.Message{To: to, Subject: "You are invited to " + t.Name + " on Tollgate",
		Text: m.Email + " invites you to the workspace " + t.Name + " on Tollgate, where it keeps its API keys and rate limits.\n\n" +
			"Choose your password and join here:\n\n" + link + "\n\n" +
			"The link works once, for " + inviteTTL + ". If you did not expect it, ignore this mail: nothing happens without it.\n"})
}

// takeBack removes the member just invited as email to the tenant, and
// with it the invitation's token; failing, it logs why.
func (s *Site) takeBack(ctx context.Context, tenantID, email string) {
	invited, err := s.cfg.Members.MemberByEmail(ctx, email)
	if err == nil && invited.TenantID == tenantID {
		err = s.cfg.Members.RemoveMember(ctx, tenantID, invited.ID)
	}
	if err != nil {
		s.log.ErrorContext(ctx, "console invitation not taken back", "tenant_id", tenantID, "err", err)
	}
}

// teamMember is the member of m's tenant the path's id names, or the
// answer already given (a 403 for a developer's other member, a 404 for
// an id that is not of the tenant).
func (s *Site) teamMember(c echo.Context, m *member) (console.Member, bool, error) {
	id := c.Param("id")
	if m.Role != console.RoleOwner && id != m.ID {
		return console.Member{}, false, s.forbidden(c)
	}
	x, err := s.cfg.Members.MemberByID(c.Request().Context(), m.TenantID, id)
	if errors.Is(err, console.ErrNotFound) {
		return console.Member{}, false, s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found",
			Message: "This workspace has no such member.", Link: "/console/team", LinkLabel: "The team"})
	}
	if err != nil {
		return console.Member{}, false, s.fail(c, err)
	}
	return x, true, nil
}

// removePage asks before a member's removal.
func (s *Site) removePage(c echo.Context, m *member) error {
	x, ok, err := s.teamMember(c, m)
	if !ok {
		return err
	}
	t, err := s.cfg.Tenants.Tenant(c.Request().Context(), m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	v := web.ConsoleRemoveView{
		Chrome: web.ConsoleChrome{Title: "Remove " + x.Email + "?", Section: "team", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf},
		Email:  x.Email, Role: string(x.Role), Since: x.CreatedAt.UTC().Format("2006-01-02"),
		Consequence: x.Email + " loses this workspace at once: their sessions end, an invitation not yet accepted stops working, and their account is deleted. Keys, policies and usage stay.",
		Action:      "/console/team/" + x.ID + "/remove", Button: "Remove " + x.Email,
	}
	if x.ID == m.ID {
		v.Chrome.Title = "Leave " + t.Name + "?"
		v.Consequence = "You leave this workspace at once and are signed out; your account is deleted. An owner can invite you again."
		v.Button = "Leave " + t.Name
	}
	return render(c, http.StatusOK, web.ConsoleRemove(v))
}

// remove removes a member of the tenant (an owner any, a developer only
// themself), never the last owner who can sign in. A member who removed
// themself is signed out.
func (s *Site) remove(c echo.Context, m *member) error {
	x, ok, err := s.teamMember(c, m)
	if !ok {
		return err
	}
	ctx := c.Request().Context()
	err = s.cfg.Members.RemoveMember(ctx, m.TenantID, x.ID)
	switch {
	case errors.Is(err, console.ErrLastOwner):
		return s.message(c, http.StatusConflict, web.ConsoleMessageView{Title: "A workspace keeps an owner",
			Message: fmt.Sprintf("%s is the last owner who can sign in, and a workspace keeps one. Invite another owner first; once they have joined, %s can go.", x.Email, x.Email),
			Link:    "/console/team", LinkLabel: "The team"})
	case errors.Is(err, console.ErrNotFound):
		return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "Not found", Message: "This workspace has no such member.", Link: "/console/team", LinkLabel: "The team"})
	case err != nil:
		return s.fail(c, err)
	}
	s.log.InfoContext(ctx, "console member removed", "tenant_id", m.TenantID, "member_id", x.ID, "by_member_id", m.ID)
	if x.ID == m.ID {
		s.setCookie(c, sessionCookie, "", -1)
		return s.message(c, http.StatusOK, web.ConsoleMessageView{Title: "You left the workspace",
			Message: "Your account is deleted and you are signed out.", Link: "/console/signup", LinkLabel: "Sign up"})
	}
	return c.Redirect(http.StatusSeeOther, "/console/team?removed=1")
}

// acceptPage is the invitation link's page: which address joins which
// workspace, and the password form. It reads the token without spending
// it, as mail scanners follow links; a used, taken back or expired one
// gets the page that says so.
func (s *Site) acceptPage(c echo.Context) error {
	token := c.QueryParam("token")
	if token == "" || len(token) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No invitation", Message: "This link carries no invitation: open the link of the mail as it was sent.", Link: "/console", LinkLabel: "The console"})
	}
	return s.acceptForm(c, http.StatusOK, web.ConsoleAcceptView{Token: token})
}

// acceptForm renders the invitation's form for v.Token with the invited
// address and workspace and a fresh form token; the invitation's "no
// longer works" page when the token is no unspent invitation. A refusal
// of the network's attempts (429) reads no token: past the limit, a
// guesser learns nothing more.
func (s *Site) acceptForm(c echo.Context, status int, v web.ConsoleAcceptView) error {
	if status == http.StatusTooManyRequests {
		return s.renderAccept(c, status, v)
	}
	ctx := c.Request().Context()
	m, err := s.cfg.Members.TokenMember(ctx, console.PurposeInvite, v.Token)
	if errors.Is(err, console.ErrTokenInvalid) {
		return s.inviteGone(c)
	}
	if err != nil {
		return s.fail(c, err)
	}
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	v.Email, v.Workspace = m.Email, t.Name
	return s.renderAccept(c, status, v)
}

// renderAccept renders the invitation's form with a fresh form token.
func (s *Site) renderAccept(c echo.Context, status int, v web.ConsoleAcceptView) error {
	return s.signedOutForm(c, status, func(csrf string) templ.Component { v.CSRF = csrf; return web.ConsoleAccept(v) })
}

// inviteGone is the page of an invitation used already, taken back or
// expired: the four are one answer.
func (s *Site) inviteGone(c echo.Context) error {
	return s.message(c, http.StatusNotFound, web.ConsoleMessageView{Title: "This invitation no longer works",
		Message: "It was used already, taken back, or it expired (after " + inviteTTL + "). If you joined, sign in; else ask an owner of the workspace to invite you again.", Link: "/console/login", LinkLabel: "Sign in"})
}

// accept spends an invitation: its member's password is set (the address
// confirmed, as the mail reached it), the member signed in and sent to the
// console. Each attempt counts as a sign-in attempt of the network, as
// each may cost a password hash.
func (s *Site) accept(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.ConsoleAcceptView{Token: c.Request().PostFormValue("token")}
	password := c.Request().PostFormValue("password")
	if v.Token == "" || len(v.Token) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No invitation", Message: "This form carries no invitation.", Link: "/console", LinkLabel: "The console"})
	}
	if !postedForm(c) {
		v.Error = "The form expired. Please try again."
		return s.acceptForm(c, http.StatusForbidden, v)
	}
	ref, err := s.limiter.Attempt(ctx, c.RealIP())
	if err != nil {
		return s.fail(c, err)
	}
	if ref != nil {
		v.Error, v.RetryAfter = s.retry(c, ref)
		return s.acceptForm(c, http.StatusTooManyRequests, v)
	}
	if admin.ValidatePassword(password) != nil {
		v.Error = fmt.Sprintf("Choose a password of %d to %d characters.", admin.MinPasswordLen, admin.MaxPasswordLen)
		return s.acceptForm(c, http.StatusBadRequest, v)
	}
	hash, err := s.cfg.Hasher.Hash(ctx, password, admin.DefaultArgon2)
	if errors.Is(err, admin.ErrBusy) {
		c.Response().Header().Set("Retry-After", "1")
		v.Error = "Tollgate is busy. Please try again in a moment."
		return s.acceptForm(c, http.StatusServiceUnavailable, v)
	}
	if err != nil {
		return s.fail(c, err)
	}
	m, err := s.cfg.Members.AcceptInvite(ctx, v.Token, hash)
	if errors.Is(err, console.ErrTokenInvalid) {
		return s.inviteGone(c)
	}
	if err != nil {
		return s.fail(c, err)
	}
	raw, err := s.cfg.Members.CreateSession(ctx, m.TenantID, m.ID, s.cfg.Now().Add(s.cfg.SessionTTL))
	if err != nil {
		return s.fail(c, err)
	}
	s.setCookie(c, formCookie, "", -1)
	s.setCookie(c, sessionCookie, raw, int(s.cfg.SessionTTL/time.Second))
	s.log.InfoContext(ctx, "console invitation accepted", "tenant_id", m.TenantID, "member_id", m.ID)
	return c.Redirect(http.StatusSeeOther, "/console")
}
