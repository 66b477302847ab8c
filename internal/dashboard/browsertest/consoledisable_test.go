package browsertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleDisabledInChromium: what a member of a workspace the operator
// disabled sees, at 390 and 1280 px: the page that ends an open session
// (it says the workspace is disabled and the member signed out), and the
// sign-in form's refusal. Neither is wider than the window, axe-core finds
// nothing, screenshots console-disabled-*.png.
func TestConsoleDisabledInChromium(t *testing.T) {
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
	var tenantID string
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRow(context.Background(), `SELECT tenant_id::text FROM members WHERE email = 'dev@example.com'`).Scan(&tenantID)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	check := func(what string, w int64) {
		t.Helper()
		fit, err := chromedp.Run(b.ctx, chromedp.Evaluate[[2]int64](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
		if err != nil {
			t.Fatal(err)
		}
		if fit[0] > fit[1] {
			t.Errorf("%s at %d px: %d px wide in %d%s", what, w, fit[0], fit[1], b.widest(fit[1]))
		}
		for _, v := range b.axe() {
			t.Errorf("%s at %d px: axe-core %s (%s): %s, at %s", what, w, v.ID, v.Impact, v.Help, strings.Join(v.Targets, "; "))
		}
	}
	for i, w := range widths {
		b.do(fmt.Sprintf("viewport %d px", w), chromedp.EmulateViewport(w, 900))
		if i > 0 {
			// Signed out by the previous round: in again, while enabled.
			b.open("/console/login", "console-login-form")
			b.do("fill the sign-in form", chromedp.SetValue(chromedp.ID("email"), "dev@example.com"), chromedp.SetValue(chromedp.ID("password"), password))
			b.click("console-sign-in", "snippet-curl")
		}
		tollgate(t, dsn, "", "tenants", "disable", tenantID, "--reason", "abuse report")
		b.open("/console", "message-title")
		if got := b.text("message-title"); got != "This workspace is disabled" || !strings.Contains(b.text("message-text"), "you are signed out") {
			t.Errorf("the open session's page: %q, %q", got, b.text("message-text"))
		}
		check("the signed-out page", w)
		b.screenshot(fmt.Sprintf("console-disabled-session-%d", w))

		b.open("/console/login", "console-login-form")
		b.do("fill the sign-in form", chromedp.SetValue(chromedp.ID("email"), "dev@example.com"), chromedp.SetValue(chromedp.ID("password"), password))
		b.click("console-sign-in", "console-error")
		if got := b.text("console-error"); !strings.Contains(got, "This workspace is disabled by the operator") {
			t.Errorf("the sign-in refusal: %q", got)
		}
		check("the sign-in refusal", w)
		b.screenshot(fmt.Sprintf("console-disabled-signin-%d", w))
		tollgate(t, dsn, "", "tenants", "enable", tenantID)
	}
}
