// Package usage meters what the admission pipeline decided. Its Recorder is a
// admission.Observer that counts requests in memory per tenant, UTC minute, mode
// (live or test key), route kind (a /v1/check call or another route) and
// outcome, and writes the counts to a Store in one statement every half
// second, so that metering costs the request path one map increment and the
// database two statements a second per instance, whatever the traffic, and
// an instance killed without warning loses at most about its last second of
// counts (see Recorder). It answers
// the usage report of a tenant: live checks this calendar month, sandbox
// checks in the last 30 days, refusals by layer, and alerts.
//
// What counts as a check: a /v1/check call or a lease acquire (POST
// /v1/leases; Event.Checked) that passed the service's own ceilings,
// whatever the tenant's policies answered (outcome
// "allowed" or "policy"; a refusal by the tenant's own policy is an answer,
// and the counter store keeps the allotment's count for it). Refusals by a
// ceiling (instance, ip, quota, allotment, sandbox) and calls of any other
// route are recorded too, in their own rows (usage_minutes.checked false for
// other routes), so that refusals by layer cover every route, but they never
// count toward an allotment.
//
// usage imports admission (the Event it observes) and alert (the alerts it
// reports), never audit, which raises them; it imports no driver: pgstore
// implements its Store.
package usage

import (
	"context"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
)

// Defaults of Config.
const (
	// DefaultFlushEvery is half a second so that a crash loses at most
	// about the last second of counts: one period's, and those of the time
	// the flush under way takes to reach the database, which a busy
	// machine stretches.
	DefaultFlushEvery   = 500 * time.Millisecond
	DefaultFlushTimeout = 5 * time.Second
	// DefaultMaxPending bounds the distinct (tenant, minute, live, checked,
	// outcome) rows held in memory: about 100 MB at worst, hours of traffic
	// of thousands of tenants while the database is down.
	DefaultMaxPending = 1_000_000
	// DefaultAlertWindow is how far back the report lists alerts.
	DefaultAlertWindow = 7 * 24 * time.Hour
	// flushRetention is how long the Store remembers applied flush ids: far
	// longer than any flush waits to be sent again.
	flushRetention = 24 * time.Hour
	// pruneEvery is how often Run prunes flush ids.
	pruneEvery = 10 * time.Minute
	// SandboxWindow is the rolling period of the sandbox allotment.
	SandboxWindow = 30 * 24 * time.Hour
	// maxAlerts bounds the alerts in a report.
	maxAlerts = 100
)

// Row is one row of counts: requests of one tenant in one UTC minute with one
// mode, route kind and outcome.
type Row struct {
	TenantID string
	// Minute is the start of the minute, in UTC.
	Minute  time.Time
	Live    bool
	Checked bool
	// Outcome is admission.OutcomeAllowed or the layer that refused.
	Outcome string
	Count   int64
}

// Total is a sum of counts over a range of minutes.
type Total struct {
	Live    bool
	Checked bool
	Outcome string
	Count   int64
}

// Store keeps the counts. Implementations are safe for concurrent use.
type Store interface {
	// AddUsage adds rows to the stored counts, all or none, in one
	// statement, once per flushID (a UUID): a call with the id of a flush
	// applied before adds nothing, so that a flush whose fate an error left
	// unknown can be sent again. Rows name each (tenant, minute, live,
	// checked, outcome) at most once; rows of tenants that do not exist are
	// dropped.
	AddUsage(ctx context.Context, flushID string, rows []Row) error
	// FlushApplied reports whether the flush flushID was applied.
	FlushApplied(ctx context.Context, flushID string) (bool, error)
	// PruneFlushes forgets the ids of flushes applied before before.
	PruneFlushes(ctx context.Context, before time.Time) error
	// UsageTotals sums a tenant's counts over the minutes in [from, until),
	// one Total per (live, checked, outcome). An unknown tenant has none.
	UsageTotals(ctx context.Context, tenantID string, from, until time.Time) ([]Total, error)
}

// AlertLister lists a tenant's alerts whose last refusal is at or after
// since, latest first, at most limit of them. *audit.Recorder satisfies it.
type AlertLister interface {
	Alerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]alert.Alert, error)
}

// Config configures a Recorder.
type Config struct {
	// Store keeps the counts; required.
	Store Store
	// Alerts lists the alerts the report shows; nil shows none.
	Alerts AlertLister
	// Logger receives flush failures and dropped counts; nil discards.
	Logger *slog.Logger
	// FlushEvery is the period of Run's flushes: a crash loses the counts
	// of about one period and of the flush under way. Zero means
	// DefaultFlushEvery.
	FlushEvery time.Duration
	// FlushTimeout bounds each flush; zero means DefaultFlushTimeout.
	FlushTimeout time.Duration
	// MaxPending bounds the rows held in memory; beyond it the oldest
	// minutes are dropped (and logged). Zero means DefaultMaxPending.
	MaxPending int
	// AlertWindow is how far back the report lists alerts; zero means
	// DefaultAlertWindow.
	AlertWindow time.Duration
	// Now is the clock for events without At; nil means time.Now.
	Now func() time.Time
}

// CountsAsCheck reports whether a /v1/check call with this outcome counts
// toward the monthly or sandbox allotment: it does once it has passed the
// service's ceilings, whether the tenant's policies allowed it or not.
func CountsAsCheck(outcome string) bool {
	return outcome == admission.OutcomeAllowed || outcome == admission.LayerPolicy
}
