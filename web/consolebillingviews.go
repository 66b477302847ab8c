package web

// The view models of the console's billing page (/console/billing).
// Handlers in internal/consolesite fill them with display-ready strings.

// ConsoleBillingView is the billing page: the tenant's plan, billing status
// and the plan that applies, why, its allotment, and an owner's buttons.
type ConsoleBillingView struct {
	Chrome ConsoleChrome
	// Plan is the plan bought, Status its billing status (StatusClass
	// colours it), EffectivePlan the plan whose limits apply; Held says
	// a paid plan is held to starter. Why says why, in words.
	Plan, Status, StatusClass, EffectivePlan string
	Held                                     bool
	Why                                      string
	// Allotment is the effective plan's live checks a month, written out
	// ("100,000", "unlimited").
	Allotment string
	// Owner shows the buttons (an owner's page); Configured is false
	// without Stripe, and a note replaces them.
	Owner, Configured bool
	// Upgrades are the plans for sale through Checkout with a larger
	// allotment than the one that applies: none while a subscription runs
	// (Subscribed; plan changes go through the portal).
	Upgrades   []ConsoleUpgrade
	Subscribed bool
	// HasCustomer shows the portal's button: Stripe knows the tenant.
	HasCustomer bool
	// FromLink says the billing link of a 402 answer brought the member
	// here: the page says why first.
	FromLink bool
}

// ConsoleOtherWorkspaceView is the page of a member who followed the
// billing link of another workspace: who they are signed in as, the
// sign-out form's token, and Next, the link's page, for the sign-in after.
type ConsoleOtherWorkspaceView struct {
	MemberEmail, CSRF, Next string
}

// ConsoleUpgrade is a plan an owner may buy, with its monthly allotment.
type ConsoleUpgrade struct {
	Plan, Allotment string
}
