package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/kit/writebehind"
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
	// DefaultWatchBudget is the subjects of a tenant whose refusals by
	// policies with alert_after are counted one by one per UTC day, over
	// every instance: ten times the alerts they may raise, so that subjects
	// refused fewer times than alert_after rarely keep one that reaches it
	// from being watched. Each watched subject keeps at most 24 hourly rows
	// a day; the refusals of the others are counted per policy and hour in
	// one row, shown in the aggregate alert of the day, and cannot raise an
	// alert of their own: a million new subjects a day write no more rows
	// than a thousand.
	DefaultWatchBudget = 1000
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
	// flushRetention is how long the Store remembers applied flush ids: far
	// longer than any flush waits to be sent again.
	flushRetention = 24 * time.Hour
)

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
	// one costs a row in a flush, never a second audit entry.
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
	// WatchBudget is the subjects of a tenant whose refusals are counted
	// one by one per UTC day, over every instance; zero means
	// DefaultWatchBudget.
	WatchBudget int
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

// held is one tenant's share of the pending writes.
type held struct {
	firsts, counts, checks, notes int
}

// minShareDivisor sets the floor below which a tenant finds room in a full
// queue: a hundredth of its share.
const minShareDivisor = 100

// Recorder is the admission.Observer behind the first-refusal rule and alerts.
// Observe only updates maps under a mutex; Run writes them a flush at a
// time. It is safe for concurrent use.
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
	watchBudget int
	pruneEvery  time.Duration
	alertKeep   time.Duration
	auditKeep   time.Duration
	now         func() time.Time

	// flushMu keeps flushes one at a time, so that a failed flush is put
	// back before the next is taken.
	flushMu sync.Mutex
	// firstFlushes and countFlushes send each flush's first refusals and
	// counts once, a failed flush again under its id before any other.
	// Guarded by flushMu.
	firstFlushes *writebehind.Resender[FirstRefusalFlush]
	countFlushes *writebehind.Resender[[]RefusalCount]
	noteFlushes  *writebehind.Resender[NoteFlush]
	// drops counts refusals dropped since last logged.
	drops writebehind.Drops

	mu        sync.Mutex
	seen      map[windowKey]time.Time // window end, for expiry
	firsts    map[windowKey]pendingFirst
	overflow  map[overflowKey]overflowCount
	counts    map[hourKey]int64
	checks    map[subjectKey]AlertCheck
	held      map[string]*held
	lastSweep time.Time
	// notes wait for the next flush; noted counts those queued per
	// tenant, scope and minute, noteOverflow those counted instead.
	notes        []Note
	noted        map[noteKey]int
	noteOverflow map[noteKey]overflowCount
	// watch is what the Store said of the subjects of each tenant's day:
	// which it watches, and whether it watches no more (watching).
	watch watching
}

var _ admission.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder; call Run to write what it observes.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Store == nil {
		return nil, errors.New("audit recorder: no store")
	}
	r := &Recorder{
		store:        cfg.Store,
		log:          cfg.Logger,
		every:        cmp.Or(cfg.FlushEvery, DefaultFlushEvery),
		timeout:      cmp.Or(cfg.FlushTimeout, DefaultFlushTimeout),
		maxSeen:      cmp.Or(cfg.MaxSeen, DefaultMaxSeen),
		maxPending:   cmp.Or(cfg.MaxPending, DefaultMaxPending),
		auditBudget:  cmp.Or(cfg.AuditBudget, DefaultAuditBudget),
		alertBudget:  cmp.Or(cfg.AlertBudget, DefaultAlertBudget),
		watchBudget:  cmp.Or(cfg.WatchBudget, DefaultWatchBudget),
		pruneEvery:   cmp.Or(cfg.PruneEvery, DefaultPruneEvery),
		alertKeep:    cmp.Or(cfg.AlertRetention, DefaultAlertRetention),
		auditKeep:    cmp.Or(cfg.AuditRetention, DefaultAuditRetention),
		now:          cfg.Now,
		seen:         map[windowKey]time.Time{},
		firsts:       map[windowKey]pendingFirst{},
		overflow:     map[overflowKey]overflowCount{},
		counts:       map[hourKey]int64{},
		checks:       map[subjectKey]AlertCheck{},
		held:         map[string]*held{},
		watch:        watching{days: map[dayKey]*watchDay{}},
		noted:        map[noteKey]int{},
		noteOverflow: map[noteKey]overflowCount{},
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
		r.auditBudget < 0 || r.alertBudget < 0 || r.watchBudget < 0 || r.alertKeep < 0 || r.auditKeep < 0 {
		return nil, errors.New("audit recorder: negative period, bound or budget")
	}
	r.firstFlushes = writebehind.NewResender(func(ctx context.Context, id string, b FirstRefusalFlush) error {
		b.ID = id
		_, err := r.store.RecordFirstRefusals(ctx, b)
		return err
	})
	r.noteFlushes = writebehind.NewResender(func(ctx context.Context, id string, b NoteFlush) error {
		b.ID = id
		_, err := r.store.RecordNotes(ctx, b)
		return err
	})
	r.countFlushes = writebehind.NewResender(func(ctx context.Context, id string, rows []RefusalCount) error {
		ws, err := r.store.CountRefusals(ctx, id, r.watchBudget, rows)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.watch.learn(ws, r.maxSeen)
		r.mu.Unlock()
		return nil
	})
	return r, nil
}

// Observe notes e's refusals: the first of each (tenant, key, window end)
// this instance sees is queued for the audit log (or, when its tenant's
// share of the queue is full, counted for its minute's refusal_flood entry),
// and refusals by a policy with alert_after are counted. It never blocks on
// I/O. Events without a tenant are ignored.
func (r *Recorder) Observe(_ context.Context, e admission.Event) {
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
		if f.AlertAfter > 0 && f.Layer == admission.LayerPolicy && f.Policy != "" && f.Key != "" {
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

// Run writes what was observed every FlushEvery, sweeps the windows that
// ended from memory, and prunes expired rows every PruneEvery, until ctx
// ends; then it flushes once more and returns that flush's error, nil when
// everything was written (writebehind.Loop).
func (r *Recorder) Run(ctx context.Context) error {
	return writebehind.Loop{
		What: "audit refusals", Every: r.every, Timeout: r.timeout, Flush: r.Flush,
		PruneEvery: r.pruneEvery, Prune: r.Prune,
		Tick: func() {
			now := r.now()
			r.mu.Lock()
			if now.Sub(r.lastSweep) >= sweepEvery {
				r.sweepLocked(now)
				r.watch.forget(now)
				r.forgetNotedLocked(now)
			}
			r.mu.Unlock()
		},
		Drops: &r.drops, DropAttrs: []any{"max_pending", r.maxPending, "max_pending_per_tenant", r.perTenant}, Log: r.log,
	}.Run(ctx)
}

// Prune deletes from the Store the windows (and audit budgets) that ended
// over an hour ago, the hourly counts (and alert budgets) older than two
// days, the flush ids older than a day, the alerts whose LastAt is older
// than AlertRetention and the audit entries older than AuditRetention. Every
// instance prunes; the Store's deletes skip rows another is deleting.
func (r *Recorder) Prune(ctx context.Context) error {
	now := r.now()
	if err := r.store.PruneRefusals(ctx, now.Add(-windowGrace), now.Add(-hourRetention), now.Add(-flushRetention)); err != nil {
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
// pending for the next flush (first refusals and counts as flushes sent
// again under their ids, so that they count once); the errors are returned
// joined.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	firsts, overflow, counts, checks := r.firsts, r.overflow, r.counts, r.checks
	r.firsts, r.overflow, r.counts, r.checks = map[windowKey]pendingFirst{}, map[overflowKey]overflowCount{}, map[hourKey]int64{}, map[subjectKey]AlertCheck{}
	notes, noteOverflow := r.notes, r.noteOverflow
	r.notes, r.noteOverflow = nil, map[noteKey]overflowCount{}
	r.held = map[string]*held{}
	r.mu.Unlock()

	return errors.Join(r.flushFirsts(ctx, firsts, overflow), r.flushAlerts(ctx, counts, checks), r.flushNotes(ctx, notes, noteOverflow))
}

// Pending returns the number of first refusals, hourly counts and alert
// checks waiting to be written, and the windows remembered locally. First
// refusals and counts include those of a failed flush: up to the bounds of
// the queue more.
func (r *Recorder) Pending() (firsts, counts, checks, seen int) {
	r.flushMu.Lock()
	heldCounts, heldFirsts := r.countFlushes.Held(), r.firstFlushes.Held()
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
