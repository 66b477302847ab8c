// Package tenant holds Tollgate's tenants, their API keys and plans, and the
// rules that turn a purchased plan and a billing status into the plan that
// applies (the effective plan). It imports no driver: pgstore implements the
// Store it declares.
package tenant

import (
	"errors"
	"time"
)

// Sentinels; adapters translate their own errors into these.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("already exists")
	ErrInvalid  = errors.New("invalid")
	// ErrUnauthorized is a missing, malformed, unknown or revoked API key. It
	// says no more than that, to anyone.
	ErrUnauthorized = errors.New("invalid API key")
)

// Billing statuses, as Stripe names subscription statuses.
const (
	StatusActive            = "active"
	StatusTrialing          = "trialing"
	StatusPastDue           = "past_due"
	StatusUnpaid            = "unpaid"
	StatusCanceled          = "canceled"
	StatusIncomplete        = "incomplete"
	StatusIncompleteExpired = "incomplete_expired"
	StatusPaused            = "paused"
)

// Plan names.
const (
	PlanStarter             = "starter"
	PlanPro                 = "pro"
	PlanGrowth              = "growth"
	PlanEnterprise          = "enterprise"
	PlanEnterpriseDedicated = "enterprise_dedicated"
)

// Plan is a row of the plan table: the limits a tenant on it gets.
type Plan struct {
	Name           string
	IPPerMinute    int64
	QuotaPerMinute int64
	QuotaPerHour   int64
	// MonthlyChecks is the live-check allotment per calendar month; nil means
	// unlimited.
	MonthlyChecks *int64
	Purchasable   bool
	StripePriceID string
}

// Tenant is a customer of Tollgate.
type Tenant struct {
	ID            string
	Name          string
	Plan          string
	BillingStatus string
	// RateLimitPerMinute is the per-IP limit for this tenant's callers; 0
	// means the effective plan's.
	RateLimitPerMinute int64
	// QuotaPerMinute and QuotaPerHour override the effective plan's tenant
	// quota when not nil.
	QuotaPerMinute       *int64
	QuotaPerHour         *int64
	StripeCustomerID     string
	StripeSubscriptionID string
	BillingUpdatedAt     *time.Time
	CreatedAt            time.Time
}

// SandboxAllotment is what test keys of one tenant share per rolling 30 days.
const SandboxAllotment = 1000

// DefaultIPPerMinute applies when neither the tenant nor its plan sets one.
const DefaultIPPerMinute = 60

// EffectivePlanName is the plan whose limits apply to a tenant that bought
// plan and whose billing is in status:
//
//   - unpaid, canceled, incomplete, incomplete_expired and paused resolve as
//     starter until the card is fixed (nothing has been paid for);
//   - past_due keeps the purchased tier while Stripe retries;
//   - growth is the legacy name of pro.
//
// enterprise_dedicated is never purchasable but applies when an operator sets
// it.
func EffectivePlanName(plan, status string) string {
	if plan == PlanGrowth {
		plan = PlanPro
	}
	switch status {
	case StatusActive, StatusTrialing, StatusPastDue, "":
		return plan
	}
	return PlanStarter
}

// HeldToStarter reports whether a tenant that bought a paid plan is held to
// starter by its billing status: such a tenant is told to pay (402), not to
// wait (429), when it runs out of the starter allotment.
func HeldToStarter(t Tenant) bool {
	return t.Plan != PlanStarter && EffectivePlanName(t.Plan, t.BillingStatus) == PlanStarter
}
