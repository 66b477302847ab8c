package browsertest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleKeysInChromium makes a live key on the console's keys page in
// a real browser (a confirmed member of a development Tollgate), and
// surveys the keys page, the roll page and the revoke page at a phone's
// and a laptop's width: no sideways scrolling, no axe-core violation,
// screenshots.
func TestConsoleKeysInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1")).URL
	b := newBrowser(t, base)

	b.open("/console/signup", "signup-form")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "new-key-test")
	b.open("/console/dev/mailbox", "mail")
	link := regexp.MustCompile(`https?://\S+/console/confirm\?token=\S+`).FindString(b.text("mail"))
	b.do("open the mailed link", chromedp.Navigate(link), chromedp.WaitVisible(tid("confirm")))
	b.click("confirm", "new-key-live")

	b.open("/console/keys", "create-key-form")
	b.do("fill the key form",
		chromedp.SetValue(chromedp.ID("key-name"), "production web"),
		chromedp.SetValue(chromedp.ID("key-kind"), "live"),
		chromedp.SetValue(chromedp.ID("key-expires"), "90"),
	)
	b.click("create-key", "new-key")
	if k := b.text("new-key"); !strings.HasPrefix(k, "tg_live_") {
		t.Fatalf("the new key: %q", k)
	}
	b.screenshot("40-console-keys-new")

	roll, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('a[href$="/roll"]').getAttribute("href")`))
	if err != nil {
		t.Fatalf("a roll link: %v", err)
	}
	revoke := strings.TrimSuffix(roll, "/roll") + "/revoke"
	b.survey([]surveyPage{{"41-console-keys", "/console/keys", "keys"}, {"42-console-key-roll", roll, "roll-form"}, {"43-console-key-revoke", revoke, "revoke-form"}})
}
