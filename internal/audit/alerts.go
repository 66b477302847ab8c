package audit

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/alert"
)

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

// Watch says whether the Store counts a subject's refusals one by one on a
// UTC day (see Store.CountRefusals).
type Watch struct {
	TenantID, Policy, Key string
	// Day is the UTC midnight.
	Day     time.Time
	Watched bool
}

type hourKey struct {
	tenantID, policy, key string
	hour                  int64 // Unix seconds
}

type subjectKey struct {
	tenantID, policy, key string
}

type dayKey struct {
	tenantID string
	day      int64 // Unix seconds of the UTC midnight
}

type policyKey struct {
	policy, key string
}

// watchDay is what the Store said of one tenant's day.
type watchDay struct {
	// full: the Store watches no more subjects that day.
	full bool
	// partial: watched was too large to keep whole.
	partial bool
	watched map[policyKey]struct{}
}

// watching keeps what the Store said of the subjects it watches, so that
// an instance sends a tenant's subjects past the day's watch budget as one
// aggregate count instead of a row each. It holds at most a watch budget of
// subjects per tenant and day (the Store watches no more), and at most
// maxSeen in all; a day kept partly is left to the Store to decide. Only
// subjects this instance was told of are known: one that another instance
// got watched first, refused here after the day was full, is counted in the
// aggregate, which still counts every refusal.
type watching struct {
	days map[dayKey]*watchDay
	size int
}

// learn notes the Store's answers; max bounds the subjects kept.
func (w *watching) learn(ws []Watch, max int) {
	for _, x := range ws {
		k := dayKey{tenantID: x.TenantID, day: x.Day.Unix()}
		d := w.days[k]
		if d == nil {
			d = &watchDay{watched: map[policyKey]struct{}{}}
			w.days[k] = d
		}
		if !x.Watched {
			d.full = true
			continue
		}
		pk := policyKey{policy: x.Policy, key: x.Key}
		if _, ok := d.watched[pk]; ok {
			continue
		}
		if w.size >= max {
			d.partial = true
			continue
		}
		d.watched[pk] = struct{}{}
		w.size++
	}
}

// aggregates reports whether a refusal of key by policy on tenantID's day
// of at is counted in the aggregate: the day is full and key not watched.
func (w *watching) aggregates(tenantID, policy, key string, at time.Time) bool {
	d := w.days[dayKey{tenantID: tenantID, day: DayOf(at).Unix()}]
	if d == nil || !d.full || d.partial {
		return false
	}
	_, ok := d.watched[policyKey{policy: policy, key: key}]
	return !ok
}

// forget drops the days before yesterday: refusals observed now are of
// today, or late ones of yesterday.
func (w *watching) forget(now time.Time) {
	yesterday := DayOf(now).AddDate(0, 0, -1).Unix()
	for k, d := range w.days {
		if k.day < yesterday {
			w.size -= len(d.watched)
			delete(w.days, k)
		}
	}
}

// countLocked counts a refusal toward its subject's alert, or toward its
// policy's aggregate when the Store watches no more subjects that day.
func (r *Recorder) countLocked(tenantID string, f admission.Refusal, at time.Time) {
	if r.watch.aggregates(tenantID, f.Policy, f.Key, at) {
		f.Key = alert.AggregateSubject
	}
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

// flushAlerts sends again the refusal counts whose flush failed before, if any,
// then a new one of counts, then (once the counts are committed) the alert
// checks. What is not written goes back to the pending maps.
func (r *Recorder) flushAlerts(ctx context.Context, counts map[hourKey]int64, checks map[subjectKey]AlertCheck) error {
	if err := r.countFlushes.Resend(ctx); err != nil {
		r.putBack(counts, checks)
		return fmt.Errorf("count refusals: %w", err)
	}
	if len(counts) > 0 {
		if err := r.countFlushes.Send(ctx, refusalCounts(counts)); err != nil {
			r.putBack(nil, checks)
			return fmt.Errorf("count refusals: %w", err)
		}
	}
	if len(checks) > 0 {
		if _, err := r.store.RaiseAlerts(ctx, r.alertBudget, alertChecks(checks)); err != nil {
			r.putBack(nil, checks)
			return fmt.Errorf("raise alerts: %w", err)
		}
	}
	return nil
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
func (r *Recorder) Alerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]alert.Alert, error) {
	if limit <= 0 {
		limit = DefaultAlertLimit
	}
	as, err := r.store.ListAlerts(ctx, tenantID, since, limit)
	if err != nil {
		return nil, fmt.Errorf("alerts of tenant %s: %w", tenantID, err)
	}
	return as, nil
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
