package audit_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
)

// The planners of the minutes' audit budgets are pure: these tests give
// them flushes and locked rows and read what they plan. flood_test.go and
// bounds_test.go hold the same rules over the real store.

const (
	tenantA = "0190a1b2-0000-7000-8000-00000000000a"
	tenantB = "0190a1b2-0000-7000-8000-00000000000b"
)

// at reads an RFC 3339 instant of a test's table.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func minute(t *testing.T, tenantID, scope, start string) audit.Minute {
	return audit.Minute{TenantID: tenantID, Scope: scope, Start: at(t, start).UTC()}
}

func TestMinuteOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, at, want string
	}{
		{"within a minute", "2026-03-02T10:00:59.999Z", "2026-03-02T10:00:00Z"},
		{"on the minute", "2026-03-02T10:01:00Z", "2026-03-02T10:01:00Z"},
		{"another zone, a UTC minute", "2026-03-02T05:30:15-05:00", "2026-03-02T10:30:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, want := audit.MinuteOf(at(t, tt.at)), at(t, tt.want)
			if !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("MinuteOf(%s) = %v, want %v in UTC", tt.at, got, want)
			}
		})
	}
}

func TestPlanFirstRefusalsLocksItsMinutesInOrder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		b    audit.FirstRefusalFlush
		want []audit.Minute
	}{
		{name: "nothing", b: audit.FirstRefusalFlush{Budget: 50}},
		{
			name: "refusals and overflow, by tenant then minute",
			b: audit.FirstRefusalFlush{Budget: 50,
				Refusals: []audit.FirstRefusal{
					{TenantID: tenantB, Key: "k1", At: at(t, "2026-03-02T10:00:30Z")},
					{TenantID: tenantA, Key: "k2", At: at(t, "2026-03-02T10:01:10Z")},
					{TenantID: tenantA, Key: "k3", At: at(t, "2026-03-02T10:00:05Z")},
					{TenantID: tenantA, Key: "k4", At: at(t, "2026-03-02T10:00:45Z")},
				},
				Overflow: []audit.RefusalOverflow{
					{TenantID: tenantA, Minute: at(t, "2026-03-02T09:59:00Z"), At: at(t, "2026-03-02T09:59:10Z"), Count: 2},
				},
			},
			want: []audit.Minute{
				minute(t, tenantA, "", "2026-03-02T09:59:00Z"),
				minute(t, tenantA, "", "2026-03-02T10:00:00Z"),
				minute(t, tenantA, "", "2026-03-02T10:01:00Z"),
				minute(t, tenantB, "", "2026-03-02T10:00:00Z"),
			},
		},
		{
			name: "an empty overflow names no minute",
			b: audit.FirstRefusalFlush{Budget: 50, Overflow: []audit.RefusalOverflow{
				{TenantID: tenantA, Minute: at(t, "2026-03-02T10:00:00Z"), At: at(t, "2026-03-02T10:00:10Z")},
			}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := audit.PlanFirstRefusals(tt.b).Minutes; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Minutes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRoomIsWhatTheBudgetLeaves(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name           string
		budget         int
		entries        int64
		wantRefusals   int64
		wantNotesFirst int // notes written one by one of 3
	}{
		{"untouched", 50, 0, 50, 3},
		{"partly spent", 50, 48, 2, 2},
		{"spent", 50, 50, 0, 0},
		{"spent past a budget lowered since", 50, 70, 0, 0},
		{"no budget", 0, 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := minute(t, tenantA, "counter_reset", "2026-03-02T10:00:00Z")
			l := audit.LockedMinute{Minute: m, Entries: tt.entries}
			if got := audit.PlanFirstRefusals(audit.FirstRefusalFlush{Budget: tt.budget}).Room(l); got != tt.wantRefusals {
				t.Errorf("RefusalPlan.Room = %d, want %d", got, tt.wantRefusals)
			}
			var notes []audit.Note
			for i := range 3 {
				notes = append(notes, note(m, at(t, "2026-03-02T10:00:00Z").Add(time.Duration(i)*time.Second), false))
			}
			ws := audit.PlanNotes(audit.NoteFlush{Budget: tt.budget, Notes: notes}).Write([]audit.LockedMinute{l})
			if len(ws) != 1 || len(ws[0].Notes) != tt.wantNotesFirst || ws[0].Written != int64(tt.wantNotesFirst) {
				t.Errorf("NotePlan.Write = %+v, want %d notes written", ws, tt.wantNotesFirst)
			}
		})
	}
}

// refusalFlood is the flood entry a plan makes for m.
func refusalFlood(m audit.Minute, firstAt time.Time, refusals int64, budget int) *audit.Entry {
	return &audit.Entry{At: firstAt, TenantID: m.TenantID, Actor: audit.ActorTollgate, Kind: audit.KindRefusalFlood,
		Detail: map[string]any{
			"window_start": m.Start.Format(time.RFC3339), "window_end": m.Start.Add(time.Minute).Format(time.RFC3339),
			"refusals": refusals, "budget": budget,
		}}
}

func TestRefusalPlanSettle(t *testing.T) {
	t.Parallel()
	a10 := minute(t, tenantA, "", "2026-03-02T10:00:00Z")
	a11 := minute(t, tenantA, "", "2026-03-02T10:01:00Z")
	b10 := minute(t, tenantB, "", "2026-03-02T10:00:00Z")
	refusal := func(m audit.Minute, key, when string) audit.FirstRefusal {
		return audit.FirstRefusal{TenantID: m.TenantID, Key: key, At: at(t, when)}
	}
	overflow := func(m audit.Minute, when string, n int64) audit.RefusalOverflow {
		return audit.RefusalOverflow{TenantID: m.TenantID, Minute: m.Start, At: at(t, when), Count: n}
	}
	for _, tt := range []struct {
		name     string
		refusals []audit.FirstRefusal
		overflow []audit.RefusalOverflow
		locked   []audit.LockedMinute
		done     []audit.RefusalsWritten
		want     []audit.MinuteWrite
	}{
		{
			name:     "within the budget: the minute gains what was written, no flood",
			refusals: []audit.FirstRefusal{refusal(a10, "k1", "2026-03-02T10:00:01Z"), refusal(a10, "k2", "2026-03-02T10:00:02Z")},
			locked:   []audit.LockedMinute{{Minute: a10, Entries: 3}},
			done:     []audit.RefusalsWritten{{Minute: a10, Written: 2, FirstPastAt: a10.Start}},
			want:     []audit.MinuteWrite{{Minute: a10, Written: 2}},
		},
		{
			name:     "past the room: a new flood entry from the first refusal past it",
			refusals: []audit.FirstRefusal{refusal(a10, "k1", "2026-03-02T10:00:01Z")},
			locked:   []audit.LockedMinute{{Minute: a10, Entries: 48}},
			done:     []audit.RefusalsWritten{{Minute: a10, Written: 2, Past: 3, FirstPastAt: at(t, "2026-03-02T10:00:20Z")}},
			want: []audit.MinuteWrite{{Minute: a10, Written: 2, Past: 3,
				NewFlood: refusalFlood(a10, at(t, "2026-03-02T10:00:20Z"), 3, 50)}},
		},
		{
			name:     "a minute with a flood entry grows it",
			refusals: []audit.FirstRefusal{refusal(a10, "k1", "2026-03-02T10:00:01Z")},
			locked:   []audit.LockedMinute{{Minute: a10, Entries: 50, FloodID: 7}},
			done:     []audit.RefusalsWritten{{Minute: a10, Past: 4, FirstPastAt: at(t, "2026-03-02T10:00:20Z")}},
			want:     []audit.MinuteWrite{{Minute: a10, Past: 4, FloodID: 7}},
		},
		{
			name:     "overflow and refusals past the room add up, from the earliest",
			refusals: []audit.FirstRefusal{refusal(a10, "k1", "2026-03-02T10:00:01Z")},
			overflow: []audit.RefusalOverflow{overflow(a10, "2026-03-02T10:00:40Z", 2), overflow(a10, "2026-03-02T10:00:15Z", 1)},
			locked:   []audit.LockedMinute{{Minute: a10, Entries: 50}},
			done:     []audit.RefusalsWritten{{Minute: a10, Past: 3, FirstPastAt: at(t, "2026-03-02T10:00:20Z")}},
			want: []audit.MinuteWrite{{Minute: a10, Past: 6,
				NewFlood: refusalFlood(a10, at(t, "2026-03-02T10:00:15Z"), 6, 50)}},
		},
		{
			name:     "overflow alone makes the flood entry",
			overflow: []audit.RefusalOverflow{overflow(a11, "2026-03-02T10:01:05Z", 9)},
			locked:   []audit.LockedMinute{{Minute: a11}},
			want: []audit.MinuteWrite{{Minute: a11, Past: 9,
				NewFlood: refusalFlood(a11, at(t, "2026-03-02T10:01:05Z"), 9, 50)}},
		},
		{
			name:     "a minute not locked (its tenant is gone) is left out",
			refusals: []audit.FirstRefusal{refusal(a10, "k1", "2026-03-02T10:00:01Z")},
			overflow: []audit.RefusalOverflow{overflow(b10, "2026-03-02T10:00:05Z", 1)},
			locked:   []audit.LockedMinute{{Minute: a10}},
			done:     []audit.RefusalsWritten{{Minute: a10, Written: 1, FirstPastAt: a10.Start}},
			want:     []audit.MinuteWrite{{Minute: a10, Written: 1}},
		},
		{
			name:     "refusals another instance wrote first leave the minute out",
			refusals: []audit.FirstRefusal{refusal(a10, "k1", "2026-03-02T10:00:01Z")},
			locked:   []audit.LockedMinute{{Minute: a10, Entries: 1}},
		},
		{
			name: "in lock order, whatever the order of the rows read",
			refusals: []audit.FirstRefusal{
				refusal(b10, "k1", "2026-03-02T10:00:01Z"), refusal(a11, "k2", "2026-03-02T10:01:01Z"), refusal(a10, "k3", "2026-03-02T10:00:02Z"),
			},
			locked: []audit.LockedMinute{{Minute: b10}, {Minute: a11}, {Minute: a10}},
			done: []audit.RefusalsWritten{
				{Minute: a11, Written: 1, FirstPastAt: a11.Start}, {Minute: b10, Written: 1, FirstPastAt: b10.Start},
				{Minute: a10, Written: 1, FirstPastAt: a10.Start},
			},
			want: []audit.MinuteWrite{{Minute: a10, Written: 1}, {Minute: a11, Written: 1}, {Minute: b10, Written: 1}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := audit.PlanFirstRefusals(audit.FirstRefusalFlush{Budget: 50, Refusals: tt.refusals, Overflow: tt.overflow})
			if got := p.Settle(tt.locked, tt.done); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Settle =\n%s\nwant\n%s", writes(got), writes(tt.want))
			}
		})
	}
}

// note is a counter reset noted in m at when.
func note(m audit.Minute, when time.Time, sandbox bool) audit.Note {
	return audit.Note{Scope: m.Scope, Sandbox: sandbox, Entry: audit.Entry{
		At: when, TenantID: m.TenantID, Actor: "key k_1", Kind: audit.KindCounterReset,
		Detail: map[string]any{"at": when.Format(time.RFC3339Nano)},
	}}
}

// noteFlood is the flood entry a plan makes for m.
func noteFlood(m audit.Minute, firstAt time.Time, entries int64, budget int, sandbox bool) *audit.Entry {
	return &audit.Entry{At: firstAt, TenantID: m.TenantID, Actor: audit.ActorTollgate, Kind: audit.KindCounterReset + audit.FloodSuffix,
		Detail: map[string]any{
			"window_start": m.Start.Format(time.RFC3339), "window_end": m.Start.Add(time.Minute).Format(time.RFC3339),
			"entries": entries, "budget": budget, "scope": m.Scope, "sandbox": sandbox,
		}}
}

func TestNotePlanWrite(t *testing.T) {
	t.Parallel()
	live := minute(t, tenantA, audit.KindCounterReset, "2026-03-02T10:00:00Z")
	sandbox := minute(t, tenantA, audit.KindCounterReset+":sandbox", "2026-03-02T10:00:00Z")
	next := minute(t, tenantA, audit.KindCounterReset, "2026-03-02T10:01:00Z")
	other := minute(t, tenantB, audit.KindCounterReset, "2026-03-02T10:00:00Z")
	sec := func(m audit.Minute, s int) time.Time { return m.Start.Add(time.Duration(s) * time.Second) }
	entries := func(ns ...audit.Note) []audit.Entry {
		var es []audit.Entry
		for _, n := range ns {
			es = append(es, n.Entry)
		}
		return es
	}
	n1, n2, n3, n4 := note(live, sec(live, 30), false), note(live, sec(live, 10), false), note(live, sec(live, 20), false), note(live, sec(live, 40), false)
	for _, tt := range []struct {
		name     string
		budget   int
		notes    []audit.Note
		overflow []audit.NoteOverflow
		locked   []audit.LockedMinute
		wantLock []audit.Minute
		want     []audit.MinuteWrite
	}{
		{
			name: "within the budget: every note, in order of time", budget: 50,
			notes:    []audit.Note{n1, n2, n3},
			locked:   []audit.LockedMinute{{Minute: live, Entries: 5}},
			wantLock: []audit.Minute{live},
			want:     []audit.MinuteWrite{{Minute: live, Notes: entries(n2, n3, n1), Written: 3}},
		},
		{
			name: "past the budget: the rest in a new flood entry from the first of them", budget: 3,
			notes:    []audit.Note{n1, n2, n3, n4},
			locked:   []audit.LockedMinute{{Minute: live, Entries: 1}},
			wantLock: []audit.Minute{live},
			want: []audit.MinuteWrite{{Minute: live, Notes: entries(n2, n3), Written: 2, Past: 2,
				NewFlood: noteFlood(live, sec(live, 30), 2, 3, false)}},
		},
		{
			name: "spent: the flood entry the minute has grows", budget: 3,
			notes:    []audit.Note{n1, n2},
			overflow: []audit.NoteOverflow{{TenantID: tenantA, Scope: live.Scope, Kind: audit.KindCounterReset, Minute: live.Start, At: sec(live, 5), Count: 4}},
			locked:   []audit.LockedMinute{{Minute: live, Entries: 3, FloodID: 11}},
			wantLock: []audit.Minute{live},
			want:     []audit.MinuteWrite{{Minute: live, Past: 6, FloodID: 11}},
		},
		{
			name: "overflow alone, from its first", budget: 50,
			overflow: []audit.NoteOverflow{{TenantID: tenantA, Scope: sandbox.Scope, Kind: audit.KindCounterReset, Sandbox: true, Minute: sandbox.Start, At: sec(sandbox, 7), Count: 12}},
			locked:   []audit.LockedMinute{{Minute: sandbox}},
			wantLock: []audit.Minute{sandbox},
			want:     []audit.MinuteWrite{{Minute: sandbox, Past: 12, NewFlood: noteFlood(sandbox, sec(sandbox, 7), 12, 50, true)}},
		},
		{
			name: "an empty overflow still names its minute, which has nothing to write", budget: 50,
			overflow: []audit.NoteOverflow{{TenantID: tenantA, Scope: live.Scope, Kind: audit.KindCounterReset, Minute: live.Start, At: sec(live, 1)}},
			locked:   []audit.LockedMinute{{Minute: live}},
			wantLock: []audit.Minute{live},
		},
		{
			name: "sandbox keys spend a budget of their own", budget: 1,
			notes:    []audit.Note{n2, note(sandbox, sec(sandbox, 15), true), n3},
			locked:   []audit.LockedMinute{{Minute: live}, {Minute: sandbox}},
			wantLock: []audit.Minute{live, sandbox},
			want: []audit.MinuteWrite{
				{Minute: live, Notes: entries(n2), Written: 1, Past: 1, NewFlood: noteFlood(live, sec(live, 20), 1, 1, false)},
				{Minute: sandbox, Notes: entries(note(sandbox, sec(sandbox, 15), true)), Written: 1},
			},
		},
		{
			name: "in the order of the rows read; a minute not read (its tenant is gone) is left out", budget: 50,
			notes:    []audit.Note{note(other, sec(other, 1), false), note(next, sec(next, 1), false), n1},
			locked:   []audit.LockedMinute{{Minute: next}, {Minute: live}},
			wantLock: []audit.Minute{live, next, other},
			want: []audit.MinuteWrite{
				{Minute: next, Notes: entries(note(next, sec(next, 1), false)), Written: 1},
				{Minute: live, Notes: entries(n1), Written: 1},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := audit.PlanNotes(audit.NoteFlush{Budget: tt.budget, Notes: tt.notes, Overflow: tt.overflow})
			if !reflect.DeepEqual(p.Minutes, tt.wantLock) {
				t.Errorf("Minutes = %v, want %v", p.Minutes, tt.wantLock)
			}
			if got := p.Write(tt.locked); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Write =\n%s\nwant\n%s", writes(got), writes(tt.want))
			}
		})
	}
}

// writes prints minute writes for a failure.
func writes(ws []audit.MinuteWrite) string {
	var s string
	for _, w := range ws {
		s += fmt.Sprintf("  %s %s %q written %d past %d flood %d", w.Start.Format(time.RFC3339), w.TenantID, w.Scope, w.Written, w.Past, w.FloodID)
		for _, e := range w.Notes {
			s += " note@" + e.At.Format(time.RFC3339)
		}
		if w.NewFlood != nil {
			s += fmt.Sprintf(" new flood %+v", *w.NewFlood)
		}
		s += "\n"
	}
	return s
}
