package postgres

// The batches' lane as pure logic: which statement goes next, without a
// database or a clock.

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/counter"
)

// laneRun drives a fairLane as its senders would: next takes a statement
// and notes its group in flight, done ends that group's statement.
type laneRun struct {
	t      *testing.T
	l      *fairLane
	flying map[string]*laneGroup
}

func newLaneRun(t *testing.T, senders int) *laneRun {
	return &laneRun{t: t, l: &fairLane{max: senders}, flying: map[string]*laneGroup{}}
}

// add queues a batch, named label, of requests of items items each, in
// group, cut at maxItems items; it returns whether a sender is to start.
func (r *laneRun) add(group, label string, requests, items, maxItems int, now *int64) bool {
	r.t.Helper()
	calls := make([]*call, requests)
	for i := range calls {
		calls[i] = &call{req: counter.Request{Group: group, Items: make([]counter.Item, items)}}
		calls[i].req.Items[0].Key = label
	}
	start, ok := r.l.add(group, cut(calls, maxItems, now))
	if !ok {
		r.t.Fatalf("add %s: lane closed", label)
	}
	return start
}

// next returns the labels of the next statement's batches, joined by "+",
// and its size ("a1+a2 32"), or "" when no statement is due.
func (r *laneRun) next(maxItems int) string {
	r.t.Helper()
	gs, calls, _, ok := r.l.next(maxItems)
	if !ok {
		return ""
	}
	for _, g := range gs {
		if r.flying[g.name] != nil {
			r.t.Fatalf("group %s: a second statement in flight", g.name)
		}
		r.flying[g.name] = g
	}
	var labels []string
	items := 0
	for _, c := range calls {
		items += len(c.req.Items)
		if l := c.req.Items[0].Key; len(labels) == 0 || labels[len(labels)-1] != l {
			labels = append(labels, l)
		}
	}
	return fmt.Sprintf("%s %d", strings.Join(labels, "+"), items)
}

func (r *laneRun) done(group string) {
	r.t.Helper()
	if r.flying[group] == nil {
		r.t.Fatalf("done %s: no statement of it in flight", group)
	}
	r.l.done(r.flying[group])
	delete(r.flying, group)
}

// TestFairLaneOrder holds the lane to its rules: one statement of a group
// in flight at a time, the groups waiting served in turn, a batch cut into
// statements of at most MaxItems items, and a group's waiting batches sent
// as one statement when they fit.
func TestFairLaneOrder(t *testing.T) {
	t.Parallel()
	const max = 512
	cases := []struct {
		name string
		run  func(r *laneRun) []string
		want []string
	}{
		{
			name: "a flood queues behind itself, not ahead of another group's batch",
			run: func(r *laneRun) []string {
				r.add("a", "a1", 1000, 1, max, nil)
				r.add("a", "a2", 1000, 1, max, nil)
				got := []string{r.next(max)}
				r.add("b", "b1", 100, 1, max, nil)
				r.add("a", "a3", 1000, 1, max, nil)
				for _, g := range []string{"a", "b", "a", "a", "a", "a"} {
					r.done(g)
					got = append(got, r.next(max))
				}
				return got
			},
			want: []string{"a1 512", "b1 100", "a1 488", "a2 512", "a2 488", "a3 512", "a3 488"},
		},
		{
			name: "groups waiting are served in turn",
			run: func(r *laneRun) []string {
				r.add("a", "a1", 2000, 1, max, nil)
				got := []string{r.next(max)}
				r.add("c", "c1", 1024, 1, max, nil)
				r.add("b", "b1", 16, 1, max, nil)
				for _, g := range []string{"a", "c", "b", "a", "c", "a"} {
					r.done(g)
					got = append(got, r.next(max))
				}
				return got
			},
			want: []string{"a1 512", "c1 512", "b1 16", "a1 512", "c1 512", "a1 512", "a1 464"},
		},
		{
			name: "a group's waiting batches go as one statement, none of them cut",
			run: func(r *laneRun) []string {
				r.add("a", "a1", 16, 1, max, nil)
				got := []string{r.next(max)}
				r.add("a", "a2", 16, 1, max, nil)
				r.add("a", "a3", 100, 4, max, nil)
				r.add("a", "a4", 100, 1, max, nil)
				r.add("a", "a5", 16, 1, max, nil)
				for range 3 {
					r.done("a")
					got = append(got, r.next(max))
				}
				return got
			},
			want: []string{"a1 16", "a2+a3 416", "a4+a5 116", ""},
		},
		{
			name: "the groups next in turn join a statement while their batches fit, none overtaking another",
			run: func(r *laneRun) []string {
				r.add("a", "a1", 16, 1, max, nil)
				got := []string{r.next(max)}
				r.add("b", "b1", 16, 1, max, nil)
				r.add("c", "c1", 100, 1, max, nil)
				r.add("b", "b2", 16, 1, max, nil)
				r.add("d", "d1", 400, 1, max, nil)
				r.add("e", "e1", 1, 1, max, nil)
				r.add("a", "a2", 16, 1, max, nil)
				r.done("a")
				got = append(got, r.next(max))
				for _, g := range []string{"b", "c"} {
					r.done(g)
				}
				got = append(got, r.next(max), r.next(max))
				return got
			},
			want: []string{"a1 16", "b1+b2+c1 132", "d1+e1+a2 417", ""},
		},
		{
			name: "requests are never cut, and one of more items than the bound is a statement of its own",
			run: func(r *laneRun) []string {
				r.add("a", "a1", 300, 3, max, nil)
				got := []string{r.next(max)}
				r.add("a", "a2", 3, 40, 32, nil)
				for range 4 {
					r.done("a")
					got = append(got, r.next(32))
				}
				return got
			},
			want: []string{"a1 510", "a1 390", "a2 40", "a2 40", "a2 40"},
		},
		{
			name: "batches at different instants are not merged",
			run: func(r *laneRun) []string {
				one, two := int64(1), int64(2)
				r.add("a", "a1", 1, 1, max, nil)
				got := []string{r.next(max)}
				r.add("a", "a2", 1, 1, max, &one)
				r.add("a", "a3", 1, 1, max, &one)
				r.add("a", "a4", 1, 1, max, &two)
				r.add("a", "a5", 1, 1, max, nil)
				for range 3 {
					r.done("a")
					got = append(got, r.next(max))
				}
				return got
			},
			want: []string{"a1 1", "a2+a3 2", "a4 1", "a5 1"},
		},
		{
			name: "one statement of a group in flight, whatever the senders",
			run: func(r *laneRun) []string {
				r.add("a", "a1", 600, 1, max, nil)
				got := []string{r.next(max), r.next(max)}
				r.add("a", "a2", 1, 1, max, nil)
				r.add("b", "b1", 1, 1, max, nil)
				got = append(got, r.next(max), r.next(max))
				r.done("a")
				r.done("b")
				return append(got, r.next(max), r.next(max))
			},
			want: []string{"a1 512", "", "b1 1", "", "a1+a2 89", ""},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.run(newLaneRun(t, 2)); !slices.Equal(got, c.want) {
				t.Errorf("statements\n got  %q\n want %q", got, c.want)
			}
		})
	}
}

// TestFairLaneStartsSenders: a sender is started for a group due while
// fewer than the lane's senders run, and a running one takes the groups
// due after it; a closed lane hands back what waits and refuses more.
func TestFairLaneStartsSenders(t *testing.T) {
	t.Parallel()
	r := newLaneRun(t, 1)
	if !r.add("a", "a1", 1, 1, 512, nil) {
		t.Fatal("first batch of an idle lane: no sender started")
	}
	if r.add("b", "b1", 1, 1, 512, nil) {
		t.Error("second group with one sender running: another started")
	}
	if got := r.next(512); got != "a1+b1 2" {
		t.Fatalf("first statement %q, want a1+b1", got)
	}
	r.add("a", "a2", 1, 1, 512, nil)
	r.done("a")
	if rest := r.l.close(); len(rest) != 1 || rest[0].req.Items[0].Key != "a2" {
		t.Errorf("close handed back %d calls, want a2's one", len(rest))
	}
	r.done("b")
	if got := r.next(512); got != "" {
		t.Errorf("closed lane sent %q", got)
	}
	if _, ok := r.l.add("a", cut([]*call{{req: counter.Request{Items: make([]counter.Item, 1)}}}, 512, nil)); ok {
		t.Error("closed lane took a batch")
	}
}
