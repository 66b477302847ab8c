// Package tenant holds Tollgate's tenants, their API keys and plans, the
// rules that turn a purchased plan and a billing status into the plan that
// applies (the effective plan), and the Directory that answers who a key
// belongs to from memory (package cache) and writes the keys' last use
// behind the requests (package writebehind). It imports no driver: pgstore
// implements the Store it declares.
package tenant

import (
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Sentinels; adapters translate their own errors into these.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("already exists")
	// ErrInvalid is bad input; errors that wrap it are *FieldError and say
	// what is wrong in words a client may read.
	ErrInvalid = errors.New("invalid")
	// ErrUnauthorized is a missing, malformed, unknown, revoked or expired
	// API key. It says no more than that, to anyone, except that an
	// *ExpiredKeyError (whole key presented, past its expiry) says so.
	ErrUnauthorized = errors.New("invalid API key")
	// ErrTestKey is a change asked for with a test key. Test keys live in
	// the sandbox: their checks count on counters of their own, and they
	// may read the tenant's configuration but not change its policies,
	// overrides, billing or keys, so that a key handed to a test
	// environment can never alter what live traffic is answered.
	ErrTestKey = errors.New("test keys may read but not change the tenant's configuration: use a live key")
	// ErrDisabled is a valid key of a tenant an operator disabled
	// (Tenant.DisabledAt). Directory.Authenticate answers it only once the
	// key is proven valid, so that it tells nothing to whoever does not hold
	// one; every key of the tenant gets it until the tenant is enabled.
	ErrDisabled = errors.New("this workspace is disabled by the operator")
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
	// DisabledAt, when set, is when an operator disabled the tenant: its
	// keys are refused (ErrDisabled) and its console members kept out until
	// it is enabled again; nothing of it is deleted. DisabledReason is the
	// operator's note, for operators only ("" when none was given).
	DisabledAt     *time.Time
	DisabledReason string
}

// Disabled reports whether an operator disabled the tenant.
func (t Tenant) Disabled() bool { return t.DisabledAt != nil }

// MaxDisabledReasonLen is the longest reason an operator may give for
// disabling a tenant, in characters.
const MaxDisabledReasonLen = 200

// ValidateDisabledReason returns a *FieldError unless reason is empty or a
// text of at most MaxDisabledReasonLen characters as ValidateName wants.
func ValidateDisabledReason(reason string) error {
	if reason == "" {
		return nil
	}
	return validateText("reason", reason, MaxDisabledReasonLen)
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

// FieldError is input that Tollgate refuses: Field names it and Reason says
// why, in words safe to show to whoever sent it. It unwraps to ErrInvalid.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ClientFault returns the field at fault and the reason, the words meant
// for whoever sent the input (the one client-safe error shape: httpapi
// shows them).
func (e *FieldError) ClientFault() (field, reason string) { return e.Field, e.Reason }

// MaxNameLen is the longest tenant name, in characters.
const MaxNameLen = 200

// ValidateName returns a *FieldError unless name is a tenant name: 1 to
// MaxNameLen characters of valid UTF-8, not only spaces, no control
// characters.
func ValidateName(name string) error {
	return validateText("name", name, MaxNameLen)
}

// validateText is ValidateName for field, of at most maxLen characters.
func validateText(field, s string, maxLen int) error {
	n := utf8.RuneCountInString(s)
	switch {
	case !utf8.ValidString(s):
		return &FieldError{field, "must be valid UTF-8"}
	case n == 0 || n > maxLen:
		return &FieldError{field, fmt.Sprintf("must be 1 to %d characters", maxLen)}
	}
	blank := true
	for _, r := range s {
		if unicode.IsControl(r) {
			return &FieldError{field, "must not contain control characters"}
		}
		blank = blank && unicode.IsSpace(r)
	}
	if blank {
		return &FieldError{field, "must not be blank"}
	}
	return nil
}

// TenantLimits are a tenant's own limits, which win over its plan's.
type TenantLimits struct {
	// RateLimitPerMinute is the per-IP limit of the tenant's callers; 0 means
	// the effective plan's.
	RateLimitPerMinute int64
	// QuotaPerMinute and QuotaPerHour are the tenant quota; nil means the
	// effective plan's.
	QuotaPerMinute *int64
	QuotaPerHour   *int64
}

// Validate returns a *FieldError unless every limit is positive (or zero for
// RateLimitPerMinute, or nil for the quotas).
func (l TenantLimits) Validate() error {
	if l.RateLimitPerMinute < 0 {
		return &FieldError{"rate_limit_per_minute", "must be 0 (the plan's) or positive"}
	}
	if err := positive("quota_per_minute", l.QuotaPerMinute); err != nil {
		return err
	}
	return positive("quota_per_hour", l.QuotaPerHour)
}

// PlanLimits is a change to a plan's limits: a nil field is left as it is.
type PlanLimits struct {
	IPPerMinute    *int64
	QuotaPerMinute *int64
	QuotaPerHour   *int64
	MonthlyChecks  *int64
	// Unlimited removes the monthly cap; it excludes MonthlyChecks.
	Unlimited bool
}

// Validate returns a *FieldError unless every limit given is positive and
// MonthlyChecks and Unlimited are not both set.
func (l PlanLimits) Validate() error {
	if l.Unlimited && l.MonthlyChecks != nil {
		return &FieldError{"monthly_checks", "is either a number or unlimited"}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"ip_per_minute", l.IPPerMinute},
		{"quota_per_minute", l.QuotaPerMinute},
		{"quota_per_hour", l.QuotaPerHour},
		{"monthly_checks", l.MonthlyChecks},
	} {
		if err := positive(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

func positive(field string, v *int64) error {
	if v != nil && *v <= 0 {
		return &FieldError{field, "must be positive"}
	}
	return nil
}

// ValidatePriceID returns a *FieldError unless id looks like a Stripe price
// ID: 1 to 255 printable ASCII characters without spaces.
func ValidatePriceID(id string) error {
	if id == "" || len(id) > 255 {
		return &FieldError{"stripe_price_id", "must be 1 to 255 characters"}
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return &FieldError{"stripe_price_id", "must be printable ASCII without spaces"}
		}
	}
	return nil
}
