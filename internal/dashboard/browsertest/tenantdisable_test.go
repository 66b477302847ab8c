package browsertest

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestTenantDisableInChromium: an operator disables a workspace the way a
// person does, without script: the tenant page's "Disable workspace…" link,
// the confirmation page of its own with the reason field, its button; the
// API then refuses the tenant's key with 403; the tenant page says so and
// enables it again. The tenant page (both states), the confirmation page
// and the tenants list are surveyed at 390 and 1280 px: no sideways
// scrolling, axe-core clean, screenshots tenant-disable-*.png.
func TestTenantDisableInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	tollgate(t, dsn, password+"\n", "admins", "create", "--email", "ops@example.com")
	acme := createTenant(t, dsn, "Acme Rockets", "pro")
	createTenant(t, dsn, "Globex", "starter")
	base := serve(t, dsn)
	usage := func() int {
		t.Helper()
		return api(t, http.MethodGet, base+"/v1/usage", acme.LiveKey, apiIP, "").StatusCode
	}
	tp := "/admin/tenants/" + acme.TenantID

	b := newBrowser(t, base)
	b.open("/admin", "login-form")
	b.signIn("ops@example.com", password)
	b.survey([]surveyPage{
		{"tenant-disable-page", tp, "disable-tenant"},
		{"tenant-disable-confirm", tp + "/disable", "confirm-field"},
	})

	b.open(tp, "disable-tenant")
	b.click("disable-tenant", "confirm-field")
	b.do("type the reason", chromedp.SetValue(tid("confirm-field"), "chargeback under review"))
	b.click("confirm", "enable-tenant")
	if got := b.text("tenant-disabled-reason"); got != "Reason: chargeback under review" {
		t.Errorf("the reason on the page: %q", got)
	}
	if s := usage(); s != http.StatusForbidden {
		t.Errorf("Acme's key once disabled: %d, want 403", s)
	}
	b.survey([]surveyPage{
		{"tenant-disabled-page", tp, "enable-tenant"},
		{"tenant-disabled-list", "/admin/tenants", "tenant-disabled"},
	})

	b.open(tp, "enable-tenant")
	b.click("enable-tenant", "disable-tenant")
	if s := usage(); s != http.StatusOK {
		t.Errorf("Acme's key once enabled: %d, want 200", s)
	}
}
