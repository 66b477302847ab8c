package web

import "github.com/a-h/templ"

// The view models of the operators' dashboard (/admin). Handlers in
// internal/dashboard fill them with display-ready strings: the components
// format nothing but what Chart and HBars draw.

// Chrome is what every signed-in page shares: title, navigation, the
// signed-in admin and the sign-out form.
type Chrome struct {
	Title string
	// Section is the navigation entry to mark current: overview, tenants,
	// webhooks (Stripe events), plans, admins or audit.
	Section    string
	AdminEmail string
	// CSRF is the session's form token, put in every form that posts.
	CSRF string
	// Flash is a one-line confirmation of what the last action did.
	Flash string
	// RefreshSeconds, when positive, reloads the page that often, without
	// JavaScript: only when the operator asked for it (the overview's
	// refresh link), never by default.
	RefreshSeconds int
}

// NavItem is one entry of the navigation.
type NavItem struct {
	Section, Label, Href string
}

// Nav is the dashboard's navigation, in order.
var Nav = []NavItem{
	{"overview", "Overview", "/admin"},
	{"tenants", "Tenants", "/admin/tenants"},
	// The events Stripe sends Tollgate; the tenants' own webhook endpoints,
	// which Tollgate calls, are on each tenant's page.
	{"webhooks", "Stripe events", "/admin/webhooks"},
	{"plans", "Plans", "/admin/plans"},
	{"admins", "Admins", "/admin/admins"},
	{"audit", "Audit log", "/admin/audit"},
}

// LoginView is the sign-in page.
type LoginView struct {
	Email string
	// Error says why the last attempt failed; RetryAfter, when set, says
	// when to try again after a refusal by the sign-in limiter.
	Error      string
	RetryAfter string
	// Notice is a neutral message, such as "You are signed out."
	Notice string
	CSRF   string
	// Next is where to go once signed in (a dashboard path).
	Next string
}

// ErrorView is a page that says what went wrong and where to go next.
type ErrorView struct {
	Chrome
	Status  int
	Message string
}

// OutcomeTotal is the count of one outcome over a range.
type OutcomeTotal struct {
	Outcome string
	Label   string
	Class   string
	Count   string
	Share   string
}

// TopTenant is a line of a top-tenants list.
type TopTenant struct {
	Name, Href       string
	Checks, Refusals string
}

// DegradedPeriod is a run of minutes answered without the shared counter
// store.
type DegradedPeriod struct {
	From, To string
	Minutes  string
	Answers  string
}

// OverviewView is the overview page.
type OverviewView struct {
	Chrome
	Now        string
	Hour, Day  Chart
	HourTotals []OutcomeTotal
	DayTotals  []OutcomeTotal
	Refusals   HBars
	Degraded   []DegradedPeriod
	TopChecks  []TopTenant
	TopRefused []TopTenant
	// NoTraffic says what to do when there is nothing to show yet.
	NoTraffic string
	// RefreshEvery is the period, in seconds, the refresh link offers;
	// Chrome.RefreshSeconds says whether the page is refreshing.
	RefreshEvery int
}

// TenantListRow is one tenant in the tenant list.
type TenantListRow struct {
	ID, Name, Href string
	Plan           string
	EffectivePlan  string
	// Held is set when the effective plan is not the purchased one.
	Held bool
	// Disabled is set when an operator disabled the tenant: the list says
	// so next to its name.
	Disabled      bool
	BillingStatus string
	StatusClass   string
	Usage         UsageBar
}

// UsageBar is this month's checks against the allotment, drawn as a bar.
type UsageBar struct {
	Used      string
	Allotment string // empty: unlimited
	// Percent is the share used, 0 to 100 (capped) for the bar's width.
	Percent float64
	// Label says it in words: "1,234 of 100,000 (1.2%)".
	Label string
	Over  bool
}

// BarWidth is the bar's filled width in its 160-unit frame.
func (u UsageBar) BarWidth() string { return num(u.Percent / 100 * 160) }

// TenantsView is the tenant list.
type TenantsView struct {
	Chrome
	Query string
	Rows  []TenantListRow
	Total string
	// Page and Pages are 1-based; PrevHref and NextHref are empty at the
	// ends.
	Page, Pages        int
	PageLabel          string
	PrevHref, NextHref string
	// Empty says what to do when no tenant matches.
	Empty string
	// NewTenant creates a tenant.
	NewTenant TenantForm
}

// TenantForm creates a tenant with its first keys, as `tollgate tenants
// create` does: the name and plan as typed, the plans to choose from, and
// what was wrong with them.
type TenantForm struct {
	Action string
	Name   string
	Plans  []Option
	// Error says why no tenant was created; ErrorField names the field at
	// fault ("name" or "plan"). Open shows the form unfolded.
	Error, ErrorField string
	Open              bool
}

// CreatedKeys are a new tenant's first keys, shown on its page once, never
// again.
type CreatedKeys struct {
	Live, Test string
}

// KeyRow is an API key of a tenant.
type KeyRow struct {
	ID, Display, Mode string
	// Name says what the key is for; empty when it has none.
	Name              string
	Created, LastUsed string
	Revoked           string
	// Expires is when the key stops working, empty for never; Expired
	// says it has.
	Expires string
	Expired bool
	Active  bool
	// RevokeAction is the page that asks before revoking the key (GET),
	// whose button posts to the same address.
	RevokeAction string
}

// EndpointRow is one of a tenant's outbound webhook endpoints.
type EndpointRow struct {
	ID, URL, Events string
	Enabled         bool
	// State says enabled, failing since when, or why it was disabled.
	State                       string
	DisableAction, EnableAction string
}

// MemberRow is one console member of a tenant, on its page.
type MemberRow struct {
	ID, Email, Role, Since string
	// State says active, invited, email not confirmed, or disabled since.
	State                       string
	Disabled                    bool
	DisableAction, EnableAction string
}

// NewKey is a key just created: shown on this page once, never again.
type NewKey struct {
	ID, Raw, Mode string
	// Name is the key's name, empty when it has none; Expires when it
	// stops working, "never" when it does not.
	Name, Expires string
}

// KeyForm creates a key of the tenant: its mode, name and expiry (as
// `tollgate keys create` takes --expires) as typed, and what was wrong with
// them.
type KeyForm struct {
	Action                string
	Mode, Name, ExpiresAt string
	// Error says why no key was created; ErrorField names the field at
	// fault ("name" or "expires_at").
	Error, ErrorField string
}

// LimitsForm is the form of a tenant's own limits: empty fields mean the
// effective plan's.
type LimitsForm struct {
	Action             string
	RateLimitPerMinute string
	QuotaPerMinute     string
	QuotaPerHour       string
	// Plan* are the effective plan's values, shown as what an empty field
	// means.
	PlanIPPerMinute    string
	PlanQuotaPerMinute string
	PlanQuotaPerHour   string
	// Error says why the form was not saved; ErrorField names the field
	// at fault.
	Error, ErrorField string
	// LastChange says who changed the limits last and when.
	LastChange string
}

// PolicyRow is one of a tenant's policies with its overrides.
type PolicyRow struct {
	Name, Limit, Window, Algorithm, Scope, FailMode string
	Shadow                                          bool
	AlertAfter                                      string
	Overrides                                       []OverrideRow
	// Edit replaces the policy. DeleteAction is the page that asks before
	// deleting it and its overrides (GET), whose button posts to the same
	// address.
	Edit         PolicyForm
	DeleteAction string
	// NewOverride adds or replaces an override; nil for a policy of scope
	// global, which has none.
	NewOverride *OverrideForm
	// Concurrency marks a policy of algorithm concurrency: InFlight says
	// its leases in flight (or that the store did not say), and Meter, for
	// scope global, how full it is, from 0 to 1.
	Concurrency bool
	InFlight    string
	Meter       *float64
	// Budget is set for a budget (a policy with a unit): where its current
	// window stands, or why it is not shown.
	Budget *BudgetView
}

// BudgetView is where one budget stands for its current window: Spent,
// Reserved and Left as shown ("120 tokens"), and Meter, how much of it
// is taken (spent and reserved), from 0 to 1. Note replaces the figures
// when there are none to show (a budget per subject, a store that did not
// answer).
type BudgetView struct {
	Spent, Reserved, Left string
	Meter                 float64
	Note                  string
}

// OverrideRow is one override of a policy.
type OverrideRow struct {
	Pattern, Limit, Expires string
	// DeleteAction deletes it (the pattern goes in the form).
	DeleteAction string
}

// PolicyForm creates or replaces a policy: the fields of PUT
// /v1/policies/{name}, as typed, and what was wrong with them.
type PolicyForm struct {
	Action string
	// ID prefixes the form's element ids.
	ID string
	// New marks the form that creates a policy: it asks for the name.
	New                                                         bool
	Name, Limit, Window, Algorithm, Scope, FailMode, AlertAfter string
	// Unit and OnExpiry make the policy a budget of reservations: "" for
	// none and for the default ("settle"), so that a concurrency policy,
	// which takes neither, sends neither.
	Unit, OnExpiry string
	Shadow         bool
	// Error says why the form was not saved; ErrorField names the field at
	// fault ("limit", "window", …), empty when no one field is.
	Error, ErrorField string
	// Open shows the form unfolded (after an error).
	Open bool
}

// OverrideForm adds or replaces an override of a policy.
type OverrideForm struct {
	Action, ID                string
	Pattern, Limit, ExpiresAt string
	Error, ErrorField         string
	Open                      bool
}

// AlertRow is an alert of a tenant.
type AlertRow struct {
	Policy, Subject, Count, AlertAfter, First, Last string
	Shadow                                          bool
	// Aggregate marks the row that counts a day's subjects past the
	// tenant's alert budget; Subject then says how many.
	Aggregate bool
}

// BillingView is a tenant's billing state.
type BillingView struct {
	Plan, EffectivePlan, Status, StatusClass string
	Held                                     bool
	CustomerID, SubscriptionID               string
	// CustomerURL links to the customer in Stripe's dashboard; empty when
	// the tenant has no customer.
	CustomerURL string
	UpdatedAt   string
}

// WebhookRow is one received Stripe event.
type WebhookRow struct {
	ID, Type, Outcome, OutcomeLabel, OutcomeClass string
	Note                                          string
	Tenant, TenantHref                            string
	Customer                                      string
	Received, Created                             string
	Deliveries                                    string
	Replayed                                      bool
	Href                                          string
}

// TenantView is a tenant's page.
type TenantView struct {
	Chrome
	ID, Name, CreatedAt string
	Billing             BillingView
	// Created, set on the page answered to the tenant's creation, shows its
	// first keys.
	Created    *CreatedKeys
	NewKey     *NewKey
	Minutes    Chart
	Month      Chart
	MonthUsage UsageBar
	// PolicyUsage is the checks and refusals per policy.
	PolicyUsage PolicyUsage
	Refusals    HBars
	Keys        []KeyRow
	// KeyForm creates a key; NewKey, above it, is the key it just made.
	KeyForm  KeyForm
	Limits   LimitsForm
	Policies []PolicyRow
	// NewPolicy creates a policy.
	NewPolicy PolicyForm
	// Unlock resets one subject's counter of a policy.
	Unlock UnlockForm
	Alerts []AlertRow
	Events []WebhookRow
	// Endpoints are the tenant's outbound webhook endpoints.
	Endpoints []EndpointRow
	// Members are the tenant's console members; MembersWired says the
	// dashboard can read them.
	Members      []MemberRow
	MembersWired bool
	// EventsNote explains an empty or unavailable event list.
	EventsNote string
	AuditHref  string
	// State is whether the workspace is disabled, and the way to change it.
	State TenantState
}

// TenantState is a tenant's state on its page: active, or disabled by an
// operator (since when, by whose note), with the way to the other state.
type TenantState struct {
	Disabled bool
	// Since and Reason say when the tenant was disabled and why (Reason
	// may be empty).
	Since, Reason string
	// DisableHref is the confirmation page of disabling (a GET);
	// EnableAction is where enabling posts.
	DisableHref, EnableAction string
}

// WebhookDetail is one event with its payload.
type WebhookDetail struct {
	WebhookRow
	Error            string
	Payload          string
	PayloadTruncated bool
	// Link, when set, offers to link the event's unknown customer to a
	// tenant (only for events held as unknown_customer).
	Link *LinkCustomerForm
}

// LinkCustomerForm links a Stripe customer no tenant had to a tenant, which
// applies the customer's held events.
type LinkCustomerForm struct {
	Action   string
	Customer string
	// TenantID is what was typed, shown again with Error when the link was
	// refused.
	TenantID string
	// Error says why the link was refused; ErrorField is "tenant_id" when
	// the tenant ID is at fault.
	Error, ErrorField string
}

// Option is a choice of a select (the webhook outcome filter, the audit kind filter).
type Option struct {
	Value, Label string
	Selected     bool
}

// WebhooksView is the webhook log.
type WebhooksView struct {
	Chrome
	// Unavailable, when set, says why there is no log on this server.
	Unavailable string
	Outcomes    []Option
	Rows        []WebhookRow
	Selected    *WebhookDetail
	NextHref    string
	Empty       string
}

// PlanRow is a plan in the editable plan table.
type PlanRow struct {
	Name, FormID, Action                      string
	IPPerMinute, QuotaPerMinute, QuotaPerHour string
	MonthlyChecks                             string
	Unlimited, Purchasable                    bool
	StripePriceID                             string
	// Error says why the row was not saved; ErrorField names the field at
	// fault.
	Error, ErrorField string
}

// PlansView is the plan table.
type PlansView struct {
	Chrome
	Rows []PlanRow
}

// AuditRow is one audit entry.
type AuditRow struct {
	ID, At, Actor, Kind string
	Tenant, TenantHref  string
	// Detail is the entry's detail, one pair a line.
	Detail []KV
	// Flood, when set, stands for many first refusals past the tenant's
	// budget, in a sentence; Detail is then empty.
	Flood string
}

// KV is one "key: value" line.
type KV struct{ Key, Value string }

// Tab is one of a page's views.
type Tab struct {
	Label, Href, TestID string
	Current             bool
}

// AuditView is the audit log.
type AuditView struct {
	Chrome
	// View is "changes" or "refusals"; Tabs link to both.
	View                     string
	Tabs                     []Tab
	TenantFilter, KindFilter string
	// Kinds are the view's kinds, for the filter.
	Kinds    []Option
	Rows     []AuditRow
	NextHref string
	Empty    string
}

// fieldAttrs marks the input of field as invalid and described by its
// form's error when the error is about that field. (Not autofocus: a
// browser that lands on a fragment, as a form that was not saved does
// (formAction), skips autofocus by the HTML standard.)
func fieldAttrs(errField, field, formID string) templ.Attributes {
	if errField == "" || errField != field {
		return templ.Attributes{}
	}
	return templ.Attributes{"aria-invalid": "true", "aria-describedby": formID + "-error"}
}

// formAction is where a form posts: action, with the id of the element to
// land on as the fragment. A form that was not saved is answered with its
// page again, and the browser, keeping the fragment of the address it
// posted to, scrolls to the form and its error instead of the page's top
// (no script needed). A saved form's redirect names a fragment of its own:
// without one the browser would keep this one.
func formAction(action, landOn string) templ.SafeURL {
	return templ.SafeURL(action + "#" + landOn)
}

// ConfirmView asks before a change that cannot be undone (revoking a key,
// deleting a policy): what it is about, what the change does, a button
// that posts it, and the way back. Opening it changes nothing.
type ConfirmView struct {
	Chrome
	// Crumbs lead back to the page the question came from.
	TenantName, TenantHref string
	// Facts say what the change is about, one pair a line.
	Facts []KV
	// Consequence says what the change does, in a sentence or two.
	Consequence string
	// Action is where the button posts; Button is its label.
	Action, Button string
	// CancelHref is the way back, changing nothing.
	CancelHref string
	// Field, when set, is a text field the form posts with the button (a
	// reason, which may be left empty).
	Field *ConfirmField
}

// ConfirmField is an optional text field of a confirmation page.
type ConfirmField struct {
	// Name is the form's field name; Label and Hint say what it is for.
	Name, Label, Hint string
	MaxLen            int
	// Value is what was typed, shown again with Error when it was refused.
	Value, Error string
}

// errorField names the field for fieldAttrs when it is at fault.
func (f ConfirmField) errorField() string {
	if f.Error == "" {
		return ""
	}
	return "confirm-field"
}

// AdminRow is one admin who may sign in.
type AdminRow struct {
	Email, Created string
	// You marks the signed-in admin.
	You bool
}

// AdminForm adds an admin, as `tollgate admins create` does: the email as
// typed (the passwords are never shown back), and what was wrong.
type AdminForm struct {
	Action string
	Email  string
	// Error says why no admin was added; ErrorField names the field at
	// fault ("email", "password" or "password_again").
	Error, ErrorField string
}

// AdminsView is the list of admins and the form that adds one.
type AdminsView struct {
	Chrome
	Rows     []AdminRow
	NewAdmin AdminForm
}

// UnlockForm resets one subject's counter of one of the tenant's policies
// (its leases, for a concurrency policy), live or the sandbox's: what
// DELETE /v1/policies/{name}/subjects/{subject} does.
type UnlockForm struct {
	Action string
	// Policies are the tenant's policies that count subjects (scope
	// subject), the one typed selected.
	Policies      []Option
	Subject, Mode string
	// Error says why nothing was reset; ErrorField names the field at
	// fault ("policy" or "subject").
	Error, ErrorField string
	// Unavailable, when set, says why there is no form.
	Unavailable string
}
