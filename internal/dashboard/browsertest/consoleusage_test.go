package browsertest

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleUsageInChromium sends allowed and refused checks of two
// policies and a budget's reservation with a console member's live key,
// waits for the usage page to count them (per policy too), and
// surveys it at a phone's and a laptop's width: no sideways scrolling, no
// axe-core violation, screenshots.
func TestConsoleUsageInChromium(t *testing.T) {
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
	live := strings.TrimSpace(b.text("new-key-live"))
	if !strings.HasPrefix(live, "tg_live_") {
		t.Fatalf("the live key: %q", live)
	}

	if r := api(t, http.MethodPut, base+"/v1/policies/search", live, "198.51.100.20", `{"limit":6,"window":"1h"}`); r.StatusCode/100 != 2 {
		t.Fatalf("a policy: %d", r.StatusCode)
	}
	for range 10 {
		check(t, base, live, "198.51.100.20", "search", "user-1")
	}
	// A second policy, for the charts per policy: 4 checks, 2 refused.
	if r := api(t, http.MethodPut, base+"/v1/policies/login", live, "198.51.100.20", `{"limit":2,"window":"1h"}`); r.StatusCode/100 != 2 {
		t.Fatalf("a second policy: %d", r.StatusCode)
	}
	for range 4 {
		check(t, base, live, "198.51.100.20", "login", "user-1")
	}
	if r := api(t, http.MethodPut, base+"/v1/policies/llm-tokens", live, "198.51.100.20", `{"limit":1000000,"window":"720h","unit":"tokens","scope":"global"}`); r.StatusCode/100 != 2 {
		t.Fatalf("a budget policy: %d", r.StatusCode)
	}
	if r := api(t, http.MethodPost, base+"/v1/reservations", live, "198.51.100.20", `{"policy":"llm-tokens","amount":250000}`); r.StatusCode/100 != 2 {
		t.Fatalf("a reservation: %d", r.StatusCode)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.open("/console/usage", "usage-month")
		body, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid=policy-usage-row]')].map(r => r.dataset.policy + " " + r.querySelector('[data-testid=policy-checks-24h]').textContent + " " + r.querySelector('[data-testid=policy-refusals-24h]').textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(body, "15 checks in the last 24 hours, 6 refused") && slices.Equal(rows, []string{"search 10 4", "login 4 2"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the usage page never counted the checks (policy rows %q): %.2000s", rows, body)
		}
		time.Sleep(300 * time.Millisecond)
	}
	b.survey([]surveyPage{{"60-console-usage", "/console/usage", "usage-month"}})
}
