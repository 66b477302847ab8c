package blackbox

import (
	"context"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/mailtest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

var (
	inviteLink  = regexp.MustCompile(`https?://\S+/console/invite\?token=\S+`)
	tokenInLink = regexp.MustCompile(`/console/confirm\?token=(\S+)`)
)

// signUpConfirmed is consoleSignUp, the address then marked confirmed in the
// database (the mailed link's way is TestConsoleSignUpJourney's).
func signUpConfirmed(t *testing.T, b *browser, dsn, email, workspace string) {
	t.Helper()
	consoleSignUp(t, b, email, workspace)
	sql(t, dsn, `UPDATE members SET confirmed_at = now() WHERE email = $1`, email)
}

// memberID is the id of the member with email in the remove link of a
// team page.
func memberID(t *testing.T, team page, email string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)data-email="` + regexp.QuoteMeta(email) + `".*?href="/console/team/([0-9a-f-]{36})/remove"`).FindStringSubmatch(team.body)
	if m == nil {
		t.Fatalf("no remove link of %s on the team page: %s", email, team.body)
	}
	return m[1]
}

// mailedLink waits for the invitation to Acme mailed to to and returns
// its link's path and query.
func mailedLink(t *testing.T, smtp *mailtest.Server, to string) string {
	t.Helper()
	link := inviteLink.FindString(waitMails(t, smtp, to, "You are invited to Acme on Tollgate", 1)[0])
	u, err := url.Parse(link)
	if err != nil || link == "" {
		t.Fatalf("the invitation link %q: %v", link, err)
	}
	return u.RequestURI()
}

// TestConsoleTeam is a team's life in the console against the real binary
// and a real SMTP server: an owner, once their address is confirmed,
// invites a developer, whose mailed link
// (a GET that spends nothing) sets a password and signs them in, once; the
// developer sees the team but may neither invite nor remove (403); the
// last owner cannot be removed; tenant B's member in A's remove address is
// a 404 and stays; the owner removes the developer, whose session ends;
// with a second owner the first may leave, signed out then; and an
// invitation expires after 7 days.
func TestConsoleTeam(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_SMTP_URL="+smtp.SMTPURL(), "TOLLGATE_MAIL_FROM=Tollgate <no-reply@tollgate.test>")
	owner := newBrowser(t, in.base)
	consoleSignUp(t, owner, "owner@a.example", "Acme")

	// Invitations go out from confirmed addresses only.
	team := owner.get("/console/team")
	if team.status != 200 || strings.Contains(team.body, `data-testid="invite-form"`) || !strings.Contains(team.body, `data-testid="invite-unconfirmed"`) {
		t.Fatalf("an unconfirmed owner's team page: %d %s", team.status, team.body)
	}
	if p := owner.post("/console/team/invite", team, url.Values{"email": {"dev@a.example"}, "role": {"developer"}}); p.status != 403 {
		t.Fatalf("an unconfirmed owner's invitation: %d %s", p.status, p.body)
	}
	confirm := tokenInLink.FindStringSubmatch(waitMails(t, smtp, "owner@a.example", "Confirm your email for Tollgate", 1)[0])
	if confirm == nil {
		t.Fatal("no link in the confirmation mail")
	}
	owner.post("/console/confirm", page{}, url.Values{"token": {confirm[1]}})

	team = owner.get("/console/team")
	if team.status != 200 || !strings.Contains(team.body, `data-testid="invite-form"`) || !strings.Contains(team.body, "owner@a.example") {
		t.Fatalf("the owner's team page: %d %s", team.status, team.body)
	}
	ownerID := memberID(t, team, "owner@a.example")
	if bad := owner.post("/console/team/invite", team, url.Values{"email": {"dev@a.example"}, "role": {"admin"}}); bad.status != 400 {
		t.Fatalf("an invitation with an unknown role: %d", bad.status)
	}
	team = owner.post("/console/team/invite", team, url.Values{"email": {" Dev@A.example"}, "role": {"developer"}})
	if team.status != 200 || !strings.Contains(team.url, "/console/team") || !regexp.MustCompile(`(?s)data-email="dev@a.example".*?invited`).MatchString(team.body) {
		t.Fatalf("after inviting: %d %s %s", team.status, team.url, team.body)
	}

	// The developer's link: the GET spends nothing, the form does, once.
	link := mailedLink(t, smtp, "dev@a.example")
	dev := newBrowser(t, in.base)
	dev.get(link)
	accept := dev.get(link)
	token := tokenBox.FindStringSubmatch(accept.body)
	if accept.status != 200 || token == nil || !strings.Contains(accept.body, `data-testid="accept-form"`) {
		t.Fatalf("the invitation's page: %d %s", accept.status, accept.body)
	}
	// It names the address and the workspace being joined, before a
	// password is chosen, and again on a refused form.
	invited := func(p page) bool {
		return strings.Contains(p.body, `data-testid="invite-email">dev@a.example<`) && strings.Contains(p.body, `data-testid="invite-workspace">Acme<`)
	}
	if !invited(accept) {
		t.Fatalf("the invitation's page does not name the address and the workspace: %s", accept.body)
	}
	if short := dev.post("/console/invite", accept, url.Values{"token": {token[1]}, "password": {"short"}}); short.status != 400 || !invited(short) {
		t.Fatalf("a short password: %d %s", short.status, short.body)
	}
	accept = dev.get(link)
	home := dev.post("/console/invite", accept, url.Values{"token": {token[1]}, "password": {"developer's long password"}})
	if home.status != 200 || !strings.HasSuffix(home.url, "/console") || !strings.Contains(home.body, `data-testid="member-email">dev@a.example<`) {
		t.Fatalf("accepted: %d %s %s", home.status, home.url, home.body)
	}
	stranger := newBrowser(t, in.base)
	again := stranger.get(link)
	if again.status != 404 || strings.Contains(again.body, "dev@a.example") || strings.Contains(again.body, `data-testid="accept-form"`) {
		t.Fatalf("the used link's page: %d %s", again.status, again.body)
	}
	// A post of the used token (a form token from another signed-out page)
	// is the same page.
	if used := stranger.post("/console/invite", stranger.get("/console/login"), url.Values{"token": {token[1]}, "password": {"a stranger's password"}}); used.status != 404 || strings.Contains(used.body, "member-email") {
		t.Fatalf("the link a second time: %d %s", used.status, used.body)
	}

	// The developer sees the team, but neither invites nor removes.
	devTeam := dev.get("/console/team")
	if devTeam.status != 200 || !strings.Contains(devTeam.body, "owner@a.example") || strings.Contains(devTeam.body, `data-testid="invite-form"`) ||
		strings.Contains(devTeam.body, "/console/team/"+ownerID+"/remove") {
		t.Fatalf("the developer's team page: %d %s", devTeam.status, devTeam.body)
	}
	if p := dev.post("/console/team/invite", devTeam, url.Values{"email": {"x@a.example"}, "role": {"owner"}}); p.status != 403 {
		t.Fatalf("a developer's invitation: %d", p.status)
	}
	if p := dev.get("/console/team/" + ownerID + "/remove"); p.status != 403 {
		t.Fatalf("a developer's removal page: %d", p.status)
	}
	if p := dev.post("/console/team/"+ownerID+"/remove", devTeam, url.Values{}); p.status != 403 {
		t.Fatalf("a developer's removal: %d", p.status)
	}

	// The last owner stays.
	ask := owner.get("/console/team/" + ownerID + "/remove")
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="confirm"`) {
		t.Fatalf("the removal's page: %d %s", ask.status, ask.body)
	}
	if p := owner.post("/console/team/"+ownerID+"/remove", ask, url.Values{}); p.status != 409 || !strings.Contains(p.body, "last owner") {
		t.Fatalf("the last owner's removal: %d %s", p.status, p.body)
	}
	if p := owner.get("/console/team"); p.status != 200 || !strings.Contains(p.body, "owner@a.example") {
		t.Fatalf("the last owner after the refusal: %d %s", p.status, p.body)
	}

	// Tenant B's member is not A's to see or remove; B's email is taken.
	other := newBrowser(t, in.base)
	consoleSignUp(t, other, "owner@b.example", "Beta")
	bID := memberID(t, other.get("/console/team"), "owner@b.example")
	if p := owner.get("/console/team/" + bID + "/remove"); p.status != 404 || strings.Contains(p.body, "owner@b.example") {
		t.Fatalf("B's member on A's removal page: %d %s", p.status, p.body)
	}
	if p := owner.post("/console/team/"+bID+"/remove", ask, url.Values{}); p.status != 404 || strings.Contains(p.body, "owner@b.example") {
		t.Fatalf("B's member removed by A: %d %s", p.status, p.body)
	}
	if p := other.get("/console/team"); p.status != 200 || !strings.Contains(p.body, "owner@b.example") {
		t.Fatalf("B after A's attempts: %d %s", p.status, p.body)
	}
	if p := owner.post("/console/team/invite", ask, url.Values{"email": {"owner@b.example"}, "role": {"developer"}}); p.status != 409 {
		t.Fatalf("an invitation of a taken email: %d", p.status)
	}

	// The owner removes the developer, whose session ends.
	devID := memberID(t, owner.get("/console/team"), "dev@a.example")
	ask = owner.get("/console/team/" + devID + "/remove")
	if ask.status != 200 || !strings.Contains(ask.body, "dev@a.example") {
		t.Fatalf("the developer's removal page: %d %s", ask.status, ask.body)
	}
	if p := owner.post("/console/team/"+devID+"/remove", ask, url.Values{}); p.status != 200 || !strings.HasSuffix(p.url, "/console/team?removed=1") || strings.Contains(p.body, `data-email="dev@a.example"`) {
		t.Fatalf("the developer removed: %d %s %s", p.status, p.url, p.body)
	}
	if p := dev.get("/console/team"); !strings.Contains(p.url, "/console/login") {
		t.Fatalf("the removed developer's session: %d %s", p.status, p.url)
	}

	// With a second owner, the first may leave, and is signed out.
	ask = owner.post("/console/team/invite", ask, url.Values{"email": {"co@a.example"}, "role": {"owner"}})
	co := newBrowser(t, in.base)
	link = mailedLink(t, smtp, "co@a.example")
	accept = co.get(link)
	token = tokenBox.FindStringSubmatch(accept.body)
	if p := co.post("/console/invite", accept, url.Values{"token": {token[1]}, "password": {"co-owner's long password"}}); p.status != 200 || !strings.HasSuffix(p.url, "/console") {
		t.Fatalf("the co-owner joined: %d %s", p.status, p.url)
	}
	ask = owner.get("/console/team/" + ownerID + "/remove")
	if p := owner.post("/console/team/"+ownerID+"/remove", ask, url.Values{}); p.status != 200 || !strings.Contains(p.body, "You left the workspace") {
		t.Fatalf("the first owner leaves: %d %s", p.status, p.body)
	}
	if p := owner.get("/console/team"); !strings.Contains(p.url, "/console/login") {
		t.Fatalf("the owner who left is still signed in: %s", p.url)
	}
	if p := co.get("/console/team"); p.status != 200 || strings.Contains(p.body, "owner@a.example") || !strings.Contains(p.body, `data-testid="invite-form"`) {
		t.Fatalf("the co-owner's team: %d %s", p.status, p.body)
	}
	owner, ask = co, co.get("/console/team")

	// An invitation works for 7 days.
	team = owner.post("/console/team/invite", ask, url.Values{"email": {"late@a.example"}, "role": {"owner"}})
	if team.status != 200 {
		t.Fatalf("inviting late@: %d %s", team.status, team.body)
	}
	if d := inviteTTL(t, dsn, "late@a.example"); d != 7*24*time.Hour {
		t.Fatalf("the invitation works for %s, want 7 days", d)
	}
	sql(t, dsn, `UPDATE member_tokens SET expires_at = now() - interval '1 second' FROM members m WHERE m.id = member_id AND m.email = 'late@a.example'`)
	late := newBrowser(t, in.base)
	link = mailedLink(t, smtp, "late@a.example")
	if p := late.get(link); p.status != 404 || !strings.Contains(p.body, "no longer works") || strings.Contains(p.body, "late@a.example") {
		t.Fatalf("an expired invitation's page: %d %s", p.status, p.body)
	}
	token = regexp.MustCompile(`token=([A-Za-z0-9_-]+)`).FindStringSubmatch(link)
	if p := late.post("/console/invite", late.get("/console/login"), url.Values{"token": {token[1]}, "password": {"late comer's password"}}); p.status != 404 {
		t.Fatalf("an expired invitation: %d %s", p.status, p.body)
	}
}

// TestConsoleInvitationsPerTenant: a tenant sends 20 invitations an hour
// (an instance of its own: the console's pages count against the public
// pages' 60 requests a minute per address), a taken email's among them, a
// refused role's not; the 21st waits, and another tenant's are its own.
func TestConsoleInvitationsPerTenant(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_SMTP_URL="+smtp.SMTPURL())
	owner := newBrowser(t, in.base)
	signUpConfirmed(t, owner, dsn, "owner@a.example", "Acme")
	other := newBrowser(t, in.base)
	signUpConfirmed(t, other, dsn, "owner@b.example", "Beta")
	team := owner.get("/console/team")
	if p := owner.post("/console/team/invite", team, url.Values{"email": {"owner@b.example"}, "role": {"developer"}}); p.status != 409 {
		t.Fatalf("an invitation of a taken email: %d", p.status)
	}
	if p := owner.post("/console/team/invite", team, url.Values{"email": {"x@a.example"}, "role": {"admin"}}); p.status != 400 {
		t.Fatalf("an invitation with an unknown role: %d", p.status)
	}
	for i := 2; i <= 21; i++ {
		p := owner.post("/console/team/invite", team, url.Values{"email": {"n" + strconv.Itoa(i) + "@a.example"}, "role": {"developer"}})
		want := 200
		if i == 21 {
			want = 429
		}
		if p.status != want {
			t.Fatalf("invitation %d: %d, want %d: %s", i, p.status, want, p.body)
		}
	}
	if p := other.post("/console/team/invite", other.get("/console/team"), url.Values{"email": {"dev@b.example"}, "role": {"developer"}}); p.status != 200 {
		t.Fatalf("tenant B's invitation after A's were refused: %d %s", p.status, p.body)
	}
}

// inviteTTL is how long the invitation of email works.
func inviteTTL(t *testing.T, dsn, email string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var secs float64
	err = conn.QueryRow(ctx, `SELECT extract(epoch FROM t.expires_at - t.created_at) FROM member_tokens t JOIN members m ON m.id = t.member_id
		WHERE m.email = $1 AND t.purpose = 'invite'`, email).Scan(&secs)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(secs * float64(time.Second))
}

// TestConsoleInvitationMailFails: an invitation whose mail cannot be sent
// (nothing listens at the SMTP address) is taken back: a 503 page, and no
// member left waiting for a link never sent.
func TestConsoleInvitationMailFails(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_SMTP_URL=smtp://"+dead)
	owner := newBrowser(t, in.base)
	signUpConfirmed(t, owner, dsn, "owner@a.example", "Acme")
	team := owner.get("/console/team")
	if p := owner.post("/console/team/invite", team, url.Values{"email": {"dev@a.example"}, "role": {"developer"}}); p.status != 503 {
		t.Fatalf("an invitation without mail: %d %s", p.status, p.body)
	}
	if p := owner.get("/console/team"); p.status != 200 || strings.Contains(p.body, "dev@a.example") {
		t.Fatalf("the team after an invitation that did not go: %d %s", p.status, p.body)
	}
}

// TestConsoleInviteAttemptsPerNetwork: each post of the invitation's form
// may cost a password hash, so it counts as a sign-in attempt of the
// network (10 a minute): guessed tokens are refused (404), the eleventh
// post waits (429), and so does a sign-in from there.
func TestConsoleInviteAttemptsPerNetwork(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1")
	b := newBrowser(t, in.base)
	// A guessed token's page is a 404 without a form: the posts carry the
	// form token of another signed-out page.
	if p := b.get("/console/invite?token=guessed"); p.status != 404 || strings.Contains(p.body, `data-testid="accept-form"`) {
		t.Fatalf("a guessed invitation's page: %d %s", p.status, p.body)
	}
	form := b.get("/console/login")
	for i := 1; i <= 11; i++ {
		p := b.post("/console/invite", form, url.Values{"token": {"guessed" + strconv.Itoa(i)}, "password": {"a long enough password"}})
		want := 404
		if i == 11 {
			want = 429
		}
		if p.status != want {
			t.Fatalf("post %d of a guessed invitation: %d, want %d: %s", i, p.status, want, p.body)
		}
		if p.status == 429 {
			break
		}
		form = b.get("/console/login")
	}
	login := b.get("/console/login")
	if p := b.post("/console/login", login, url.Values{"email": {"dev@example.com"}, "password": {"a long enough password"}}); p.status != 429 {
		t.Fatalf("a sign-in after the attempts: %d", p.status)
	}
}

// TestConsoleInvitationsWithoutSMTP: a production Tollgate without an SMTP
// server (here a second instance on the database of one that had one)
// sends no invitation, rather than write its link to the log: 503, and no
// member made.
func TestConsoleInvitationsWithoutSMTP(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	dsn := pgtest.New(t)
	with := start(t, dsn, "TOLLGATE_SMTP_URL="+smtp.SMTPURL())
	signUpConfirmed(t, newBrowser(t, with.base), dsn, "owner@a.example", "Acme")

	without := start(t, dsn)
	b := newBrowser(t, without.base)
	login := b.get("/console/login")
	team := b.post("/console/login", login, url.Values{"email": {"owner@a.example"}, "password": {"correct horse battery"}, "next": {"/console/team"}})
	if team.status != 200 || !strings.Contains(team.url, "/console/team") {
		t.Fatalf("signed in without SMTP: %d %s %s", team.status, team.url, team.body)
	}
	if p := b.post("/console/team/invite", team, url.Values{"email": {"dev@a.example"}, "role": {"developer"}}); p.status != 503 {
		t.Fatalf("an invitation without SMTP in production: %d %s", p.status, p.body)
	}
	if p := b.get("/console/team"); strings.Contains(p.body, "dev@a.example") {
		t.Fatalf("a member made without SMTP: %s", p.body)
	}
}

// TestConsoleDeveloperLeaves: a developer may remove themself (no one
// else): the page asks first, then they are signed out and gone from the
// team.
func TestConsoleDeveloperLeaves(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_SMTP_URL="+smtp.SMTPURL())
	owner := newBrowser(t, in.base)
	signUpConfirmed(t, owner, dsn, "owner@a.example", "Acme")
	team := owner.get("/console/team")
	owner.post("/console/team/invite", team, url.Values{"email": {"dev@a.example"}, "role": {"developer"}})
	dev := newBrowser(t, in.base)
	accept := dev.get(mailedLink(t, smtp, "dev@a.example"))
	token := tokenBox.FindStringSubmatch(accept.body)
	if token == nil {
		t.Fatalf("the invitation's page: %d %s", accept.status, accept.body)
	}
	dev.post("/console/invite", accept, url.Values{"token": {token[1]}, "password": {"developer's long password"}})

	devTeam := dev.get("/console/team")
	leave := regexp.MustCompile(`href="(/console/team/[0-9a-f-]{36}/remove)" data-testid="leave"`).FindStringSubmatch(devTeam.body)
	if devTeam.status != 200 || leave == nil {
		t.Fatalf("the developer's team page has no way to leave: %d %s", devTeam.status, devTeam.body)
	}
	ask := dev.get(leave[1])
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="confirm"`) {
		t.Fatalf("the leave page: %d %s", ask.status, ask.body)
	}
	if p := dev.post(leave[1], ask, url.Values{}); p.status != 200 || !strings.Contains(p.body, "You left the workspace") {
		t.Fatalf("the developer leaves: %d %s", p.status, p.body)
	}
	if p := dev.get("/console/team"); !strings.Contains(p.url, "/console/login") {
		t.Fatalf("the developer who left is still signed in: %s", p.url)
	}
	if p := owner.get("/console/team"); strings.Contains(p.body, "dev@a.example") {
		t.Fatalf("the developer still listed: %s", p.body)
	}
}
