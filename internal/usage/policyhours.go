package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/kit/writebehind"
)

// Retention and pace of a PolicyRecorder.
const (
	// PolicyRetention is how long a policy's hours are kept: the console's
	// longest per-policy chart (30 UTC days, today's included) and a day.
	PolicyRetention = 31 * 24 * time.Hour
	// policyFlushEvery is the PolicyRecorder's period: a chart of hours
	// needs no fresher counts, and a crash loses at most about its
	// period's.
	policyFlushEvery = 2 * time.Second
	policyPruneEvery = time.Hour
	// DefaultMaxPolicyPending bounds the (tenant, policy, hour, kind)
	// cells held while the database is down: a few hours of a thousand
	// tenants checking a hundred policies each, tens of megabytes at worst.
	DefaultMaxPolicyPending = 500_000
)

// PolicyHour is one policy's counts in one UTC hour (or, from PolicyDays,
// one UTC day): the checks whose items named it, and the refusals by it.
type PolicyHour struct {
	TenantID string
	Policy   string
	// At is the start of the hour (or the day), in UTC.
	At       time.Time
	Checks   int64
	Refusals int64
}

// PolicyStore keeps the per-policy counts. Implementations are safe for
// concurrent use.
type PolicyStore interface {
	// AddPolicyHours adds rows to the stored counts, all or none, in one
	// statement, once per flushID (a UUID), as Store.AddUsage does; the
	// ids share Store's record of applied flushes, which Recorder prunes.
	// Rows name each (tenant, policy, hour) at most once; rows of a
	// policy that does not exist (deleted since) are dropped.
	AddPolicyHours(ctx context.Context, flushID string, rows []PolicyHour) error
	// PrunePolicyHours forgets the hours before before.
	PrunePolicyHours(ctx context.Context, before time.Time) error
	// PolicyHours lists a tenant's counts per policy and hour over the
	// hours in [from, until), by policy then hour. An unknown tenant has
	// none.
	PolicyHours(ctx context.Context, tenantID string, from, until time.Time) ([]PolicyHour, error)
	// PolicyDays sums a tenant's counts per policy and UTC day over the
	// hours in [from, until), by policy then day.
	PolicyDays(ctx context.Context, tenantID string, from, until time.Time) ([]PolicyHour, error)
}

// policyCell is a row's key within one hour: a count of checks, or of
// refusals.
type policyCell struct {
	tenantID, policy string
	refusal          bool
}

// PolicyRecorder counts, per tenant, policy and UTC hour, the checks whose
// items named the policy and the refusals by it, in memory, and writes them
// to its PolicyStore every few seconds, each flush once (as Recorder does,
// with its machinery: tally, writebehind). It is an admission.Observer and
// safe for concurrent use. It counts what the policies decided: a check
// with outcome allowed or policy (usage.CountsAsCheck), live or test; a
// check a ceiling refused was decided by no policy. A policy named by two
// items of one check counts once. A shadow policy's would-be refusal is
// not a refusal (the check is counted); neither is a fail-closed policy's
// refusal while the counter store is down (the event carries none). A
// check costs one atomic add per policy, two when refused, and no
// allocation.
type PolicyRecorder struct {
	store      PolicyStore
	log        *slog.Logger
	now        func() time.Time
	maxPending int

	flushes *flusher[policyCell]
	drops   writebehind.Drops
	counts  *tally[policyCell]
}

var _ admission.Observer = (*PolicyRecorder)(nil)

// PolicyConfig configures a PolicyRecorder.
type PolicyConfig struct {
	// Store keeps the counts; required.
	Store PolicyStore
	// Logger receives flush failures and dropped counts; nil discards.
	Logger *slog.Logger
	// MaxPending bounds the cells held in memory; zero means
	// DefaultMaxPolicyPending.
	MaxPending int
	// Now is the clock for events without At; nil means time.Now.
	Now func() time.Time
}

// NewPolicyRecorder returns a PolicyRecorder; call Run to flush its counts.
func NewPolicyRecorder(cfg PolicyConfig) (*PolicyRecorder, error) {
	if cfg.Store == nil {
		return nil, errors.New("policy usage recorder: no store")
	}
	r := &PolicyRecorder{store: cfg.Store, log: cfg.Logger, now: cfg.Now, maxPending: cfg.MaxPending}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.maxPending <= 0 {
		r.maxPending = DefaultMaxPolicyPending
	}
	r.counts = newTally[policyCell](r.maxPending, &r.drops)
	r.flushes = newFlusher(r.counts, func(ctx context.Context, id string, t taken[policyCell]) error {
		return r.store.AddPolicyHours(ctx, id, policyRows(t.counts))
	})
	return r, nil
}

// Observe counts e's policies (admission.Event.Policies) and its refusals
// by an enforced policy.
func (r *PolicyRecorder) Observe(_ context.Context, e admission.Event) {
	if e.TenantID == "" || len(e.Policies) == 0 || !e.Checked || !CountsAsCheck(e.Outcome) {
		return
	}
	at := e.At
	if at.IsZero() {
		at = r.now()
	}
	h := hourOf(at)
	for i, name := range e.Policies {
		if !slices.Contains(e.Policies[:i], name) {
			r.counts.add(h, policyCell{tenantID: e.TenantID, policy: name}, 1)
		}
	}
	for i, f := range e.Refusals {
		if f.Layer != admission.LayerPolicy || f.Shadow || f.Policy == "" || refusedBefore(e.Refusals[:i], f.Policy) {
			continue
		}
		r.counts.add(h, policyCell{tenantID: e.TenantID, policy: f.Policy, refusal: true}, 1)
	}
}

// refusedBefore reports whether fs holds an enforced policy refusal by
// name.
func refusedBefore(fs []admission.Refusal, name string) bool {
	for _, f := range fs {
		if f.Layer == admission.LayerPolicy && !f.Shadow && f.Policy == name {
			return true
		}
	}
	return false
}

// Run flushes the counts every few seconds and prunes the hours older than
// PolicyRetention every hour, until ctx ends; then it flushes once more and
// returns that flush's error (writebehind.Loop).
func (r *PolicyRecorder) Run(ctx context.Context) error {
	return writebehind.Loop{
		What: "policy usage counts", Every: policyFlushEvery, Timeout: DefaultFlushTimeout, Flush: r.Flush,
		PruneEvery: policyPruneEvery, Prune: r.Prune,
		Drops: &r.drops, DropAttrs: []any{"max_pending", r.maxPending}, Pending: r.Pending, Log: r.log,
	}.Run(ctx)
}

// Prune forgets the hours older than PolicyRetention.
func (r *PolicyRecorder) Prune(ctx context.Context) error {
	return r.store.PrunePolicyHours(ctx, r.now().Add(-PolicyRetention))
}

// Flush writes the pending counts in one PolicyStore call. On error they
// stay pending, as a flush sent again (under its id) before any other, and
// the error is returned.
func (r *PolicyRecorder) Flush(ctx context.Context) error {
	if err := r.flushes.flush(ctx); err != nil {
		return fmt.Errorf("flush policy usage: %w", err)
	}
	return nil
}

// Pending returns the number of cells waiting to be flushed.
func (r *PolicyRecorder) Pending() int { return r.flushes.pending() }

// PolicyHours lists a tenant's stored counts per policy and hour over
// [from, until) (PolicyStore.PolicyHours); counts not flushed yet are not
// among them.
func (r *PolicyRecorder) PolicyHours(ctx context.Context, tenantID string, from, until time.Time) ([]PolicyHour, error) {
	return r.store.PolicyHours(ctx, tenantID, from, until)
}

// PolicyDays sums a tenant's stored counts per policy and UTC day over
// [from, until) (PolicyStore.PolicyDays).
func (r *PolicyRecorder) PolicyDays(ctx context.Context, tenantID string, from, until time.Time) ([]PolicyHour, error) {
	return r.store.PolicyDays(ctx, tenantID, from, until)
}

// hourOf returns the start of t's UTC hour in Unix seconds.
func hourOf(t time.Time) int64 { return bucketOf(t.Unix(), 3600) }

// policyRows lists the counts as rows, one per (tenant, policy, hour), in
// hour order.
func policyRows(bs buckets[policyCell]) []PolicyHour {
	var out []PolicyHour
	for _, h := range slices.Sorted(maps.Keys(bs)) {
		at := time.Unix(h, 0).UTC()
		index := map[[2]string]int{}
		for c, n := range bs[h] {
			k := [2]string{c.tenantID, c.policy}
			i, ok := index[k]
			if !ok {
				i = len(out)
				index[k] = i
				out = append(out, PolicyHour{TenantID: c.tenantID, Policy: c.policy, At: at})
			}
			if c.refusal {
				out[i].Refusals += n
			} else {
				out[i].Checks += n
			}
		}
	}
	return out
}
