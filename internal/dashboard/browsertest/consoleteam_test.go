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

// TestConsoleTeamInChromium walks the console's team pages in a real
// browser, as `make run` serves them (TOLLGATE_DEV, the development
// mailbox): an owner, not yet confirmed, is asked to confirm first, then
// invites a developer; the removal's confirmation page,
// the invitation's page from the mailbox and the developer's view of the
// team once joined. Every page at a phone's and a laptop's width, without
// sideways scrolling or an axe-core violation, with screenshots.
func TestConsoleTeamInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1")).URL
	b := newBrowser(t, base)

	b.open("/console/signup", "signup-form")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "owner@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "new-key-test")
	b.open("/console/team", "invite-unconfirmed")
	b.open("/console/dev/mailbox", "mail")
	confirm := regexp.MustCompile(`https?://\S+/console/confirm\?token=\S+`).FindString(b.text("mail"))
	if confirm == "" {
		t.Fatalf("no confirmation link in the mailbox: %q", b.text("mail"))
	}
	b.do("open the confirmation link", chromedp.Navigate(confirm), chromedp.WaitVisible(tid("confirm")))
	b.click("confirm", "new-key-live")
	b.open("/console/team", "invite-form")
	b.do("fill the invitation",
		chromedp.SetValue(chromedp.ID("invite-email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("invite-role"), "developer"),
	)
	b.click("invite", "flash")
	if n := b.count(`[data-testid="member-row"]`); n != 2 {
		t.Fatalf("%d members listed after the invitation, want 2", n)
	}
	href, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-email="dev@example.com"] [data-testid="remove"]').getAttribute("href")`))
	if err != nil || !strings.HasSuffix(href, "/remove") {
		t.Fatalf("the developer's remove link: %q, %v", href, err)
	}
	b.survey([]surveyPage{{"50-console-team", "/console/team", "members"}, {"51-console-team-remove", href, "confirm"}})

	b.open("/console/dev/mailbox", "mail")
	all, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	link := regexp.MustCompile(`https?://\S+/console/invite\?token=\S+`).FindString(all)
	if err != nil || link == "" {
		t.Fatalf("no invitation in the mailbox (%v): %q", err, all)
	}
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	// The owner signs out; the developer follows the link in this browser.
	b.open("/console/team", "members")
	b.click("console-sign-out", "console-login-form")
	b.survey([]surveyPage{{"52-console-invite", u.RequestURI(), "accept-form"}})
	b.open(u.RequestURI(), "accept-form")
	if who, where := b.text("invite-email"), b.text("invite-workspace"); who != "dev@example.com" || where != "Acme Robotics" {
		t.Fatalf("the invitation's page names %q joining %q, want dev@example.com joining Acme Robotics", who, where)
	}
	b.do("choose a password", chromedp.SetValue(chromedp.ID("password"), password))
	b.click("accept", "member-email")
	if who := b.text("member-email"); who != "dev@example.com" {
		t.Fatalf("signed in as %q after joining, want dev@example.com", who)
	}
	b.survey([]surveyPage{{"53-console-team-developer", "/console/team", "developer-note"}})
	if n := b.count(`[data-testid="invite-form"], [data-testid="remove"]`); n != 0 {
		t.Fatalf("a developer's team page shows %d owner's forms or links", n)
	}
}
