package consolesite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/signin"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

// Billing is what the billing page asks of billing.Service: the same
// Checkout and Portal that POST /v1/billing/checkout and /v1/billing/portal
// call. Errors wrap billing's and tenant's sentinels.
type Billing interface {
	Checkout(ctx context.Context, r billing.CheckoutRequest) (string, error)
	Portal(ctx context.Context, tenantID, returnURL string) (string, error)
}

// Plans lists the plan table (tenant.Directory's Plans).
type Plans interface {
	Plans(ctx context.Context) ([]tenant.Plan, error)
}

// registerBilling mounts the billing page and its two owners' forms.
func (s *Site) registerBilling(g *echo.Group) {
	g.GET("/billing", s.page(s.billingPage))
	g.POST("/billing/checkout", s.page(s.checkout))
	g.POST("/billing/portal", s.page(s.portal))
}

// fromBillingLink is the billing page's "from" when a 402 answer's
// billing_url sent the browser there (BillingLanding); its "workspace"
// names the tenant the link was signed for.
const fromBillingLink = "billing-link"

// BillingLanding is where the billing_url of a 402 answer of tenantID
// leads (httpapi.Config.BillingLanding): this tenant's billing page, when
// one of its members can sign in to see it, else "" (a tenant an operator
// made with the CLI, whose link opens the Stripe portal as before). It
// reads the tenant's members, and asks Stripe nothing.
func (s *Site) BillingLanding(ctx context.Context, tenantID string) (string, error) {
	ms, err := s.cfg.Members.Members(ctx, tenantID)
	if err != nil {
		return "", fmt.Errorf("members of tenant %s: %w", tenantID, err)
	}
	for _, m := range ms {
		if m.PasswordHash != "" && m.DisabledAt == nil {
			return "/console/billing?" + url.Values{"from": {fromBillingLink}, "workspace": {tenantID}}.Encode(), nil
		}
	}
	return "", nil
}

// billingPage shows the tenant's plan, billing status, the plan that
// applies and why, its monthly allotment, and for an owner the buttons.
// Reached from a billing link, it says why first; from another
// workspace's link, it shows nothing of either workspace's billing.
func (s *Site) billingPage(c echo.Context, m *member) error {
	var flash string
	switch c.QueryParam("checkout") {
	case "success":
		flash = "Thank you: your plan changes here as soon as Stripe confirms the payment."
	case "canceled":
		flash = "Checkout canceled: nothing was bought."
	}
	fromLink := c.QueryParam("from") == fromBillingLink
	if fromLink && c.QueryParam("workspace") != m.TenantID {
		return s.otherWorkspace(c, m)
	}
	return s.renderBilling(c, m, flash, fromLink)
}

// otherWorkspace answers a member who follows the billing link of a
// workspace other than their own: nothing of that one (the link names
// only its id, which is not looked up), nothing of their own billing to
// pay by mistake, and a sign-out that comes back to the link's page, for
// signing in as a member of the link's workspace.
func (s *Site) otherWorkspace(c echo.Context, m *member) error {
	return render(c, http.StatusForbidden, web.ConsoleOtherWorkspace(web.ConsoleOtherWorkspaceView{
		MemberEmail: m.Email, CSRF: m.csrf, Next: consoleNext(c.Request().URL.RequestURI()),
	}))
}

// renderBilling renders the billing page for m; fromLink says a 402's
// billing link of m's tenant brought them.
func (s *Site) renderBilling(c echo.Context, m *member, flash string, fromLink bool) error {
	ctx := c.Request().Context()
	t, err := s.cfg.Tenants.Tenant(ctx, m.TenantID)
	if err != nil {
		return s.fail(c, err)
	}
	var plans []tenant.Plan
	if s.cfg.Plans != nil {
		if plans, err = s.cfg.Plans.Plans(ctx); err != nil {
			return s.fail(c, err)
		}
	}
	v := billingView(t, plans)
	v.Chrome = web.ConsoleChrome{Title: "Billing", Section: "billing", MemberEmail: m.Email, TenantName: t.Name, CSRF: m.csrf, Flash: flash}
	v.Owner = m.Role == console.RoleOwner
	v.Configured = s.cfg.Billing != nil
	v.FromLink = fromLink
	if v.Owner && v.Configured {
		// Its Upgrade and portal forms' answers send the browser to Stripe.
		signin.FormsLeadToHTTPS(c.Response().Header())
	}
	return render(c, http.StatusOK, web.ConsoleBilling(v))
}

// billingView is what the page says of t, whose plans are plans.
func billingView(t tenant.Tenant, plans []tenant.Plan) web.ConsoleBillingView {
	eff := tenant.EffectivePlanName(t.Plan, t.BillingStatus)
	v := web.ConsoleBillingView{
		Plan: t.Plan, Status: t.BillingStatus, EffectivePlan: eff, Held: tenant.HeldToStarter(t),
		StatusClass: statusClass(t.BillingStatus), Why: why(t, eff), Allotment: "—",
		HasCustomer: t.StripeCustomerID != "",
		Subscribed:  t.StripeSubscriptionID != "" && !subscriptionEnded(t.BillingStatus),
	}
	var current *int64
	for _, p := range plans {
		if p.Name == eff {
			current = p.MonthlyChecks
			v.Allotment = allotment(p.MonthlyChecks)
		}
	}
	for _, p := range plans {
		if p.Purchasable && p.StripePriceID != "" && !v.Subscribed && larger(p.MonthlyChecks, current) {
			v.Upgrades = append(v.Upgrades, web.ConsoleUpgrade{Plan: p.Name, Allotment: allotment(p.MonthlyChecks)})
		}
	}
	return v
}

// larger reports whether the monthly allotment a beats b (nil is
// unlimited): the plans offered are upgrades of the one that applies, so
// that a tenant held to starter is offered its plan again and one on an
// unlimited plan nothing.
func larger(a, b *int64) bool {
	switch {
	case b == nil:
		return false
	case a == nil:
		return true
	}
	return *a > *b
}

// why says in words why the effective plan applies, as
// tenant.EffectivePlanName decides it.
func why(t tenant.Tenant, eff string) string {
	switch {
	case tenant.HeldToStarter(t):
		return fmt.Sprintf("Your %s subscription is %s: until it is paid, the starter plan's limits apply, and live checks beyond its monthly allotment are refused with 402 Payment Required. Fix the card to get %s back.", t.Plan, t.BillingStatus, tenant.EffectivePlanName(t.Plan, tenant.StatusActive))
	case t.BillingStatus == tenant.StatusPastDue:
		return fmt.Sprintf("A payment failed and Stripe is retrying it: you keep the %s plan meanwhile. Update your card before the retries run out, or you are held to starter.", eff)
	case t.Plan == tenant.PlanStarter:
		return "Starter is the free plan. Upgrade for a larger monthly allotment."
	case t.Plan == tenant.PlanGrowth:
		return "Paid. Growth is the former name of pro: the pro plan's limits apply."
	}
	return fmt.Sprintf("Paid: the %s plan's limits apply.", eff)
}

// subscriptionEnded mirrors billing's rule: Stripe never moves a canceled
// or incomplete_expired subscription again, so its tenant may buy anew.
func subscriptionEnded(status string) bool {
	return status == tenant.StatusCanceled || status == tenant.StatusIncompleteExpired
}

// statusClass colours a billing status as the dashboard does.
func statusClass(status string) string {
	switch status {
	case tenant.StatusActive, tenant.StatusTrialing, "":
		return "b-good"
	case tenant.StatusPastDue:
		return "b-warn"
	}
	return "b-bad"
}

// allotment writes a monthly allotment; nil is unlimited.
func allotment(n *int64) string {
	if n == nil {
		return "unlimited"
	}
	return web.Count(*n)
}

// checkout starts Stripe Checkout for the posted plan and sends the owner
// there; Checkout brings them back to this page.
func (s *Site) checkout(c echo.Context, m *member) error {
	if m.Role != console.RoleOwner {
		return s.ownersOnly(c)
	}
	if s.cfg.Billing == nil {
		return s.billingError(c, billing.ErrNotConfigured)
	}
	plan := c.Request().PostFormValue("plan")
	if plan == "" || len(plan) > 100 {
		return s.message(c, http.StatusBadRequest, web.ConsoleMessageView{Title: "No plan", Message: "Choose a plan with its Upgrade button.", Link: "/console/billing", LinkLabel: "Billing"})
	}
	back := s.baseURL(c) + "/console/billing?checkout="
	u, err := s.cfg.Billing.Checkout(c.Request().Context(), billing.CheckoutRequest{
		TenantID: m.TenantID, Plan: plan, SuccessURL: back + "success", CancelURL: back + "canceled",
	})
	if err != nil {
		return s.billingError(c, err)
	}
	return stripeRedirect(c, u)
}

// portal opens a Stripe Customer Portal session and sends the owner there.
func (s *Site) portal(c echo.Context, m *member) error {
	if m.Role != console.RoleOwner {
		return s.ownersOnly(c)
	}
	if s.cfg.Billing == nil {
		return s.billingError(c, billing.ErrNotConfigured)
	}
	u, err := s.cfg.Billing.Portal(c.Request().Context(), m.TenantID, s.baseURL(c)+"/console/billing")
	if err != nil {
		return s.billingError(c, err)
	}
	return stripeRedirect(c, u)
}

// stripeRedirect sends the browser to a Stripe session's URL (303), which
// no cache keeps.
func stripeRedirect(c echo.Context, u string) error {
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.Redirect(http.StatusSeeOther, u)
}

// baseURL is where Stripe sends the browser back: the public URL, else the
// address this request came to.
func (s *Site) baseURL(c echo.Context) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	return c.Scheme() + "://" + c.Request().Host
}

// ownersOnly is the answer to a developer who posts a billing form.
func (s *Site) ownersOnly(c echo.Context) error {
	return s.message(c, http.StatusForbidden, web.ConsoleMessageView{Title: "Owners only",
		Message: "Only an owner of this workspace buys plans and manages the card and invoices.", Link: "/console/billing", LinkLabel: "Billing"})
}

// billingError answers a failed Checkout or portal: the client's mistake
// or Stripe's state in words, anything else a 500.
func (s *Site) billingError(c echo.Context, err error) error {
	back := web.ConsoleMessageView{Link: "/console/billing", LinkLabel: "Billing"}
	var fe *tenant.FieldError
	switch {
	case errors.As(err, &fe):
		back.Title, back.Message = "Not possible", sentence(fe.Field+": "+fe.Reason)
		return s.message(c, http.StatusBadRequest, back)
	case errors.Is(err, billing.ErrNotConfigured):
		back.Title, back.Message = "Billing is not set up", "This Tollgate takes no payments yet: its operator sets STRIPE_API_KEY."
		return s.message(c, http.StatusServiceUnavailable, back)
	case errors.Is(err, billing.ErrNoCustomer):
		back.Title, back.Message = "No billing account yet", "There is no card or invoice to manage before a first purchase: choose Upgrade on the billing page."
		return s.message(c, http.StatusConflict, back)
	case errors.Is(err, billing.ErrProvider):
		s.log.ErrorContext(c.Request().Context(), "console billing: Stripe failed", "err", err)
		back.Title, back.Message = "Stripe did not answer", "The payment provider could not open the page. Try again in a moment."
		return s.message(c, http.StatusBadGateway, back)
	}
	return s.fail(c, err)
}

// sentence makes s a sentence: a capital first letter, a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}
