package audit

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
)

// FirstRefusalFlush is one flush's first refusals. Its minute of a refusal is
// the UTC minute of its At.
type FirstRefusalFlush struct {
	// ID is a UUID: a flush applied before is not applied again, so that a
	// flush whose fate an error left unknown can be sent again.
	ID       string
	Refusals []FirstRefusal
	// Overflow counts first refusals this instance had no room to queue:
	// each is counted in its minute's refusal_flood entry.
	Overflow []RefusalOverflow
	// Budget is the most refusal entries written one by one per tenant and
	// minute, over every flush of every instance.
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

type windowKey struct {
	tenantID string
	key      string
	end      int64 // Unix nanoseconds
}

type overflowKey struct {
	tenantID string
	minute   int64 // Unix seconds
}

type overflowCount struct {
	at    time.Time // the first
	count int64
}

type pendingFirst struct {
	at  time.Time
	end time.Time
	ref admission.Refusal
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

// flushFirsts sends again the first refusals whose flush failed before, if any,
// then a new one of firsts and overflow. While the old flush still fails,
// firsts and overflow go back to the pending maps.
func (r *Recorder) flushFirsts(ctx context.Context, firsts map[windowKey]pendingFirst, overflow map[overflowKey]overflowCount) error {
	if err := r.firstFlushes.Resend(ctx); err != nil {
		r.putBackFirsts(firsts, overflow)
		return fmt.Errorf("record first refusals: %w", err)
	}
	if len(firsts) == 0 && len(overflow) == 0 {
		return nil
	}
	b := FirstRefusalFlush{Refusals: firstRefusals(firsts), Overflow: overflows(overflow), Budget: r.auditBudget}
	if err := r.firstFlushes.Send(ctx, b); err != nil {
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

// RefusalDetail returns the detail of a refusal's audit entry.
func RefusalDetail(f admission.Refusal, windowEnd time.Time) map[string]any {
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
