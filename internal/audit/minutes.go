package audit

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// The audit budget of a minute, as pure planners: a Store locks the
// minutes a flush spends, hands the rows it read to the plan, and writes
// what the plan returns, all in one transaction. The arithmetic (what fits,
// what spills into the minute's flood entry, when that entry starts) is
// here; the Store holds the transaction and the SQL.

// MinuteOf is the UTC minute of t: the minute whose audit budget an entry
// at t spends.
func MinuteOf(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// Minute names the audit budget of one tenant, scope and UTC minute: the
// row a Store locks while a flush spends it. First refusals have no Scope.
type Minute struct {
	TenantID string
	Scope    string
	// Start is the start of the minute, UTC.
	Start time.Time
}

// budgetKey is a Minute as a map key, whatever the location of its Start.
type budgetKey struct {
	tenantID, scope string
	minute          int64 // Unix seconds
}

func (m Minute) key() budgetKey {
	return budgetKey{tenantID: m.TenantID, scope: m.Scope, minute: m.Start.Unix()}
}

// LockedMinute is a Minute as the Store read it under lock: the entries
// written one by one so far, and its flood entry (0 when it has none).
type LockedMinute struct {
	Minute
	Entries int64
	FloodID int64
}

// MinuteWrite is what one flush writes for a locked minute, in this order:
// Notes one by one; then Past more entries counted in the flood entry
// FloodID, or NewFlood (which counts them) made when the minute has none;
// then the minute's row, which gains Written entries and names NewFlood
// once it is made.
type MinuteWrite struct {
	Minute
	// Notes are the entries to write one by one, in order of time; none for
	// first refusals, which the Store's statement writes.
	Notes []Entry
	// Written is the entries written one by one this flush.
	Written int64
	// Past is the entries past the budget this flush counts.
	Past int64
	// FloodID is the minute's flood entry, when it has one.
	FloodID int64
	// NewFlood is the flood entry to make when Past is positive and the
	// minute has none.
	NewFlood *Entry
}

// room is what a budget leaves once spent of it is spent, never below zero.
func room(budget int, spent int64) int64 { return max(int64(budget)-spent, 0) }

// add counts n more entries past a budget, the first of them at at.
func (o overflowCount) add(at time.Time, n int64) overflowCount {
	if o.count == 0 || at.Before(o.at) {
		o.at = at
	}
	o.count += n
	return o
}

// spill sets w's flood: past goes to l's flood entry, or to a new one made
// by newFlood when l has none.
func (w *MinuteWrite) spill(l LockedMinute, past overflowCount, newFlood func(past overflowCount) Entry) {
	if past.count <= 0 {
		return
	}
	w.Past, w.FloodID = past.count, l.FloodID
	if l.FloodID == 0 {
		e := newFlood(past)
		w.NewFlood = &e
	}
}

// lockOrder lists minutes by tenant, scope, then minute: the order in which
// a Store locks them, so that concurrent flushes cannot deadlock.
func lockOrder(ms map[budgetKey]Minute) []Minute {
	return slices.SortedFunc(maps.Values(ms), func(a, b Minute) int {
		return cmp.Or(cmp.Compare(a.TenantID, b.TenantID), cmp.Compare(a.Scope, b.Scope), a.Start.Compare(b.Start))
	})
}

// RefusalPlan is the arithmetic of Store.RecordFirstRefusals. A Store
// applies it in one transaction: it locks Minutes, runs the statement that
// writes the first refusals that fit each locked minute's Room (which
// refusals are first is the Store's to know, over every instance), then
// writes what Settle returns.
type RefusalPlan struct {
	// Minutes are those the flush's refusals and overflow fall in, in the
	// order to lock them.
	Minutes []Minute
	budget  int
	// overflow is the flush's overflow, per minute.
	overflow map[budgetKey]overflowCount
}

// PlanFirstRefusals plans b. The Store has left out the refusals and
// overflow of tenant ids it cannot hold, and spelled each tenant's id one
// way.
func PlanFirstRefusals(b FirstRefusalFlush) *RefusalPlan {
	p := &RefusalPlan{budget: b.Budget, overflow: map[budgetKey]overflowCount{}}
	minutes := map[budgetKey]Minute{}
	for _, r := range b.Refusals {
		m := Minute{TenantID: r.TenantID, Start: MinuteOf(r.At)}
		minutes[m.key()] = m
	}
	for _, o := range b.Overflow {
		if o.Count <= 0 {
			continue
		}
		m := Minute{TenantID: o.TenantID, Start: MinuteOf(o.Minute)}
		minutes[m.key()] = m
		p.overflow[m.key()] = p.overflow[m.key()].add(o.At, o.Count)
	}
	p.Minutes = lockOrder(minutes)
	return p
}

// Room is the first refusals l may still have written one by one.
func (p *RefusalPlan) Room(l LockedMinute) int64 { return room(p.budget, l.Entries) }

// RefusalsWritten is what the Store's statement did with one minute's first
// refusals: Written got an entry each; Past found no room, the first of
// them at FirstPastAt.
type RefusalsWritten struct {
	Minute
	Written     int64
	Past        int64
	FirstPastAt time.Time
}

// Settle returns the writes of the locked minutes, in lock order: the
// entries the statement wrote (done), and a flood entry that counts the
// flush's overflow and the first refusals that found no room, made at the
// first of them when the minute has none. Minutes that were not locked (a
// tenant that no longer exists) or have nothing to write are left out.
func (p *RefusalPlan) Settle(locked []LockedMinute, done []RefusalsWritten) []MinuteWrite {
	byKey := make(map[budgetKey]LockedMinute, len(locked))
	for _, l := range locked {
		byKey[l.key()] = l
	}
	written := map[budgetKey]int64{}
	past := maps.Clone(p.overflow)
	for _, d := range done {
		written[d.key()] += d.Written
		if d.Past > 0 {
			past[d.key()] = past[d.key()].add(d.FirstPastAt, d.Past)
		}
	}
	var ws []MinuteWrite
	for _, m := range p.Minutes {
		l, ok := byKey[m.key()]
		if !ok {
			continue
		}
		w := MinuteWrite{Minute: m, Written: written[m.key()]}
		w.spill(l, past[m.key()], func(o overflowCount) Entry {
			return Entry{At: o.at, TenantID: m.TenantID, Actor: ActorTollgate, Kind: KindRefusalFlood, Detail: map[string]any{
				"window_start": m.Start.Format(time.RFC3339),
				"window_end":   m.Start.Add(time.Minute).Format(time.RFC3339),
				"refusals":     o.count,
				"budget":       p.budget,
			}}
		})
		if w.Written > 0 || w.Past > 0 {
			ws = append(ws, w)
		}
	}
	return ws
}

// NotePlan is the arithmetic of Store.RecordNotes. A Store applies it in
// one transaction: it locks Minutes, then writes what Write returns.
type NotePlan struct {
	// Minutes are those the flush's notes and overflow fall in, in the
	// order to lock them.
	Minutes []Minute
	budget  int
	groups  map[budgetKey]*noteGroup
}

// noteGroup is what a flush holds of one minute: the kind and key kind of
// its first note or overflow, its notes, and its overflow.
type noteGroup struct {
	minute   Minute
	kind     string
	sandbox  bool
	notes    []Entry
	overflow overflowCount
}

// PlanNotes plans b. The Store has left out the notes and overflow of
// tenant ids it cannot hold, and spelled each tenant's id one way.
func PlanNotes(b NoteFlush) *NotePlan {
	p := &NotePlan{budget: b.Budget, groups: map[budgetKey]*noteGroup{}}
	minutes := map[budgetKey]Minute{}
	groupOf := func(tenantID, scope, kind string, sandbox bool, at time.Time) *noteGroup {
		m := Minute{TenantID: tenantID, Scope: scope, Start: MinuteOf(at)}
		g := p.groups[m.key()]
		if g == nil {
			g = &noteGroup{minute: m, kind: kind, sandbox: sandbox}
			p.groups[m.key()] = g
			minutes[m.key()] = m
		}
		return g
	}
	for _, n := range b.Notes {
		g := groupOf(n.Entry.TenantID, n.Scope, n.Entry.Kind, n.Sandbox, n.Entry.At)
		g.notes = append(g.notes, n.Entry)
	}
	for _, o := range b.Overflow {
		// An empty count still names its minute, which the Store locks.
		g := groupOf(o.TenantID, o.Scope, o.Kind, o.Sandbox, o.Minute)
		if o.Count > 0 {
			g.overflow = g.overflow.add(o.At, o.Count)
		}
	}
	p.Minutes = lockOrder(minutes)
	return p
}

// Write returns the writes of the locked minutes, in the order of locked:
// each minute's notes in order of time, as many as its budget leaves room
// for, and a flood entry that counts the rest and the flush's overflow,
// made at the first of them when the minute has none. Minutes the flush
// does not name or that have nothing to write are left out.
func (p *NotePlan) Write(locked []LockedMinute) []MinuteWrite {
	var ws []MinuteWrite
	for _, l := range locked {
		g := p.groups[l.key()]
		if g == nil {
			continue
		}
		notes := slices.Clone(g.notes)
		slices.SortStableFunc(notes, func(a, b Entry) int { return a.At.Compare(b.At) })
		n := min(int(room(p.budget, l.Entries)), len(notes))
		past := g.overflow
		if rest := notes[n:]; len(rest) > 0 {
			past = past.add(rest[0].At, int64(len(rest)))
		}
		m := g.minute
		w := MinuteWrite{Minute: m, Written: int64(n)}
		if n > 0 {
			w.Notes = notes[:n:n]
		}
		w.spill(l, past, func(o overflowCount) Entry {
			return Entry{At: o.at, TenantID: m.TenantID, Actor: ActorTollgate, Kind: g.kind + FloodSuffix, Detail: map[string]any{
				"window_start": m.Start.Format(time.RFC3339),
				"window_end":   m.Start.Add(time.Minute).Format(time.RFC3339),
				"entries":      o.count,
				"budget":       p.budget,
				"scope":        m.Scope,
				"sandbox":      g.sandbox,
			}}
		})
		if w.Written > 0 || w.Past > 0 {
			ws = append(ws, w)
		}
	}
	return ws
}
