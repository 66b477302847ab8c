// Package traffic is the service's traffic as its operators read it: the
// checks per minute and day that usage meters, top tenants, the tenant list
// with this month's checks, and the minutes in which the service answered
// without its shared counter store (degraded), which its Recorder, a third
// admission.Observer beside usage's and audit's, meters. It sits beside usage,
// whose minutes it reads; the dashboard draws it. It imports tenant and
// gate, and no driver: pgstore implements its Store and DegradedStore.
package traffic

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

// MinuteCount is the /v1/check calls of one UTC minute with one outcome
// (admission.OutcomeAllowed or the layer that refused).
type MinuteCount struct {
	Minute  time.Time
	Outcome string
	Count   int64
}

// DayOutcome is a tenant's /v1/check calls (live and test) of one UTC day
// with one outcome (admission.OutcomeAllowed or the layer that refused).
type DayOutcome struct {
	Day     time.Time
	Outcome string
	Count   int64
}

// DayCount is a tenant's live checks that count toward its allotment in one
// UTC day.
type DayCount struct {
	Day   time.Time
	Count int64
}

// TenantTraffic is one tenant's traffic over a range: /v1/check calls, and
// refused requests of every route.
type TenantTraffic struct {
	TenantID string
	Name     string
	Checks   int64
	Refusals int64
}

// TenantRow is a tenant as the tenant list shows it.
type TenantRow struct {
	tenant.Tenant
	// MonthChecks counts the live checks of the calendar month that count
	// toward the allotment (usage.CountsAsCheck).
	MonthChecks int64
}

// Search selects a page of the tenant list.
type Search struct {
	// Query matches tenant names (case-insensitive substring) or an exact
	// tenant id; empty matches every tenant.
	Query string
	// MonthStart is the first instant of the month MonthChecks counts.
	MonthStart time.Time
	Offset     int
	Limit      int
}

// Degraded is the answers given without the shared counter store in one
// UTC minute, over every instance.
type Degraded struct {
	Minute  time.Time
	Answers int64
}

// Store answers the dashboard's questions. Every method is safe for
// concurrent use; ranges are of minutes, [from, until).
type Store interface {
	// Traffic returns the /v1/check calls per minute and outcome of one
	// tenant, or of all when tenantID is empty, oldest first.
	Traffic(ctx context.Context, tenantID string, from, until time.Time) ([]MinuteCount, error)
	// DailyChecks returns a tenant's allotment-counted live checks per UTC
	// day, oldest first; days without any are left out.
	DailyChecks(ctx context.Context, tenantID string, from, until time.Time) ([]DayCount, error)
	// DailyTraffic returns a tenant's /v1/check calls per UTC day and
	// outcome, oldest first.
	DailyTraffic(ctx context.Context, tenantID string, from, until time.Time) ([]DayOutcome, error)
	// TopTenants returns at most n tenants with the most /v1/check calls,
	// and at most n with the most refusals (only tenants with some).
	TopTenants(ctx context.Context, from, until time.Time, n int) (byChecks, byRefusals []TenantTraffic, err error)
	// SearchTenants returns a page of the tenants s selects, by name, and
	// how many it selects in all.
	SearchTenants(ctx context.Context, s Search) ([]TenantRow, int, error)
	// DegradedMinutes returns the minutes with degraded answers, oldest
	// first.
	DegradedMinutes(ctx context.Context, from, until time.Time) ([]Degraded, error)
}
