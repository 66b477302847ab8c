package audit

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// KindCounterReset is a tenant's reset of a subject's counter. Its detail
// holds policy, subject_key (a digest), key_id and sandbox.
const KindCounterReset = "counter_reset"

// FloodSuffix ends the kind of the entry that counts the entries of a kind
// past their tenant's budget of a minute (see Recorder.Note): such an entry
// of kind counter_reset_flood has detail window_start and window_end (RFC
// 3339, the minute), entries (their exact number, which grows while the
// minute's entries are flushed), budget, scope and sandbox.
const FloodSuffix = "_flood"

// NoteFlush is one flush's noted entries.
type NoteFlush struct {
	// ID is a UUID: a flush applied before is not applied again.
	ID    string
	Notes []Note
	// Overflow counts noted entries this instance did not queue one by
	// one: each is counted in its minute's flood entry.
	Overflow []NoteOverflow
	// Budget is the most entries written one by one per tenant, scope and
	// minute, over every flush of every instance.
	Budget int
}

// Note is an entry to write under its tenant's budget of its Scope and of
// the UTC minute of its At.
type Note struct {
	Scope   string
	Sandbox bool
	Entry   Entry
}

// NoteOverflow counts the noted entries of one tenant, scope and UTC minute
// that were not queued one by one.
type NoteOverflow struct {
	TenantID, Scope, Kind string
	Sandbox               bool
	// Minute is the start of the minute, UTC.
	Minute time.Time
	// At is the first of them.
	At    time.Time
	Count int64
}

type noteKey struct {
	tenantID, scope, kind string
	sandbox               bool
	minute                int64 // Unix seconds
}

// Note queues e, an entry a tenant's request caused (a counter reset), for
// the next flush, which writes it under the tenant's audit budget of e's
// kind, key kind (live or sandbox, so that a test key's flood never hides
// the live keys' entries) and UTC minute, over every instance: past the
// budget, the minute's one entry of kind e.Kind+FloodSuffix counts the
// rest. An instance queues at most the budget of them per tenant, scope and
// minute, and no more than its tenant's share of the queue; it counts the
// others. e needs a TenantID, an Actor and a Kind; its At is now when zero.
// It never blocks on I/O.
func (r *Recorder) Note(e Entry, sandbox bool) {
	if e.TenantID == "" || e.Actor == "" || e.Kind == "" {
		return
	}
	if e.At.IsZero() {
		e.At = r.now()
	}
	scope := e.Kind
	if sandbox {
		scope += ":sandbox"
	}
	k := noteKey{tenantID: e.TenantID, scope: scope, kind: e.Kind, sandbox: sandbox, minute: e.At.Truncate(time.Minute).Unix()}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.heldLocked(e.TenantID)
	if r.noted[k] < r.auditBudget && r.roomLocked(h.notes, len(r.notes)) {
		r.notes = append(r.notes, Note{Scope: scope, Sandbox: sandbox, Entry: e})
		r.noted[k]++
		h.notes++
		return
	}
	r.noteOverflowLocked(k, e.At, 1)
}

// noteOverflowLocked counts n noted entries of k at at that are not queued
// one by one; bounded like the first refusals' overflow.
func (r *Recorder) noteOverflowLocked(k noteKey, at time.Time, n int64) {
	o, exists := r.noteOverflow[k]
	if !exists && len(r.noteOverflow) >= r.maxPending {
		r.drops.Add(n)
		return
	}
	if !exists || at.Before(o.at) {
		o.at = at
	}
	o.count += n
	r.noteOverflow[k] = o
}

// forgetNotedLocked drops the local counts of minutes before the last.
func (r *Recorder) forgetNotedLocked(now time.Time) {
	last := now.Truncate(time.Minute).Add(-time.Minute).Unix()
	for k := range r.noted {
		if k.minute < last {
			delete(r.noted, k)
		}
	}
}

// flushNotes sends again the notes whose flush failed before, if any, then a
// new one; while the old flush still fails, the new notes are counted in
// their minutes' overflow instead, which keeps them bounded.
func (r *Recorder) flushNotes(ctx context.Context, notes []Note, overflow map[noteKey]overflowCount) error {
	if err := r.noteFlushes.Resend(ctx); err != nil {
		r.mu.Lock()
		for _, n := range notes {
			r.noteOverflowLocked(noteKeyOf(n), n.Entry.At, 1)
		}
		for k, o := range overflow {
			r.noteOverflowLocked(k, o.at, o.count)
		}
		r.mu.Unlock()
		return fmt.Errorf("record noted entries: %w", err)
	}
	if len(notes) == 0 && len(overflow) == 0 {
		return nil
	}
	b := NoteFlush{Notes: notes, Budget: r.auditBudget}
	keys := slices.SortedFunc(maps.Keys(overflow), func(a, b noteKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.scope, b.scope), cmp.Compare(a.minute, b.minute))
	})
	for _, k := range keys {
		o := overflow[k]
		b.Overflow = append(b.Overflow, NoteOverflow{TenantID: k.tenantID, Scope: k.scope, Kind: k.kind, Sandbox: k.sandbox,
			Minute: time.Unix(k.minute, 0).UTC(), At: o.at, Count: o.count})
	}
	if err := r.noteFlushes.Send(ctx, b); err != nil {
		return fmt.Errorf("record noted entries: %w", err)
	}
	return nil
}

func noteKeyOf(n Note) noteKey {
	return noteKey{tenantID: n.Entry.TenantID, scope: n.Scope, kind: n.Entry.Kind, sandbox: n.Sandbox, minute: n.Entry.At.Truncate(time.Minute).Unix()}
}
