package browsertest

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleWebhooksInChromium adds a webhook endpoint on the console's
// webhooks page in a real browser (its secret shown once), surveys the
// list, the endpoint's page, the rotate and the delete pages at a phone's
// and a laptop's width (no sideways scrolling, no axe-core violation,
// screenshots), then deletes the endpoint through its page's link.
func TestConsoleWebhooksInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1", "TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1")).URL
	b := newBrowser(t, base)

	b.open("/console/signup", "signup-form")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "new-key-test")

	b.open("/console/webhooks", "create-webhook-form")
	b.do("fill the endpoint form",
		chromedp.SetValue(chromedp.ID("hook-url"), "http://127.0.0.1:9/tollgate/events"),
		chromedp.Click(chromedp.CSS(`input[value="key.revoked"]`), chromedp.NodeVisible),
	)
	b.click("create-webhook", "webhook-secret")
	if s := b.text("webhook-secret"); !strings.HasPrefix(s, "whsec_") {
		t.Fatalf("the secret: %q", s)
	}
	b.screenshot("66-console-webhooks-new")

	hook, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="webhook-row"] a').getAttribute("href")`))
	if err != nil {
		t.Fatalf("an endpoint link: %v", err)
	}
	b.survey([]surveyPage{{"67-console-webhooks", "/console/webhooks", "webhooks"}, {"68-console-webhook", hook, "send-test"},
		{"69-console-webhook-rotate", hook + "/rotate", "rotate"}, {"70-console-webhook-delete", hook + "/delete", "delete-webhook"}})

	// Delete it from its page: the link, the page that asks, the button.
	b.open(hook, "delete-link")
	b.click("delete-link", "delete-webhook")
	b.click("delete-webhook", "flash")
	if n := b.count(`[data-testid="webhook-row"]`); n != 0 {
		t.Fatalf("%d endpoints listed after deleting the only one", n)
	}
	b.screenshot("71-console-webhook-deleted")
}
