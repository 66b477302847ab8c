package postgres

import (
	"context"
	"slices"
	"sync"
)

// directShare hands out the connections the store keeps for calls outside
// its lanes (Reset, Held, reservations, settlements, charges, pruning) by
// group, a tenant's calls being its group's:
//
//   - A group holds at most all but one of them at once (all of them when
//     there is one): a group whose calls stall (on its own rows' locks, on
//     its own slow statements) leaves a connection to the others.
//   - A connection that comes free goes to the groups waiting in turn,
//     round-robin, each group's calls in the order they came: a group's
//     flood of calls queues behind itself, and another group's call waits
//     for at most one call of each group ahead of it.
//
// Before, the connections went first come, first served: one tenant's
// flood of reservations (each call short, but many) put every other
// tenant's settlement behind all of it, past its deadline.
type directShare struct {
	mu   sync.Mutex
	free int
	max  int // the most one group holds at once
	held map[string]int
	// waiting holds each group's calls waiting, in order; turns the groups
	// with calls waiting, in the order they are served.
	waiting map[string][]*directWaiter
	turns   []string
}

// directWaiter is one call waiting for a connection; ready is closed when
// it has one.
type directWaiter struct {
	ready   chan struct{}
	granted bool
}

func newDirectShare(n int) *directShare {
	return &directShare{free: n, max: max(1, n-1), held: map[string]int{}, waiting: map[string][]*directWaiter{}}
}

// acquire waits for a connection for one of group's calls, until ctx ends.
func (d *directShare) acquire(ctx context.Context, group string) error {
	d.mu.Lock()
	// A free connection the group may hold, and none of its own calls
	// before this one: at once. (Other groups' calls may be waiting: for
	// their own share, which this does not take.)
	if d.free > 0 && d.held[group] < d.max && len(d.waiting[group]) == 0 {
		d.free--
		d.held[group]++
		d.mu.Unlock()
		return nil
	}
	w := &directWaiter{ready: make(chan struct{})}
	if len(d.waiting[group]) == 0 {
		d.turns = append(d.turns, group)
	}
	d.waiting[group] = append(d.waiting[group], w)
	d.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	d.mu.Lock()
	if w.granted {
		// Given a connection as it gave up: handed on.
		d.mu.Unlock()
		d.release(group)
		return ctx.Err()
	}
	q := d.waiting[group]
	if i := slices.Index(q, w); i >= 0 {
		q = slices.Delete(q, i, i+1)
	}
	if len(q) == 0 {
		delete(d.waiting, group)
		d.turns = slices.DeleteFunc(d.turns, func(g string) bool { return g == group })
	} else {
		d.waiting[group] = q
	}
	d.mu.Unlock()
	return ctx.Err()
}

// release gives back a connection one of group's calls held.
func (d *directShare) release(group string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[group]--; d.held[group] <= 0 {
		delete(d.held, group)
	}
	d.free++
	d.grant()
}

// grant hands the free connections to the groups waiting, in turn: the
// first group in turns below its share gets one for its first call, and
// goes to the back of the turns if it has more waiting. Its caller holds
// d.mu.
func (d *directShare) grant() {
	for d.free > 0 {
		i := slices.IndexFunc(d.turns, func(g string) bool { return d.held[g] < d.max })
		if i < 0 {
			return
		}
		g := d.turns[i]
		d.turns = slices.Delete(d.turns, i, i+1)
		q := d.waiting[g]
		w := q[0]
		q[0] = nil
		if q = q[1:]; len(q) > 0 {
			d.waiting[g] = q
			d.turns = append(d.turns, g)
		} else {
			delete(d.waiting, g)
		}
		w.granted = true
		close(w.ready)
		d.free--
		d.held[g]++
	}
}
