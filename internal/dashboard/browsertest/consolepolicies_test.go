package browsertest

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsolePoliciesInChromium makes a policy on the console's policies
// page in a real browser, sees a bad window refused next to its field,
// tries the policy for a subject on its page, adds an override, and
// surveys the policies page, a policy's page, its delete page and the
// override's at a phone's and a laptop's
// width: no sideways scrolling, no axe-core violation, screenshots.
func TestConsolePoliciesInChromium(t *testing.T) {
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

	b.open("/console/policies", "policy-form")
	b.do("fill the policy form with a bad window",
		chromedp.SetValue(chromedp.ID("policy-name"), "search"),
		chromedp.SetValue(chromedp.ID("policy-limit"), "100"),
		chromedp.SetValue(chromedp.ID("policy-window"), "fortnight"),
	)
	b.click("save-policy", "policy-error-window")
	b.screenshot("60-console-policy-error")
	b.do("fix the window", chromedp.SetValue(chromedp.ID("policy-window"), "1m"))
	b.click("save-policy", "policies")
	if row := b.text("policy-row"); !strings.Contains(row, "search") || !strings.Contains(row, "1m") {
		t.Fatalf("the policy listed: %q", row)
	}

	b.open("/console/policies/search", "try-form")
	b.do("fill the try form", chromedp.SetValue(chromedp.ID("try-subject"), "user-42"), chromedp.SetValue(chromedp.ID("try-mode"), "test"))
	b.click("try-submit", "try-result")
	if r := b.text("try-remaining"); r != "100" {
		t.Fatalf("remaining of a subject never counted: %q", r)
	}
	b.screenshot("61-console-policy-tried")

	b.do("fill the override form", chromedp.SetValue(chromedp.ID("override-pattern"), "vip-*"), chromedp.SetValue(chromedp.ID("override-limit"), "1000"))
	b.click("override-submit", "override-rows")

	b.survey([]surveyPage{{"62-console-policies", "/console/policies", "policies"}, {"63-console-policy", "/console/policies/search", "policy-form"},
		{"64-console-policy-delete", "/console/policies/search/delete", "delete-form"},
		{"65-console-override-delete", "/console/policies/search/overrides/delete?pattern=vip-%2A", "override-delete-form"}})
}
