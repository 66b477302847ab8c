package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/batch"
	"github.com/tollgate/tollgate/internal/gate"
)

// Defaults of RecorderConfig.
const (
	DefaultFlushEvery   = time.Second
	DefaultFlushTimeout = 5 * time.Second
	DefaultMaxSeen      = 100_000
	DefaultMaxPending   = 100_000
	DefaultPruneEvery   = 10 * time.Minute
	// DefaultAlertRetention is how long an alert is kept after its latest
	// refusal.
	DefaultAlertRetention = 90 * 24 * time.Hour
	// DefaultAuditRetention is how long an audit entry is kept.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// DefaultAuditBudget is the refusal entries written one by one per
	// tenant and UTC minute: one page of the dashboard's audit log. An
	// operator reads refusals to see who is refused and by which layer; past
	// a page a minute, more rows of digests say nothing more, and a flood of
	// new subjects (200 checks of 32 items wrote 6,400 rows in 0.4 s) would
	// fill the table. The rest of the minute is one refusal_flood entry with
	// their exact number.
	DefaultAuditBudget = 50
	// DefaultAlertBudget is the alerts of their own that a tenant's
	// subjects get per UTC day: what the usage report lists at most. Alerts
	// are one row per subject and day, so the day is the window that bounds
	// them; past the budget, each subject is counted once in its policy's
	// aggregate alert of the day.
	DefaultAlertBudget = 100
	// DefaultAlertLimit is the number of alerts Alerts returns for a limit
	// of zero.
	DefaultAlertLimit = 100
)

// Retention of the rows behind the first-refusal rule and the alerts.
const (
	// windowGrace keeps a window's row this long after it ended, so that a
	// refusal observed late (a slow request) is still recognised.
	windowGrace = time.Hour
	// hourRetention keeps hourly refusal counts this long: the 24-hour sums
	// need no more than the last 24 buckets.
	hourRetention = 48 * time.Hour
	// sweepEvery is how often expired windows leave the local seen map.
	sweepEvery = time.Minute
	// batchRetention is how long the Store remembers applied batch ids: far
	// longer than any batch waits to be sent again.
	batchRetention = 24 * time.Hour
)

// FirstRefusalBatch is one flush's first refusals. Its minute of a refusal is
// the UTC minute of its At.
type FirstRefusalBatch struct {
	// ID is a UUID: a batch applied before is not applied again, so that a
	// batch whose fate an error left unknown can be sent again.
	ID       string
	Refusals []FirstRefusal
	// Overflow counts first refusals this instance had no room to queue:
	// each is counted in its minute's refusal_flood entry.
	Overflow []RefusalOverflow
	// Budget is the most refusal entries written one by one per tenant and
	// minute, over every batch of every instance.
	Budget int
}

// RefusalOverflow counts first refusals of one tenant in one UTC minute that
// were not queued one by one.
type RefusalOverflow struct {
	TenantID string
	// Minute is the start of the minute, UTC.
	Minute time.Time
	// At is the first of them.
	At    time.Time
	Count int64
}

// FirstRefusal is a refusal that this instance saw first in its window; the
// store writes its audit entry unless another instance was first.
type FirstRefusal struct {
	TenantID string
	// Key is the counter key that refused (a digest).
	Key string
	// WindowEnd is the end of the refusing counter's window.
	WindowEnd time.Time
	// At is when the refusal happened.
	At time.Time
	// Detail is the audit entry's detail.
	Detail map[string]any
}

// RefusalCount counts refusals of one subject by one policy in one UTC hour.
type RefusalCount struct {
	TenantID string
	Policy   string
	// Key is the subject's counter key (a digest).
	Key string
	// Hour is the start of the hour, UTC.
	Hour  time.Time
	Count int64
}

// AlertCheck asks whether a subject's refusals by a policy in the 24 hours
// up to At reach AlertAfter.
type AlertCheck struct {
	TenantID   string
	Policy     string
	Key        string
	AlertAfter int64
	// At is the latest refusal observed.
	At     time.Time
	Shadow bool
}

// AggregateSubject is the SubjectKey of an aggregate alert: the subjects
// that reached a policy's alert_after in a day once their tenant's alert
// budget of the day was spent.
const AggregateSubject = "*"

// Alert says that one subject of a policy was refused at least AlertAfter
// times within 24 hours. There is one alert per tenant, policy, subject and
// UTC day, up to the tenant's alert budget of the day; past it, one
// aggregate alert per policy and day (SubjectKey AggregateSubject) counts
// the other subjects.
type Alert struct {
	Policy string `json:"policy"`
	// SubjectKey is the subject's counter key, an HMAC digest: the raw
	// subject is never stored. It is AggregateSubject for an aggregate.
	SubjectKey string `json:"subject_key"`
	// Subjects is 1, or for an aggregate the number of subjects it counts.
	Subjects int64 `json:"subjects"`
	// Count is the refusals in the 24 hours up to LastAt; for an aggregate,
	// the sum of its subjects' counts when each was counted.
	Count      int64 `json:"count"`
	AlertAfter int64 `json:"alert_after"`
	// FirstAt is when the threshold was reached that day; LastAt is the
	// latest refusal counted.
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
	// Shadow says the policy was in shadow mode: nothing was refused, this
	// is what it would have done.
	Shadow bool `json:"shadow"`
}

// Store keeps first refusals, refusal counts and alerts. Implementations
// are safe for concurrent use; the rows of tenants that do not exist are
// dropped without error.
type Store interface {
	// RecordFirstRefusals applies b once per b.ID, all or nothing. Of the
	// refusals that no instance has recorded for their (tenant, key, window
	// end), those of each tenant and minute get an audit entry of kind
	// KindRefusal, in order of time, while the minute's b.Budget lasts
	// (over every batch of every instance); the rest, and b.Overflow, are
	// added to the minute's one KindRefusalFlood entry. It returns the
	// entries written one by one. Keys are distinct.
	RecordFirstRefusals(ctx context.Context, b FirstRefusalBatch) (int64, error)
	// CountRefusals adds counts, all or none, once per batchID (a UUID): a
	// call with the id of a batch applied before adds nothing, so that a
	// batch whose fate an error left unknown can be sent again. Rows are
	// distinct.
	CountRefusals(ctx context.Context, batchID string, cs []RefusalCount) error
	// RaiseAlerts raises or updates the alert of each check whose count
	// reaches its AlertAfter, from the counts committed before it starts,
	// and returns how many it raised or updated. A subject without an
	// alert that day gets one while its tenant has raised fewer than budget
	// that UTC day (over every call of every instance); past it, the
	// subject is counted once in its policy's aggregate alert of the day.
	// Subjects are distinct.
	RaiseAlerts(ctx context.Context, budget int, cs []AlertCheck) (int64, error)
	// ListAlerts lists a tenant's alerts whose LastAt is at or after since,
	// latest first, at most limit of them.
	ListAlerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]Alert, error)
	// PruneRefusals deletes the windows that ended before windowsBefore
	// and the audit budgets of minutes before it, the hourly counts of
	// hours before hoursBefore and the alert budgets of days before its
	// day, and the ids of batches applied before batchesBefore.
	PruneRefusals(ctx context.Context, windowsBefore, hoursBefore, batchesBefore time.Time) error
	// PruneAlerts deletes the alerts whose LastAt is before before and
	// returns how many it deleted.
	PruneAlerts(ctx context.Context, before time.Time) (int64, error)
	// PruneAudit deletes the audit entries dated before before, of every
	// kind, and returns how many it deleted.
	PruneAudit(ctx context.Context, before time.Time) (int64, error)
}

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// Store keeps what the Recorder writes; required.
	Store Store
	// Logger receives failed flushes and dropped refusals; nil discards.
	Logger *slog.Logger
	// FlushEvery is the period of Run's flushes; zero means
	// DefaultFlushEvery.
	FlushEvery time.Duration
	// FlushTimeout bounds each flush; zero means DefaultFlushTimeout.
	FlushTimeout time.Duration
	// MaxSeen bounds the windows remembered locally, to spare the database
	// the refusals it would ignore; zero means DefaultMaxSeen. Forgetting
	// one costs a row in a batch, never a second audit entry.
	MaxSeen int
	// MaxPending bounds each kind of pending write (first refusals,
	// hourly counts, alert checks); zero means DefaultMaxPending.
	// MaxPendingPerTenant bounds one tenant's share of each; zero means a
	// tenth of MaxPending. A tenant holding fewer than a hundredth of its
	// share (at least one) finds room even in a full queue, so that one
	// tenant's flood never keeps another's writes out: the queue may then
	// exceed MaxPending by that much per tenant. A first refusal that finds
	// no room is counted in its minute's refusal_flood entry; a count or
	// check that finds none is dropped and logged.
	MaxPending          int
	MaxPendingPerTenant int
	// AuditBudget is the refusal entries written one by one per tenant and
	// UTC minute, over every instance; zero means DefaultAuditBudget.
	AuditBudget int
	// AlertBudget is the alerts of their own a tenant's subjects get per
	// UTC day, over every instance; zero means DefaultAlertBudget.
	AlertBudget int
	// PruneEvery is how often Run deletes expired windows, counts and
	// alerts from the Store; zero means DefaultPruneEvery, negative never.
	PruneEvery time.Duration
	// AlertRetention is how long Prune keeps an alert after its LastAt;
	// zero means DefaultAlertRetention.
	AlertRetention time.Duration
	// AuditRetention is how long Prune keeps an audit entry, of any kind,
	// after its At; zero means DefaultAuditRetention.
	AuditRetention time.Duration
	// Now is the clock for events without At and for expiry; nil means
	// time.Now.
	Now func() time.Time
}

type windowKey struct {
	tenantID string
	key      string
	end      int64 // Unix nanoseconds
}

type hourKey struct {
	tenantID, policy, key string
	hour                  int64 // Unix seconds
}

type subjectKey struct {
	tenantID, policy, key string
}

type overflowKey struct {
	tenantID string
	minute   int64 // Unix seconds
}

type overflowCount struct {
	at    time.Time // the first
	count int64
}

// held is one tenant's share of the pending writes.
type held struct {
	firsts, counts, checks int
}

// minShareDivisor sets the floor below which a tenant finds room in a full
// queue: a hundredth of its share.
const minShareDivisor = 100

type pendingFirst struct {
	at  time.Time
	end time.Time
	ref gate.Refusal
}

// Recorder is the gate.Observer behind the first-refusal rule and alerts.
// Observe only updates maps under a mutex; Run writes them in batches. It is
// safe for concurrent use.
type Recorder struct {
	store       Store
	log         *slog.Logger
	every       time.Duration
	timeout     time.Duration
	maxSeen     int
	maxPending  int
	perTenant   int
	minShare    int
	auditBudget int
	alertBudget int
	pruneEvery  time.Duration
	alertKeep   time.Duration
	auditKeep   time.Duration
	now         func() time.Time

	// flushMu keeps flushes one at a time, so that a failed batch is put
	// back before the next is taken.
	flushMu sync.Mutex
	// firstBatches and countBatches send each flush's first refusals and
	// counts once, a failed batch again under its id before any other.
	// Guarded by flushMu.
	firstBatches *batch.Resender[FirstRefusalBatch]
	countBatches *batch.Resender[[]RefusalCount]
	// drops counts refusals dropped since last logged.
	drops batch.Drops

	mu        sync.Mutex
	seen      map[windowKey]time.Time // window end, for expiry
	firsts    map[windowKey]pendingFirst
	overflow  map[overflowKey]overflowCount
	counts    map[hourKey]int64
	checks    map[subjectKey]AlertCheck
	held      map[string]*held
	lastSweep time.Time
}

var _ gate.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder; call Run to write what it observes.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Store == nil {
		return nil, errors.New("audit recorder: no store")
	}
	r := &Recorder{
		store:       cfg.Store,
		log:         cfg.Logger,
		every:       cmp.Or(cfg.FlushEvery, DefaultFlushEvery),
		timeout:     cmp.Or(cfg.FlushTimeout, DefaultFlushTimeout),
		maxSeen:     cmp.Or(cfg.MaxSeen, DefaultMaxSeen),
		maxPending:  cmp.Or(cfg.MaxPending, DefaultMaxPending),
		auditBudget: cmp.Or(cfg.AuditBudget, DefaultAuditBudget),
		alertBudget: cmp.Or(cfg.AlertBudget, DefaultAlertBudget),
		pruneEvery:  cmp.Or(cfg.PruneEvery, DefaultPruneEvery),
		alertKeep:   cmp.Or(cfg.AlertRetention, DefaultAlertRetention),
		auditKeep:   cmp.Or(cfg.AuditRetention, DefaultAuditRetention),
		now:         cfg.Now,
		seen:        map[windowKey]time.Time{},
		firsts:      map[windowKey]pendingFirst{},
		overflow:    map[overflowKey]overflowCount{},
		counts:      map[hourKey]int64{},
		checks:      map[subjectKey]AlertCheck{},
		held:        map[string]*held{},
	}
	r.perTenant = cmp.Or(cfg.MaxPendingPerTenant, max(r.maxPending/10, 1))
	r.minShare = max(r.perTenant/minShareDivisor, 1)
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.every < 0 || r.timeout < 0 || r.maxSeen < 0 || r.maxPending < 0 || r.perTenant < 0 ||
		r.auditBudget < 0 || r.alertBudget < 0 || r.alertKeep < 0 || r.auditKeep < 0 {
		return nil, errors.New("audit recorder: negative period, bound or budget")
	}
	r.firstBatches = batch.NewResender(func(ctx context.Context, id string, b FirstRefusalBatch) error {
		b.ID = id
		_, err := r.store.RecordFirstRefusals(ctx, b)
		return err
	})
	r.countBatches = batch.NewResender(func(ctx context.Context, id string, rows []RefusalCount) error {
		return r.store.CountRefusals(ctx, id, rows)
	})
	return r, nil
}

// Observe notes e's refusals: the first of each (tenant, key, window end)
// this instance sees is queued for the audit log (or, when its tenant's
// share of the queue is full, counted for its minute's refusal_flood entry),
// and refusals by a policy with alert_after are counted. It never blocks on
// I/O. Events without a tenant are ignored.
func (r *Recorder) Observe(_ context.Context, e gate.Event) {
	if e.TenantID == "" || len(e.Refusals) == 0 {
		return
	}
	at := e.At
	if at.IsZero() {
		at = r.now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range e.Refusals {
		end := f.ResetAt
		if end.IsZero() {
			// No window known: one entry per minute at most.
			end = at.Truncate(time.Minute).Add(time.Minute)
		}
		key := f.Key
		if key == "" {
			// A keyless ceiling still has one window per layer and scope.
			key = f.Layer + ":" + f.Scope
		}
		wk := windowKey{tenantID: e.TenantID, key: key, end: end.UnixNano()}
		if _, ok := r.seen[wk]; !ok {
			r.rememberLocked(wk, end)
			r.queueFirstLocked(wk, pendingFirst{at: at, end: end, ref: f})
		}
		if f.AlertAfter > 0 && f.Layer == gate.LayerPolicy && f.Policy != "" && f.Key != "" {
			r.countLocked(e.TenantID, f, at)
		}
	}
}

// heldLocked returns tenantID's share of the pending writes.
func (r *Recorder) heldLocked(tenantID string) *held {
	h := r.held[tenantID]
	if h == nil {
		h = &held{}
		r.held[tenantID] = h
	}
	return h
}

// roomLocked reports whether a tenant holding n writes of a kind, of which
// total are pending, may queue one more: never past its share, and in a
// full queue only below the floor of its share.
func (r *Recorder) roomLocked(n, total int) bool {
	return n < r.perTenant && (total < r.maxPending || n < r.minShare)
}

// queueFirstLocked queues a first refusal, or counts it for its minute's
// refusal_flood entry when its tenant has no room.
func (r *Recorder) queueFirstLocked(wk windowKey, p pendingFirst) {
	h := r.heldLocked(wk.tenantID)
	if r.roomLocked(h.firsts, len(r.firsts)) {
		r.firsts[wk] = p
		h.firsts++
		return
	}
	r.overflowLocked(wk.tenantID, p.at, 1)
}

// overflowLocked counts n first refusals of tenantID at at that are not
// queued one by one. The counts are few (one per tenant and minute), but
// bounded all the same.
func (r *Recorder) overflowLocked(tenantID string, at time.Time, n int64) {
	ok := overflowKey{tenantID: tenantID, minute: at.Truncate(time.Minute).Unix()}
	o, exists := r.overflow[ok]
	if !exists && len(r.overflow) >= r.maxPending {
		r.drops.Add(n)
		return
	}
	if !exists || at.Before(o.at) {
		o.at = at
	}
	o.count += n
	r.overflow[ok] = o
}

// countLocked counts a refusal toward its subject's alert.
func (r *Recorder) countLocked(tenantID string, f gate.Refusal, at time.Time) {
	h := r.heldLocked(tenantID)
	hk := hourKey{tenantID: tenantID, policy: f.Policy, key: f.Key, hour: at.Truncate(time.Hour).Unix()}
	if _, ok := r.counts[hk]; !ok {
		if !r.roomLocked(h.counts, len(r.counts)) {
			r.drops.Add(1)
			return
		}
		h.counts++
	}
	r.counts[hk]++
	sk := subjectKey{tenantID: tenantID, policy: f.Policy, key: f.Key}
	c, ok := r.checks[sk]
	if !ok {
		if !r.roomLocked(h.checks, len(r.checks)) {
			r.drops.Add(1)
			return
		}
		h.checks++
	}
	if !ok || !at.Before(c.At) {
		r.checks[sk] = AlertCheck{TenantID: tenantID, Policy: f.Policy, Key: f.Key, AlertAfter: f.AlertAfter, At: at, Shadow: f.Shadow}
	}
}

// rememberLocked adds a window to the seen map, first making room when it
// is full: expired windows go first, then arbitrary ones down to three
// quarters of the bound (each sweep so frees a quarter at least, so sweeps
// stay rare).
func (r *Recorder) rememberLocked(wk windowKey, end time.Time) {
	if len(r.seen) >= r.maxSeen {
		r.sweepLocked(r.now())
		for k := range r.seen {
			if len(r.seen) <= r.maxSeen*3/4 {
				break
			}
			delete(r.seen, k)
		}
	}
	r.seen[wk] = end
}

// sweepLocked forgets the windows that have ended by now.
func (r *Recorder) sweepLocked(now time.Time) {
	for k, end := range r.seen {
		if !end.After(now) {
			delete(r.seen, k)
		}
	}
	r.lastSweep = now
}

// Run writes what was observed every FlushEvery, sweeps the windows that
// ended from memory, and prunes expired rows every PruneEvery, until ctx
// ends; then it flushes once more and returns that flush's error, nil when
// everything was written (batch.Loop).
func (r *Recorder) Run(ctx context.Context) error {
	return batch.Loop{
		What: "audit refusals", Every: r.every, Timeout: r.timeout, Flush: r.Flush,
		PruneEvery: r.pruneEvery, Prune: r.Prune,
		Tick: func() {
			now := r.now()
			r.mu.Lock()
			if now.Sub(r.lastSweep) >= sweepEvery {
				r.sweepLocked(now)
			}
			r.mu.Unlock()
		},
		Drops: &r.drops, DropAttrs: []any{"max_pending", r.maxPending, "max_pending_per_tenant", r.perTenant}, Log: r.log,
	}.Run(ctx)
}

// Prune deletes from the Store the windows (and audit budgets) that ended
// over an hour ago, the hourly counts (and alert budgets) older than two
// days, the batch ids older than a day, the alerts whose LastAt is older
// than AlertRetention and the audit entries older than AuditRetention. Every
// instance prunes; the Store's deletes skip rows another is deleting.
func (r *Recorder) Prune(ctx context.Context) error {
	now := r.now()
	if err := r.store.PruneRefusals(ctx, now.Add(-windowGrace), now.Add(-hourRetention), now.Add(-batchRetention)); err != nil {
		return fmt.Errorf("prune refusals: %w", err)
	}
	if _, err := r.store.PruneAlerts(ctx, now.Add(-r.alertKeep)); err != nil {
		return fmt.Errorf("prune alerts: %w", err)
	}
	if _, err := r.store.PruneAudit(ctx, now.Add(-r.auditKeep)); err != nil {
		return fmt.Errorf("prune audit entries: %w", err)
	}
	return nil
}

// Flush writes the pending first refusals, then the refusal counts, then
// (once the counts are committed) the alert checks. What fails stays
// pending for the next flush (first refusals and counts as batches sent
// again under their ids, so that they count once); the errors are returned
// joined.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	firsts, overflow, counts, checks := r.firsts, r.overflow, r.counts, r.checks
	r.firsts, r.overflow, r.counts, r.checks = map[windowKey]pendingFirst{}, map[overflowKey]overflowCount{}, map[hourKey]int64{}, map[subjectKey]AlertCheck{}
	r.held = map[string]*held{}
	r.mu.Unlock()

	var errs []error
	if err := r.flushFirsts(ctx, firsts, overflow); err != nil {
		errs = append(errs, err)
	}
	if err := r.countBatches.Resend(ctx); err != nil {
		errs = append(errs, fmt.Errorf("count refusals: %w", err))
		r.putBack(counts, checks)
		return errors.Join(errs...)
	}
	if len(counts) > 0 {
		if err := r.countBatches.Send(ctx, refusalCounts(counts)); err != nil {
			errs = append(errs, fmt.Errorf("count refusals: %w", err))
			r.putBack(nil, checks)
			return errors.Join(errs...)
		}
	}
	if len(checks) > 0 {
		if _, err := r.store.RaiseAlerts(ctx, r.alertBudget, alertChecks(checks)); err != nil {
			errs = append(errs, fmt.Errorf("raise alerts: %w", err))
			r.putBack(nil, checks)
		}
	}
	return errors.Join(errs...)
}

// flushFirsts sends the batch of first refusals that failed before, if any,
// then a new one of firsts and overflow. While the old batch still fails,
// firsts and overflow go back to the pending maps.
func (r *Recorder) flushFirsts(ctx context.Context, firsts map[windowKey]pendingFirst, overflow map[overflowKey]overflowCount) error {
	if err := r.firstBatches.Resend(ctx); err != nil {
		r.putBackFirsts(firsts, overflow)
		return fmt.Errorf("record first refusals: %w", err)
	}
	if len(firsts) == 0 && len(overflow) == 0 {
		return nil
	}
	b := FirstRefusalBatch{Refusals: firstRefusals(firsts), Overflow: overflows(overflow), Budget: r.auditBudget}
	if err := r.firstBatches.Send(ctx, b); err != nil {
		return fmt.Errorf("record first refusals: %w", err)
	}
	return nil
}

// putBackFirsts returns unsent first refusals and overflow counts to the
// pending maps; a refusal that no longer finds room is counted instead.
func (r *Recorder) putBackFirsts(firsts map[windowKey]pendingFirst, overflow map[overflowKey]overflowCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, p := range firsts {
		if _, ok := r.firsts[k]; ok {
			continue
		}
		r.queueFirstLocked(k, p)
	}
	for k, o := range overflow {
		r.overflowLocked(k.tenantID, o.at, o.count)
	}
}

// putBack returns unwritten counts and checks to the pending maps.
func (r *Recorder) putBack(counts map[hourKey]int64, checks map[subjectKey]AlertCheck) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range counts {
		if _, ok := r.counts[k]; !ok {
			h := r.heldLocked(k.tenantID)
			if !r.roomLocked(h.counts, len(r.counts)) {
				r.drops.Add(n)
				continue
			}
			h.counts++
		}
		r.counts[k] += n
	}
	for k, c := range checks {
		old, ok := r.checks[k]
		if !ok {
			h := r.heldLocked(k.tenantID)
			if !r.roomLocked(h.checks, len(r.checks)) {
				r.drops.Add(1)
				continue
			}
			h.checks++
		}
		if !ok || c.At.After(old.At) {
			r.checks[k] = c
		}
	}
}

// Alerts lists tenantID's alerts whose last refusal is at or after since,
// latest first, at most limit of them (zero: DefaultAlertLimit).
func (r *Recorder) Alerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]Alert, error) {
	if limit <= 0 {
		limit = DefaultAlertLimit
	}
	as, err := r.store.ListAlerts(ctx, tenantID, since, limit)
	if err != nil {
		return nil, fmt.Errorf("alerts of tenant %s: %w", tenantID, err)
	}
	return as, nil
}

// Pending returns the number of first refusals, hourly counts and alert
// checks waiting to be written, and the windows remembered locally. First
// refusals and counts include those of a failed batch: up to the bounds of
// the queue more.
func (r *Recorder) Pending() (firsts, counts, checks, seen int) {
	r.flushMu.Lock()
	heldCounts, heldFirsts := r.countBatches.Held(), r.firstBatches.Held()
	r.flushMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	firsts, counts = len(r.firsts), len(r.counts)
	if heldCounts != nil {
		counts += len(heldCounts.Items)
	}
	if heldFirsts != nil {
		firsts += len(heldFirsts.Items.Refusals)
	}
	return firsts, counts, len(r.checks), len(r.seen)
}

// RefusalDetail returns the detail of a refusal's audit entry.
func RefusalDetail(f gate.Refusal, windowEnd time.Time) map[string]any {
	return map[string]any{
		"layer":      f.Layer,
		"scope":      f.Scope,
		"policy":     f.Policy,
		"limit":      f.Limit,
		"key":        f.Key,
		"window_end": windowEnd.UTC().Format(time.RFC3339Nano),
		"degraded":   f.Degraded,
		"shadow":     f.Shadow,
	}
}

// firstRefusals lists pending first refusals in key order.
func firstRefusals(m map[windowKey]pendingFirst) []FirstRefusal {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b windowKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.key, b.key), cmp.Compare(a.end, b.end))
	})
	out := make([]FirstRefusal, 0, len(keys))
	for _, k := range keys {
		p := m[k]
		out = append(out, FirstRefusal{TenantID: k.tenantID, Key: k.key, WindowEnd: p.end, At: p.at, Detail: RefusalDetail(p.ref, p.end)})
	}
	return out
}

// overflows lists pending overflow counts in key order.
func overflows(m map[overflowKey]overflowCount) []RefusalOverflow {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b overflowKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.minute, b.minute))
	})
	out := make([]RefusalOverflow, 0, len(keys))
	for _, k := range keys {
		o := m[k]
		out = append(out, RefusalOverflow{TenantID: k.tenantID, Minute: time.Unix(k.minute, 0).UTC(), At: o.at, Count: o.count})
	}
	return out
}

// refusalCounts lists pending counts in key order.
func refusalCounts(m map[hourKey]int64) []RefusalCount {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b hourKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.policy, b.policy), cmp.Compare(a.key, b.key), cmp.Compare(a.hour, b.hour))
	})
	out := make([]RefusalCount, 0, len(keys))
	for _, k := range keys {
		out = append(out, RefusalCount{TenantID: k.tenantID, Policy: k.policy, Key: k.key, Hour: time.Unix(k.hour, 0).UTC(), Count: m[k]})
	}
	return out
}

// alertChecks lists pending checks in key order.
func alertChecks(m map[subjectKey]AlertCheck) []AlertCheck {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b subjectKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.policy, b.policy), cmp.Compare(a.key, b.key))
	})
	out := make([]AlertCheck, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}
