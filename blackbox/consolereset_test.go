package blackbox

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/mailtest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

var (
	resetLink   = regexp.MustCompile(`https?://\S+/console/reset/confirm\?token=\S+`)
	resetAnswer = "If an account has this address, a link to choose a new password is on its way to it."
)

// mailsTo returns the texts of the mails to to with subject, oldest first.
func mailsTo(t *testing.T, smtp *mailtest.Server, to, subject string) []string {
	t.Helper()
	var texts []string
	msgs := smtp.Messages(t)
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; len(m.To) == 1 && m.To[0] == to && m.Subject == subject {
			texts = append(texts, smtp.Message(t, m.ID).Text)
		}
	}
	return texts
}

// waitMails waits until n mails to to with subject have arrived and
// returns their texts.
func waitMails(t *testing.T, smtp *mailtest.Server, to, subject string, n int) []string {
	t.Helper()
	var texts []string
	eventually.True(t, 10*time.Second, subject+" to "+to, func() bool {
		texts = mailsTo(t, smtp, to, subject)
		return len(texts) >= n
	})
	return texts
}

// signUp makes an account in b and returns its home page.
func signUp(t *testing.T, b *browser, email, password string) page {
	t.Helper()
	form := b.get("/console/signup")
	home := b.post("/console/signup", form, url.Values{"email": {email}, "password": {password}, "name": {"Acme"}})
	if home.status != 200 || !strings.Contains(home.body, `data-testid="unconfirmed"`) {
		t.Fatalf("sign-up: %d %s", home.status, home.body)
	}
	return home
}

// askReset posts the reset form of a fresh page in b.
func askReset(t *testing.T, b *browser, email string) page {
	t.Helper()
	form := b.get("/console/reset")
	if form.status != 200 || !strings.Contains(form.body, `data-testid="reset-form"`) {
		t.Fatalf("the reset page: %d %s", form.status, form.body)
	}
	return b.post("/console/reset", form, url.Values{"email": {email}})
}

// TestConsolePasswordReset is a forgotten password, through the console's
// forms against the real binary and mailpit: the sign-in page's link, the
// same answer for an address with an account and one without (which gets
// no mail), the mailed link (a GET that spends nothing), the new password;
// then the old password refused, the new one accepted, a session opened
// before the reset signed out, the link refused a second time.
func TestConsolePasswordReset(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	in := start(t, pgtest.New(t), "TOLLGATE_SMTP_URL="+smtp.SMTPURL(), "TOLLGATE_MAIL_FROM=Tollgate <no-reply@tollgate.test>")
	old := newBrowser(t, in.base)
	signUp(t, old, "dev@example.com", "correct horse battery")

	b := newBrowser(t, in.base)
	if login := b.get("/console/login"); !strings.Contains(login.body, `href="/console/reset"`) {
		t.Fatalf("no reset link on the sign-in page: %s", login.body)
	}
	unknown := askReset(t, b, "nobody@example.com")
	known := askReset(t, b, "Dev@Example.com ")
	for _, p := range []page{unknown, known} {
		if p.status != 200 || !strings.Contains(p.body, resetAnswer) || !strings.Contains(p.body, `data-testid="reset-sent"`) {
			t.Fatalf("the answer to a reset: %d %s", p.status, p.body)
		}
	}
	if strings.ReplaceAll(unknown.body, "nobody@example.com", "X") != strings.ReplaceAll(known.body, "Dev@Example.com", "X") {
		t.Errorf("an address without an account is answered otherwise:\n%s\n----\n%s", unknown.body, known.body)
	}
	text := waitMails(t, smtp, "dev@example.com", "Reset your Tollgate password", 1)[0]
	for _, m := range smtp.Messages(t) {
		if len(m.To) == 1 && m.To[0] == "nobody@example.com" {
			t.Errorf("a mail went to an address without an account: %+v", m)
		}
	}
	link, err := url.Parse(resetLink.FindString(text))
	if err != nil || link.Host != strings.TrimPrefix(in.base, "http://") {
		t.Fatalf("the mailed link in %q: %v", text, err)
	}

	// The link's page spends nothing: opened twice, then the form.
	b.get(link.RequestURI())
	form := b.get(link.RequestURI())
	token := tokenBox.FindStringSubmatch(form.body)
	if form.status != 200 || token == nil || !strings.Contains(form.body, `data-testid="new-password-form"`) {
		t.Fatalf("the link's page: %d %s", form.status, form.body)
	}
	if short := b.post("/console/reset/confirm", form, url.Values{"token": {token[1]}, "password": {"short"}}); short.status != 400 || !strings.Contains(short.body, `data-testid="console-error"`) {
		t.Fatalf("a short password: %d %s", short.status, short.body)
	}
	form = b.get(link.RequestURI())
	done := b.post("/console/reset/confirm", form, url.Values{"token": {token[1]}, "password": {"a brand new passphrase"}})
	if !strings.Contains(done.url, "/console/login") || !strings.Contains(done.body, `data-testid="console-notice"`) || !strings.Contains(done.body, "Your password is changed") {
		t.Fatalf("after the reset: %d %s %s", done.status, done.url, done.body)
	}
	form = b.get(link.RequestURI())
	again := b.post("/console/reset/confirm", form, url.Values{"token": {token[1]}, "password": {"yet another passphrase"}})
	if again.status != 404 || !strings.Contains(again.body, "This link no longer works") {
		t.Fatalf("the link a second time: %d %s", again.status, again.body)
	}

	if p := old.get("/console"); !strings.Contains(p.url, "/console/login") {
		t.Fatalf("a session opened before the reset still works: %s", p.url)
	}
	login := b.get("/console/login")
	if p := b.post("/console/login", login, url.Values{"email": {"dev@example.com"}, "password": {"correct horse battery"}}); p.status != 401 {
		t.Fatalf("the old password after the reset: %d", p.status)
	}
	login = b.get("/console/login")
	if p := b.post("/console/login", login, url.Values{"email": {"dev@example.com"}, "password": {"yet another passphrase"}}); p.status != 401 {
		t.Fatalf("the password of the second use of the link: %d", p.status)
	}
	login = b.get("/console/login")
	if p := b.post("/console/login", login, url.Values{"email": {"dev@example.com"}, "password": {"a brand new passphrase"}}); p.status != 200 || !strings.Contains(p.body, `data-testid="keys"`) {
		t.Fatalf("the new password: %d %s", p.status, p.body)
	}
	if forged := newBrowser(t, in.base).post("/console/reset", page{}, url.Values{"csrf": {"forged"}, "email": {"dev@example.com"}}); forged.status != 403 {
		t.Fatalf("a reset without the form's token: %d", forged.status)
	}
}

// TestConsoleResetCapAndResend: three reset mails an hour go to one
// address, whichever browser asks, and a fourth is refused (so is one for
// an address without an account: the cap tells nothing); and an
// unconfirmed member's "send the confirmation mail again" sends a second
// mail whose link works, at most three an hour.
func TestConsoleResetCapAndResend(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	in := start(t, pgtest.New(t), "TOLLGATE_SMTP_URL="+smtp.SMTPURL(), "TOLLGATE_MAIL_FROM=Tollgate <no-reply@tollgate.test>")
	b := newBrowser(t, in.base)
	home := signUp(t, b, "dev@example.com", "correct horse battery")

	for i, email := range []string{"dev@example.com", "dev@example.com", "dev@example.com", "dev@example.com", "none@example.com", "none@example.com", "none@example.com", "none@example.com"} {
		p := askReset(t, newBrowser(t, in.base), email)
		want := 200
		if i%4 == 3 {
			want = 429
		}
		if p.status != want {
			t.Fatalf("reset %d for %s: %d, want %d: %s", i%4+1, email, p.status, want, p.body)
		}
		if want == 429 && !strings.Contains(p.body, `data-testid="retry-after"`) {
			t.Fatalf("the refusal says no time to wait: %s", p.body)
		}
	}
	if n := len(waitMails(t, smtp, "dev@example.com", "Reset your Tollgate password", 3)); n != 3 {
		t.Fatalf("%d reset mails, want 3", n)
	}

	// The confirmation, sent again.
	if !strings.Contains(home.body, `data-testid="resend-form"`) {
		t.Fatalf("no resend form on an unconfirmed home: %s", home.body)
	}
	first := waitMails(t, smtp, "dev@example.com", "Confirm your email for Tollgate", 1)
	resent := b.post("/console/confirm/resend", home, url.Values{})
	if resent.status != 200 || !strings.Contains(resent.body, "A new confirmation mail is on its way") {
		t.Fatalf("resend: %d %s", resent.status, resent.body)
	}
	if forged := b.post("/console/confirm/resend", page{}, url.Values{"csrf": {"forged"}}); forged.status != 403 {
		t.Fatalf("a resend without the session's form token: %d", forged.status)
	}
	texts := waitMails(t, smtp, "dev@example.com", "Confirm your email for Tollgate", 2)
	second := mailLink.FindString(texts[1])
	if second == "" || second == mailLink.FindString(first[0]) {
		t.Fatalf("the second confirmation mail's link %q (first %q)", second, mailLink.FindString(first[0]))
	}
	u, _ := url.Parse(second)
	confirm := b.get(u.RequestURI())
	token := tokenBox.FindStringSubmatch(confirm.body)
	if token == nil {
		t.Fatalf("the second link's page: %d %s", confirm.status, confirm.body)
	}
	for i, want := range []int{200, 200, 429} {
		if p := b.post("/console/confirm/resend", home, url.Values{}); p.status != want {
			t.Fatalf("resend %d: %d, want %d: %s", i+2, p.status, want, p.body)
		}
	}
	done := b.post("/console/confirm", confirm, url.Values{"token": {token[1]}})
	if !liveKey.MatchString(done.body) || strings.Contains(done.body, `data-testid="resend-form"`) {
		t.Fatalf("confirmed by the second mail's link: %d %s", done.status, done.body)
	}
}
