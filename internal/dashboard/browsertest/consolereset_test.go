package browsertest

import (
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleResetInChromium walks a forgotten password in a real browser,
// as `make run` serves the console (TOLLGATE_DEV, the development
// mailbox): the confirmation mail sent again from the home page, the
// sign-in page's "Forgot your password?", the request and its answer, the
// mailed link's form, the new password, signing in with it, the link used
// a second time. The reset pages at a phone's and a laptop's width,
// without sideways scrolling or an axe-core violation, with screenshots;
// the answers to its forms without an axe-core violation.
func TestConsoleResetInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1")).URL
	b := newBrowser(t, base)

	b.open("/console/signup", "signup-form")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "resend-form")
	b.click("resend", "flash")
	if f := b.text("flash"); !strings.Contains(f, "A new confirmation mail is on its way") {
		t.Fatalf("after resending: %q", f)
	}
	axeClean(b, "30-console-resent")
	b.screenshot("30-console-resent")
	b.do("sign out", chromedp.Click(tid("console-sign-out"), chromedp.NodeVisible), chromedp.WaitVisible(tid("console-notice")))

	b.survey([]surveyPage{{"31-console-reset", "/console/reset", "reset-form"}})
	b.open("/console/login", "forgot-password")
	b.click("forgot-password", "reset-form")
	b.do("fill the reset form", chromedp.SetValue(chromedp.ID("email"), "dev@example.com"))
	b.click("send-reset", "reset-sent")
	axeClean(b, "32-console-reset-sent")
	b.screenshot("32-console-reset-sent")

	b.open("/console/dev/mailbox", "mail")
	link := regexp.MustCompile(`https?://\S+/console/reset/confirm\?token=\S+`).FindString(b.text("mail"))
	u, err := url.Parse(link)
	if link == "" || err != nil {
		t.Fatalf("no reset link in the newest mail: %q", b.text("mail"))
	}
	// The survey opens the link twice at each width: opening spends nothing.
	b.survey([]surveyPage{{"33-console-new-password", u.RequestURI(), "new-password-form"}})
	b.open(u.RequestURI(), "new-password-form")
	b.do("fill the new password", chromedp.SetValue(chromedp.ID("password"), "a brand new passphrase"))
	b.click("set-password", "console-notice")
	if n := b.text("console-notice"); !strings.Contains(n, "Your password is changed") {
		t.Fatalf("after the reset: %q", n)
	}
	axeClean(b, "34-console-reset-done")
	b.screenshot("34-console-reset-done")
	b.do("sign in with the new password",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), "a brand new passphrase"),
	)
	b.click("console-sign-in", "snippet-curl")

	b.open(u.RequestURI(), "new-password-form")
	b.do("fill the new password again", chromedp.SetValue(chromedp.ID("password"), "yet another passphrase"))
	b.click("set-password", "message-title")
	if m := b.text("message-title"); m != "This link no longer works" {
		t.Fatalf("the link used twice: %q", m)
	}
	axeClean(b, "35-console-reset-used")
	b.screenshot("35-console-reset-used")
}

// axeClean fails the test for each axe-core violation on the page shown,
// an answer to a form that the survey cannot open by its address.
func axeClean(b *browser, what string) {
	b.t.Helper()
	for _, v := range b.axe() {
		b.t.Errorf("%s: axe-core %s (%s): %s, at %s", what, v.ID, v.Impact, v.Help, strings.Join(v.Targets, "; "))
	}
}
