package redis

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestLaneTakesGroupsInTurn: a group's flood of waiting checks is not a
// queue its neighbours wait at the back of. Behind 1,000 checks of one
// tenant, another's one check goes out in the very next pipeline, and each
// group keeps its own order.
func TestLaneTakesGroupsInTurn(t *testing.T) {
	l := &lane{senders: senders}
	var flood []*job
	for range 1000 {
		j := &job{group: "flood"}
		flood = append(flood, j)
		if err := l.enqueue(j); err != nil {
			t.Fatal(err)
		}
	}
	light := &job{group: "light"}
	if err := l.enqueue(light); err != nil {
		t.Fatal(err)
	}
	first := l.take(nil, maxPipeline)
	if len(first) != maxPipeline {
		t.Fatalf("took %d, want %d", len(first), maxPipeline)
	}
	seen, next := false, 0
	for _, j := range first {
		if j == light {
			seen = true
			continue
		}
		if j != flood[next] {
			t.Fatalf("the flood's checks out of order at %d", next)
		}
		next++
	}
	if !seen {
		t.Fatal("the light tenant's check waits behind the flood's queue: not in the first pipeline")
	}
	if l.queued != 1000+1-maxPipeline || len(l.waiting) != 1 {
		t.Fatalf("after the take: %d queued in %d groups, want %d in 1", l.queued, len(l.waiting), 1000+1-maxPipeline)
	}
	// The rest drains in order, and the emptied group is reused.
	for l.queued > 0 {
		for _, j := range l.take(nil, maxPipeline) {
			if j != flood[next] {
				t.Fatalf("the flood's checks out of order at %d", next)
			}
			next++
		}
	}
	if next != len(flood) || len(l.waiting) != 0 || len(l.groups) != 0 {
		t.Fatalf("drained %d of %d; %d groups still waiting", next, len(flood), len(l.waiting))
	}
}

// TestLaneBoundsEachGroup: a group that holds maxGroupQueue waiting checks
// is refused more, and another group is not.
func TestLaneBoundsEachGroup(t *testing.T) {
	l := &lane{senders: senders}
	for range maxGroupQueue {
		if err := l.enqueue(&job{group: "flood"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.enqueue(&job{group: "flood"}); !errors.Is(err, errOverloaded) {
		t.Fatalf("a group's check past maxGroupQueue: %v, want errOverloaded", err)
	}
	if err := l.enqueue(&job{group: "light"}); err != nil {
		t.Fatalf("another group's check beside a full one: %v", err)
	}
}

// TestBatchLaneTakesWholeBatchesInTurn: the batches' lane hands a sender
// whole batches, one of each group in turn, while they fit in a pipeline
// (the first always): behind a flood's big batches another tenant's batch
// goes out in the next pipeline, and no batch is ever split.
func TestBatchLaneTakesWholeBatchesInTurn(t *testing.T) {
	batch := func(group string, checks, items int) []*job {
		b := make([]*job, checks)
		for i := range b {
			b[i] = &job{group: group, keys: make([]string, items)}
		}
		return b
	}
	var l batchLane
	if !l.add("flood", batch("flood", 1000, 2)) {
		t.Fatal("the first batch of an idle lane started no sender")
	}
	if !l.add("flood", batch("flood", 1000, 2)) {
		t.Fatal("a second sender was free")
	}
	for _, g := range []string{"light", "other", "other"} {
		if l.add(g, batch(g, map[string]int{"light": 16, "other": 8}[g], 1)) {
			t.Fatal("a third sender started")
		}
	}
	groups := func(jobs []*job) []string {
		var gs []string
		for i, j := range jobs {
			if i == 0 || j.group != jobs[i-1].group {
				gs = append(gs, fmt.Sprintf("%s:%d", j.group, 0))
			}
			gs[len(gs)-1] = fmt.Sprintf("%s:%d", j.group, atoi(gs[len(gs)-1])+1)
		}
		return gs
	}
	var got [][]string
	for {
		jobs, ok := l.take(nil)
		if !ok {
			break
		}
		got = append(got, groups(jobs))
	}
	// The flood's first batch (2,000 items), then one batch of each group
	// in turn while the pipeline's 2,048 items hold them: the light's and
	// the other's first; the flood's second needs a pipeline of its own.
	want := [][]string{{"flood:1000", "light:16", "other:8"}, {"flood:1000", "other:8"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pipelines %v, want %v", got, want)
	}
	// One of the two senders ended (the other never ran).
	if l.active != 1 || l.waiting != 0 || len(l.turns) != 0 || len(l.groups) != 0 {
		t.Errorf("emptied lane: active %d, waiting %d, turns %v, groups %d", l.active, l.waiting, l.turns, len(l.groups))
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s[strings.LastIndexByte(s, ':')+1:] {
		n = n*10 + int(c-'0')
	}
	return n
}
