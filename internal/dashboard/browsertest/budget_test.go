package browsertest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestBudgetOnTheTenantPage reserves and settles tokens of a monthly
// budget through the API of a running `tollgate serve`, and reads the
// budget on the tenant's page in Chromium: spent, reserved and left, with
// its meter (the picture is budget-tenant.png).
func TestBudgetOnTheTenantPage(t *testing.T) {
	dsn := pgtest.New(t)
	tollgate(t, dsn, password+"\n", "admins", "create", "--email", "ops@example.com")
	acme := createTenant(t, dsn, "Acme Rockets", "pro")
	base := serve(t, dsn)
	for name, body := range map[string]string{
		"llm-tokens": `{"limit":1000000,"window":"720h","unit":"tokens","scope":"global","on_expiry":"release"}`,
		"gpu-cents":  `{"limit":5000,"window":"24h","unit":"cents"}`,
	} {
		if r := api(t, http.MethodPut, base+"/v1/policies/"+name, acme.LiveKey, apiIP, body); r.StatusCode != http.StatusOK {
			t.Fatalf("put policy %s: %d", name, r.StatusCode)
		}
	}
	reserve := func(amount string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/reservations", strings.NewReader(`{"policy":"llm-tokens","amount":`+amount+`}`))
		req.Header.Set("Authorization", "Bearer "+acme.LiveKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", apiIP)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Allowed bool   `json:"allowed"`
			ID      string `json:"reservation_id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || !v.Allowed {
			t.Fatalf("reserve %s: %d, %+v, %v", amount, resp.StatusCode, v, err)
		}
		return v.ID
	}
	first := reserve("400000")
	reserve("250000")
	if r := api(t, http.MethodPost, base+"/v1/reservations/"+first+"/settle", acme.LiveKey, apiIP, `{"used":275000}`); r.StatusCode != http.StatusOK {
		t.Fatalf("settle: %d", r.StatusCode)
	}

	b := newBrowser(t, base)
	b.open("/admin", "login-form")
	b.signIn("ops@example.com", password)
	b.open("/admin/tenants/"+acme.TenantID, "budget-spent")
	for id, want := range map[string]string{
		"budget-spent":    "275,000 tokens spent",
		"budget-reserved": "250,000 tokens reserved",
		"budget-left":     "475,000 tokens left",
	} {
		if got := b.text(id); got != want {
			t.Errorf("%s: %q, want %q", id, got, want)
		}
	}
	if got := b.text("budget-note"); !strings.Contains(got, "per subject") {
		t.Errorf("gpu-cents: %q, want a note that it is per subject", got)
	}
	b.screenshotWith("budget-tenant", chromedp.Screenshot(tid("policies-card")))

	// The budget's form shows its unit and on_expiry, so that a save keeps
	// them.
	b.do("open the llm-tokens form", chromedp.Click(chromedp.CSS(`[data-policy="llm-tokens"] > summary`), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.ID("policy-llm-tokens-unit")))
	unit, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("policy-llm-tokens-unit").value + " " + document.getElementById("policy-llm-tokens-on-expiry").value`))
	if err != nil || unit != "tokens release" {
		t.Fatalf("the budget's form shows unit and on_expiry %q (%v), want tokens release", unit, err)
	}
	b.screenshotWith("budget-tenant-form", chromedp.Screenshot(tid("policy-llm-tokens-form")))
}
