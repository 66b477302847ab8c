// Package usage meters what the admission pipeline decided. Its Recorder is a
// gate.Observer that counts requests in memory per tenant, UTC minute, mode
// (live or test key), route kind (a /v1/check call or another route) and
// outcome, and writes the counts to a Store in one statement per second, so
// that metering costs the request path one map increment and the database
// one statement per second per instance, whatever the traffic. It answers
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
// usage imports gate (the Event it observes) and audit (the alerts it
// reports); it imports no driver: pgstore implements its Store.
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/batch"
	"github.com/tollgate/tollgate/internal/gate"
)

// Defaults of Config.
const (
	DefaultFlushEvery   = time.Second
	DefaultFlushTimeout = 5 * time.Second
	// DefaultMaxPending bounds the distinct (tenant, minute, live, checked,
	// outcome) rows held in memory: about 100 MB at worst, hours of traffic
	// of thousands of tenants while the database is down.
	DefaultMaxPending = 1_000_000
	// DefaultAlertWindow is how far back the report lists alerts.
	DefaultAlertWindow = 7 * 24 * time.Hour
	// batchRetention is how long the Store remembers applied batch ids: far
	// longer than any batch waits to be sent again.
	batchRetention = 24 * time.Hour
	// pruneEvery is how often Run prunes batch ids.
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
	// Outcome is gate.OutcomeAllowed or the layer that refused.
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
	// statement, once per batchID (a UUID): a call with the id of a batch
	// applied before adds nothing, so that a batch whose fate an error left
	// unknown can be sent again. Rows name each (tenant, minute, live,
	// checked, outcome) at most once; rows of tenants that do not exist are
	// dropped.
	AddUsage(ctx context.Context, batchID string, rows []Row) error
	// BatchApplied reports whether the batch batchID was applied.
	BatchApplied(ctx context.Context, batchID string) (bool, error)
	// PruneBatches forgets the ids of batches applied before before.
	PruneBatches(ctx context.Context, before time.Time) error
	// UsageTotals sums a tenant's counts over the minutes in [from, until),
	// one Total per (live, checked, outcome). An unknown tenant has none.
	UsageTotals(ctx context.Context, tenantID string, from, until time.Time) ([]Total, error)
}

// AlertLister lists a tenant's alerts whose last refusal is at or after
// since, latest first, at most limit of them. *audit.Recorder satisfies it.
type AlertLister interface {
	Alerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]audit.Alert, error)
}

// Config configures a Recorder.
type Config struct {
	// Store keeps the counts; required.
	Store Store
	// Alerts lists the alerts the report shows; nil shows none.
	Alerts AlertLister
	// Logger receives flush failures and dropped counts; nil discards.
	Logger *slog.Logger
	// FlushEvery is the period of Run's flushes, and so the counts at risk
	// on a crash; zero means DefaultFlushEvery.
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

// Report is a tenant's usage at an instant.
type Report struct {
	TenantID string `json:"tenant_id"`
	// PeriodStart and PeriodEnd bound the calendar month (UTC) of the
	// instant: [PeriodStart, PeriodEnd).
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	// ChecksUsed counts this period's live /v1/check calls that passed the
	// service's ceilings: what the monthly allotment counts.
	ChecksUsed int64 `json:"checks_used"`
	// SandboxUsed counts the test-key /v1/check calls that passed the
	// ceilings in the minutes from SandboxSince (30 days back, truncated to
	// the minute) to the instant.
	SandboxUsed  int64     `json:"sandbox_used"`
	SandboxSince time.Time `json:"sandbox_since"`
	// Refusals counts this period's refused requests, live and test, of
	// every route, by the layer that refused: instance, ip, quota,
	// allotment, sandbox, policy. Never nil.
	Refusals map[string]int64 `json:"refusals"`
	// Alerts lists the alerts raised in the last AlertWindow, latest first.
	// Never nil.
	Alerts []audit.Alert `json:"alerts"`
}

// cell is a row's key within one minute.
type cell struct {
	tenantID string
	live     bool
	checked  bool
	outcome  string
}

// minutes holds counts by minute (Unix seconds of its start) and cell.
type minutes map[int64]map[cell]int64

// taken is the counts one flush took from pending.
type taken struct {
	counts minutes
	rows   int
}

// Recorder counts events in memory and flushes them to its Store. It is safe
// for concurrent use. Counts are lost only if the process dies (at most
// FlushEvery of them) or if more than MaxPending rows wait for a database
// that stays down; none counts twice, even when a flush fails after its
// statement committed (the batch is sent again under its id).
type Recorder struct {
	store       Store
	alerts      AlertLister
	log         *slog.Logger
	every       time.Duration
	timeout     time.Duration
	maxPending  int
	alertWindow time.Duration
	now         func() time.Time

	// flushMu is held for writing by a flush from taking its batch to
	// settling it, and for reading by Usage: a report never sees a batch
	// both in the table and in memory, nor in neither.
	flushMu sync.RWMutex
	// batches sends each flush's counts once, a failed batch again under
	// its id before any other; guarded by flushMu.
	batches *batch.Resender[taken]
	// drops counts events dropped since last logged.
	drops batch.Drops

	mu      sync.Mutex
	pending minutes
	rows    int // cells in pending
}

var _ gate.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder; call Run to flush its counts.
func NewRecorder(cfg Config) (*Recorder, error) {
	if cfg.Store == nil {
		return nil, errors.New("usage recorder: no store")
	}
	r := &Recorder{
		store:       cfg.Store,
		alerts:      cfg.Alerts,
		log:         cfg.Logger,
		every:       cfg.FlushEvery,
		timeout:     cfg.FlushTimeout,
		maxPending:  cfg.MaxPending,
		alertWindow: cfg.AlertWindow,
		now:         cfg.Now,
		pending:     minutes{},
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.every <= 0 {
		r.every = DefaultFlushEvery
	}
	if r.timeout <= 0 {
		r.timeout = DefaultFlushTimeout
	}
	if r.maxPending <= 0 {
		r.maxPending = DefaultMaxPending
	}
	if r.alertWindow <= 0 {
		r.alertWindow = DefaultAlertWindow
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.batches = batch.NewResender(func(ctx context.Context, id string, t taken) error {
		return r.store.AddUsage(ctx, id, t.counts.rows())
	})
	return r, nil
}

// Observe counts e. It takes one mutex for a map increment and never blocks
// on I/O. Events without a tenant (refused before the key was known) are not
// counted: there is no one to meter. An empty Outcome counts as allowed.
func (r *Recorder) Observe(_ context.Context, e gate.Event) {
	if e.TenantID == "" {
		return
	}
	at := e.At
	if at.IsZero() {
		at = r.now()
	}
	m := minuteOf(at)
	c := cell{tenantID: e.TenantID, live: e.Live, checked: e.Checked, outcome: e.Outcome}
	if c.outcome == "" {
		c.outcome = gate.OutcomeAllowed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(m, c, 1)
}

// addLocked adds n to a cell, making room by dropping the oldest minute when
// a new cell would exceed maxPending.
func (r *Recorder) addLocked(m int64, c cell, n int64) {
	b := r.pending[m]
	if _, ok := b[c]; !ok {
		if r.rows >= r.maxPending && !r.evictOlderLocked(m) {
			// This minute is the oldest held: it is the one to drop.
			r.drops.Add(n)
			return
		}
		if b == nil {
			b = make(map[cell]int64)
			r.pending[m] = b
		}
		r.rows++
	}
	b[c] += n
}

// evictOlderLocked drops the oldest minute held if it is older than m, and
// reports whether it did. It scans the minutes, a short list, and runs only
// at the cap.
func (r *Recorder) evictOlderLocked(m int64) bool {
	oldest, found := int64(0), false
	for k := range r.pending {
		if !found || k < oldest {
			oldest, found = k, true
		}
	}
	if !found || oldest >= m {
		return false
	}
	for _, n := range r.pending[oldest] {
		r.drops.Add(n)
	}
	r.rows -= len(r.pending[oldest])
	delete(r.pending, oldest)
	return true
}

// Run flushes the pending counts every FlushEvery until ctx ends, then
// flushes once more and returns that flush's error, nil when every count was
// written (batch.Loop). Counts observed after Run returns wait for a Flush.
// Run also prunes the Store's old batch ids.
func (r *Recorder) Run(ctx context.Context) error {
	return batch.Loop{
		What: "usage counts", Every: r.every, Timeout: r.timeout, Flush: r.Flush,
		PruneEvery: pruneEvery,
		Prune: func(ctx context.Context) error {
			return r.store.PruneBatches(ctx, r.now().Add(-batchRetention))
		},
		Drops: &r.drops, DropAttrs: []any{"max_pending", r.maxPending}, Pending: r.Pending, Log: r.log,
	}.Run(ctx)
}

// Flush writes the pending counts in one Store call. On error they stay
// pending, as a batch sent again before any other, and the error is
// returned.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	if err := r.batches.Resend(ctx); err != nil {
		return fmt.Errorf("flush usage: %w", err)
	}
	r.mu.Lock()
	t := taken{counts: r.pending, rows: r.rows}
	r.pending, r.rows = minutes{}, 0
	r.mu.Unlock()
	if len(t.counts) == 0 {
		return nil
	}
	if err := r.batches.Send(ctx, t); err != nil {
		return fmt.Errorf("flush usage: %w", err)
	}
	return nil
}

// Pending returns the number of rows waiting to be flushed: at most
// MaxPending new ones, and up to as many in a failed batch.
func (r *Recorder) Pending() int {
	r.flushMu.RLock()
	held := r.batches.Held()
	r.flushMu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if held != nil {
		return r.rows + held.Items.rows
	}
	return r.rows
}

// Usage returns tenantID's report at now: the Store's counts plus this
// Recorder's unflushed ones (those of other instances appear once they
// flush, within FlushEvery).
func (r *Recorder) Usage(ctx context.Context, tenantID string, now time.Time) (Report, error) {
	p := periodOf(now)
	rep := Report{
		TenantID:     tenantID,
		PeriodStart:  p.monthStart,
		PeriodEnd:    p.monthEnd,
		SandboxSince: p.rollStart,
		Refusals:     map[string]int64{},
		Alerts:       []audit.Alert{},
	}
	if r.alerts != nil {
		alerts, err := r.alerts.Alerts(ctx, tenantID, now.Add(-r.alertWindow), maxAlerts)
		if err != nil {
			return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
		}
		if alerts != nil {
			rep.Alerts = alerts
		}
	}

	r.flushMu.RLock()
	defer r.flushMu.RUnlock()
	month, err := r.store.UsageTotals(ctx, tenantID, p.monthStart, p.monthEnd)
	if err != nil {
		return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
	}
	roll, err := r.store.UsageTotals(ctx, tenantID, p.rollStart, p.rollEnd)
	if err != nil {
		return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
	}
	for _, t := range month {
		rep.addMonth(t)
	}
	for _, t := range roll {
		rep.addRolling(t)
	}
	if b := r.batches.Held(); b != nil {
		// A failed batch may have been applied all the same.
		applied, err := r.store.BatchApplied(ctx, b.ID)
		if err != nil {
			return Report{}, fmt.Errorf("usage of tenant %s: %w", tenantID, err)
		}
		if !applied {
			rep.addPending(b.Items.counts, tenantID, p)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.addPending(r.pending, tenantID, p)
	return rep, nil
}

// addPending adds tenantID's counts held in memory.
func (rep *Report) addPending(ms minutes, tenantID string, p period) {
	for m, b := range ms {
		inMonth, inRoll := p.contains(m)
		if !inMonth && !inRoll {
			continue
		}
		for c, n := range b {
			if c.tenantID != tenantID {
				continue
			}
			t := Total{Live: c.live, Checked: c.checked, Outcome: c.outcome, Count: n}
			if inMonth {
				rep.addMonth(t)
			}
			if inRoll {
				rep.addRolling(t)
			}
		}
	}
}

// CountsAsCheck reports whether a /v1/check call with this outcome counts
// toward the monthly or sandbox allotment: it does once it has passed the
// service's ceilings, whether the tenant's policies allowed it or not.
func CountsAsCheck(outcome string) bool {
	return outcome == gate.OutcomeAllowed || outcome == gate.LayerPolicy
}

// addMonth adds a total of minutes in the calendar month.
func (rep *Report) addMonth(t Total) {
	if t.Live && t.Checked && CountsAsCheck(t.Outcome) {
		rep.ChecksUsed += t.Count
	}
	if t.Outcome != gate.OutcomeAllowed {
		rep.Refusals[t.Outcome] += t.Count
	}
}

// addRolling adds a total of minutes in the sandbox's rolling window.
func (rep *Report) addRolling(t Total) {
	if !t.Live && t.Checked && CountsAsCheck(t.Outcome) {
		rep.SandboxUsed += t.Count
	}
}

// period holds the minute ranges of a report, each [start, end).
type period struct {
	monthStart, monthEnd time.Time
	rollStart, rollEnd   time.Time
}

// periodOf returns the calendar month (UTC) of now, and the sandbox's
// rolling window: the minutes from the one 30 days before now up to now's,
// inclusive.
func periodOf(now time.Time) period {
	now = now.UTC()
	ms := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return period{
		monthStart: ms,
		monthEnd:   ms.AddDate(0, 1, 0),
		rollStart:  now.Add(-SandboxWindow).Truncate(time.Minute),
		rollEnd:    now.Truncate(time.Minute).Add(time.Minute),
	}
}

// contains reports whether the minute starting at m (Unix seconds) is in the
// month and in the rolling window.
func (p period) contains(m int64) (inMonth, inRolling bool) {
	return m >= p.monthStart.Unix() && m < p.monthEnd.Unix(),
		m >= p.rollStart.Unix() && m < p.rollEnd.Unix()
}

// minuteOf returns the start of t's minute in Unix seconds.
func minuteOf(t time.Time) int64 {
	s := t.Unix()
	// Floor, not truncation toward zero, so that instants before 1970 (a
	// zero-ish clock) still land in their own minute.
	m := s % 60
	if m < 0 {
		m += 60
	}
	return s - m
}

// rows lists the counts as Rows, in minute order.
func (ms minutes) rows() []Row {
	var out []Row
	for _, m := range ms.sortedMinutes() {
		at := time.Unix(m, 0).UTC()
		for c, n := range ms[m] {
			out = append(out, Row{TenantID: c.tenantID, Minute: at, Live: c.live, Checked: c.checked, Outcome: c.outcome, Count: n})
		}
	}
	return out
}

func (ms minutes) sortedMinutes() []int64 {
	return slices.Sorted(maps.Keys(ms))
}
