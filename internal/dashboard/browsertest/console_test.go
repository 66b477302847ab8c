package browsertest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleInChromium walks a new user's way into the tenants' console in
// a real browser, as `make run` serves it (TOLLGATE_DEV, no SMTP server):
// the sign-up form, the quick start with the new test key, the confirmation
// mail in the development mailbox, its link and the click that brings the
// live key. Every page at a phone's and a laptop's width, without sideways
// scrolling or an axe-core violation, with screenshots.
func TestConsoleInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1")).URL
	b := newBrowser(t, base)

	b.survey([]surveyPage{{"20-console-signup", "/console/signup", "signup-form"}, {"21-console-signin", "/console/login", "console-login-form"}})
	b.open("/console/signup", "signup-form")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "new-key-test")
	if k := b.text("new-key-test"); !strings.HasPrefix(k, "tg_test_") || !strings.Contains(b.text("snippet-curl"), k) {
		t.Fatalf("the quick start's key %q is not in its snippet", k)
	}
	b.screenshot("22-console-quick-start-new")
	b.survey([]surveyPage{{"23-console-quick-start", "/console", "snippet-curl"}, {"24-console-mailbox", "/console/dev/mailbox", "mail"}})

	b.open("/console/dev/mailbox", "mail")
	link := regexp.MustCompile(`https?://\S+/console/confirm\?token=\S+`).FindString(b.text("mail"))
	if link == "" {
		t.Fatalf("no confirmation link in the mailbox: %q", b.text("mail"))
	}
	b.do("open the mailed link", chromedp.Navigate(link), chromedp.WaitVisible(tid("confirm")))
	b.screenshot("25-console-confirm")
	b.click("confirm", "new-key-live")
	if k := b.text("new-key-live"); !strings.HasPrefix(k, "tg_live_") {
		t.Fatalf("the live key: %q", k)
	}
	if b.count(`[data-testid="unconfirmed"]`) != 0 {
		t.Error("confirmed, the quick start still asks for a confirmation")
	}
	b.screenshot("26-console-confirmed")
}
