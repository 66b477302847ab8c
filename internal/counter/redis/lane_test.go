package redis

import (
	"errors"
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
