package billing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/usage"
)

// Meter records usage on Stripe. stripeapi.Client implements it.
type Meter interface {
	// ReportUsage sets the usage of r.ItemID for r.Hour to r.Quantity,
	// under r.IdempotencyKey, so that sending it again never counts twice.
	// An error wraps ErrProvider, and ErrRejected when retrying cannot
	// help.
	ReportUsage(ctx context.Context, r UsageReport) error
}

// UsageReport is one hour of one tenant's live checks.
type UsageReport struct {
	TenantID string
	ItemID   string
	// Hour is the start of the hour, UTC.
	Hour           time.Time
	Quantity       int64
	IdempotencyKey string
}

// UsageHour is an hour due to be reported: the tenant's metered item and its
// billing state now.
type UsageHour struct {
	TenantID string
	ItemID   string
	Plan     string
	Status   string
	// Hour is the start of the hour, UTC.
	Hour time.Time
}

// Usage report outcomes (billing_usage_reports.outcome).
const (
	UsageReported = "reported"
	UsageZero     = "zero"
	UsageSkipped  = "skipped"
	UsageRejected = "rejected"
)

// UsageResult is what became of a UsageHour.
type UsageResult struct {
	// Outcome is one of the Usage* outcomes.
	Outcome        string
	Quantity       int64
	IdempotencyKey string
	Note           string
}

// UsageCursors hands out the hours to report. pgstore.Billing implements it.
type UsageCursors interface {
	// ReportNextHour claims the earliest hour that starts at or before due
	// and is not yet reported, of a tenant with a metered item and not in
	// skip, and calls report with it. When report returns no error, its
	// result is recorded and the tenant moves on to the next hour, in the
	// transaction that holds the claim; when it returns an error, nothing
	// changes. Claims are exclusive: callers on any number of instances
	// never get the same hour, and one that is held is passed over, not
	// waited for. It reports false when no hour is due.
	ReportNextHour(ctx context.Context, due time.Time, skip []string, report func(ctx context.Context, h UsageHour) (UsageResult, error)) (bool, error)
}

// UsageTotals sums a tenant's usage; usage.Store (pgstore.Usage) satisfies
// it.
type UsageTotals interface {
	UsageTotals(ctx context.Context, tenantID string, from, until time.Time) ([]usage.Total, error)
}

// ReporterConfig configures a Reporter. Cursors, Usage and Meter are
// required.
type ReporterConfig struct {
	Cursors UsageCursors
	Usage   UsageTotals
	Meter   Meter
	Logger  *slog.Logger // nil discards
	// Every is the period of Run's passes (default 5 min): an hour is
	// reported within Every of being due.
	Every time.Duration
	// Grace is how long after an hour ends it is reported (default 2 min),
	// so that every instance has flushed its counts of it.
	Grace time.Duration
	// CallTimeout bounds each Stripe call (default 30 s).
	CallTimeout time.Duration
	Now         func() time.Time // default time.Now
}

// Reporter reports each paid tenant's live checks, hour by hour, to the
// metered item of its subscription: once per tenant and hour, whatever the
// number of instances running one, each hour under the idempotency key
// UsageKey. Hours of a tenant held to starter are not billed.
type Reporter struct {
	cfg ReporterConfig
	log *slog.Logger
}

// NewReporter returns a Reporter.
func NewReporter(cfg ReporterConfig) *Reporter {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Minute
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * time.Minute
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reporter{cfg: cfg, log: cfg.Logger}
}

// UsageKey is the idempotency key of a tenant's usage in an hour: one per
// tenant, billing period (the calendar month, UTC) and hour.
func UsageKey(tenantID string, hour time.Time) string {
	h := hour.UTC()
	return fmt.Sprintf("tollgate-usage/%s/%s/%s", tenantID, h.Format("2006-01"), h.Format("02T15Z"))
}

// Run reports what is due, then again every Every, until ctx is cancelled;
// then it returns nil. A pass that fails is logged and tried again at the
// next.
func (r *Reporter) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		if n, err := r.ReportDue(ctx); err != nil && ctx.Err() == nil {
			r.log.ErrorContext(ctx, "usage report to Stripe failed", "reported", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ReportDue reports every hour due now and returns how many hours it
// settled. A tenant whose report fails with an error that may pass is left
// for the next pass (the others go on); the first such error is returned.
func (r *Reporter) ReportDue(ctx context.Context) (int, error) {
	due := r.cfg.Now().Add(-r.cfg.Grace - time.Hour)
	var skip []string
	var first error
	n := 0
	for ctx.Err() == nil {
		var failed string
		claimed, err := r.cfg.Cursors.ReportNextHour(ctx, due, skip, func(ctx context.Context, h UsageHour) (UsageResult, error) {
			res, err := r.report(ctx, h)
			if err != nil {
				failed = h.TenantID
			}
			return res, err
		})
		switch {
		case err != nil && failed != "":
			skip = append(skip, failed)
			if first == nil {
				first = err
			}
		case err != nil:
			return n, fmt.Errorf("report usage: %w", err)
		case !claimed:
			return n, first
		default:
			n++
		}
	}
	return n, first
}

// report settles one hour.
func (r *Reporter) report(ctx context.Context, h UsageHour) (UsageResult, error) {
	key := UsageKey(h.TenantID, h.Hour)
	if tenant.EffectivePlanName(h.Plan, h.Status) == tenant.PlanStarter {
		return UsageResult{Outcome: UsageSkipped, IdempotencyKey: key, Note: "held to starter (" + h.Status + ")"}, nil
	}
	totals, err := r.cfg.Usage.UsageTotals(ctx, h.TenantID, h.Hour, h.Hour.Add(time.Hour))
	if err != nil {
		return UsageResult{}, fmt.Errorf("usage of tenant %s: %w", h.TenantID, err)
	}
	var q int64
	for _, t := range totals {
		if t.Live && t.Checked && usage.CountsAsCheck(t.Outcome) {
			q += t.Count
		}
	}
	if q == 0 {
		return UsageResult{Outcome: UsageZero, IdempotencyKey: key}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	err = r.cfg.Meter.ReportUsage(cctx, UsageReport{TenantID: h.TenantID, ItemID: h.ItemID, Hour: h.Hour, Quantity: q, IdempotencyKey: key})
	if errors.Is(err, ErrRejected) {
		r.log.ErrorContext(ctx, "usage report rejected by Stripe", "tenant_id", h.TenantID, "hour", h.Hour, "item_id", h.ItemID, "err", err)
		return UsageResult{Outcome: UsageRejected, Quantity: q, IdempotencyKey: key, Note: note(err.Error())}, nil
	}
	if err != nil {
		return UsageResult{}, fmt.Errorf("tenant %s, hour %s: %w", h.TenantID, stamp(h.Hour), err)
	}
	return UsageResult{Outcome: UsageReported, Quantity: q, IdempotencyKey: key}, nil
}
