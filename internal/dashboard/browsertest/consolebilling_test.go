package browsertest

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/billing/stripeapi/stripemocktest"
	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestConsoleBillingInChromium surveys the billing page (390 and 1280 px,
// axe-core): a new owner's, with pro for sale, and the same tenant's once
// its pro subscription is unpaid (held to starter, why, the portal's
// button).
func TestConsoleBillingInChromium(t *testing.T) {
	dsn := pgtest.New(t)
	base := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1", "STRIPE_API_KEY=sk_test_browser", "STRIPE_API_BASE="+stripemocktest.URL(t))).URL
	tollgate(t, dsn, "", "plans", "set-price", "pro", "price_browser_pro")
	b := newBrowser(t, base)

	b.open("/console/signup", "signup-form")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "owner@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "new-key-test")
	b.survey([]surveyPage{{"60-console-billing", "/console/billing", "upgrade-pro"}})

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE tenants SET plan = 'pro', billing_status = 'unpaid', stripe_customer_id = 'cus_browser', stripe_subscription_id = 'sub_browser'
		WHERE id = (SELECT tenant_id FROM members WHERE email = 'owner@example.com')`); err != nil {
		t.Fatal(err)
	}
	b.survey([]surveyPage{{"61-console-billing-held", "/console/billing", "why-held"}})
	if n := b.count(`[data-testid="portal"]`); n != 1 {
		t.Fatalf("%d portal buttons on an unpaid owner's page, want 1", n)
	}
}
