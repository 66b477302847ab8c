package postgres

import "sync"

// CheckBatch's lane. A batch (POST /v1/check/batch, one tenant's) is sent
// neither through the coalesced Checks' lane, where up to a thousand checks
// would take the place of every tenant's single ones, nor at once on a
// connection of its own, where a tenant's flood of batches takes every
// connection of the pool (the Checks' lane then queues behind it in
// pgxpool, and other tenants' checks degrade) and its big statements
// contend on the tenant's rows until they run into statement_timeout. It
// goes through a lane of its own, sized as the Checks' (Config.Inflight
// statements at once, on connections the pool opens for it alone), with
// three rules:
//
//   - At most one statement of a group (a tenant) is in flight on this
//     instance, and the groups waiting are served in turn, round-robin: a
//     tenant's flood of batches queues behind itself, and another tenant's
//     batch waits for at most one statement of each tenant ahead of it.
//   - A batch of more than Config.MaxItems items (512 by default) is cut
//     into statements of at most that many, whole requests each, sent one
//     after the other in its order: no statement of a big batch runs long
//     enough, on a busy server, to reach statement_timeout (each item costs
//     the database some 7 to 15 µs), and each lets the other groups' turns
//     in. A batch within the bound stays one statement, one round trip.
//   - The statements a group has waiting when its turn comes are sent as
//     one, up to MaxItems items and never cutting one of them (whole
//     batches of the client's 16 or 100 checks), as the coalescer does for
//     Checks: a tenant's concurrent batches cost the database one call a
//     turn, not one each. The groups next in turn join that statement while
//     their waiting statements fit in it, in turn (none overtakes a group
//     ahead of it that does not fit): many tenants' small batches cost one
//     call, not one a tenant.
//
// A caller waiting in the lane behind its own tenant's statements waits
// while the store answers (await, unbounded), not for a fixed time: its
// own statement, once sent, is bounded by send's deadline. The gate bounds
// what one tenant has in progress on an instance (TOLLGATE_TENANT_INFLIGHT),
// and so how long its lane can grow.

// fairLane queues the statements of CheckBatch by group and hands them to
// at most max senders at once, one group's at a time (see above). It is
// safe for concurrent use.
type fairLane struct {
	mu      sync.Mutex
	max     int // senders at most: statements in flight
	senders int
	// groups holds the groups with statements waiting or one in flight;
	// turns those with statements waiting and none in flight, in the order
	// they are served.
	groups map[string]*laneGroup
	turns  []*laneGroup
	closed bool
}

// laneGroup is one group's place in a fairLane.
type laneGroup struct {
	name    string
	waiting []batchPart
	busy    bool // a statement of the group is in flight
}

// batchPart is whole requests of one batch, in order, of at most MaxItems
// items unless it is a single request: the most a statement of the batch
// holds.
type batchPart struct {
	calls []*call
	items int
	// now is the batch's instant (Unix µs), or nil for the database's.
	now *int64
}

// cut splits calls, in order, into parts of whole requests of at most
// maxItems items each (a request of more is a part of its own), at
// instant now.
func cut(calls []*call, maxItems int, now *int64) []batchPart {
	var parts []batchPart
	first, items := 0, 0
	for i, c := range calls {
		n := len(c.req.Items)
		if i > first && items+n > maxItems {
			parts = append(parts, batchPart{calls: calls[first:i:i], items: items, now: now})
			first, items = i, 0
		}
		items += n
	}
	return append(parts, batchPart{calls: calls[first:len(calls):len(calls)], items: items, now: now})
}

// add queues a batch's parts, in order, under group. It reports whether
// the caller is to start a sender (l.next's loop), and false for ok when
// the lane is closed.
func (l *fairLane) add(group string, parts []batchPart) (start, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false, false
	}
	if l.groups == nil {
		l.groups = make(map[string]*laneGroup)
	}
	g := l.groups[group]
	if g == nil {
		g = &laneGroup{name: group}
		l.groups[group] = g
	}
	if len(g.waiting) == 0 && !g.busy {
		l.turns = append(l.turns, g)
	}
	g.waiting = append(g.waiting, parts...)
	if len(l.turns) > 0 && l.senders < l.max {
		l.senders++
		return true, true
	}
	return false, true
}

// next takes the next statement: the waiting parts of the group whose turn
// it is, from its first, merged while they hold at most maxItems items in
// all and name the same instant; then, while the statement has room, those
// of the groups next in turn, each group's whole parts in order (a group
// whose first part does not fit ends the statement: no group overtakes
// another). The calls are in a slice of their own (send filters it in
// place). Every group in the statement is busy until done. A sender calls
// next until ok is false, which ends the sender, and calls done for each of
// the statement's groups after it.
//
// Many tenants' batches in one statement: with one tenant's batches a
// statement, a hundred tenants' batches of 16 went as statements of about
// 20 checks, and each statement's round trip cost Tollgate and PostgreSQL
// more than its checks did (docs/benchmarks.md, How cost grows).
func (l *fairLane) next(maxItems int) (gs []*laneGroup, calls []*call, now *int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.turns) == 0 {
		l.senders--
		return nil, nil, nil, false
	}
	first := l.turns[0].waiting[0]
	now, items := first.now, 0
	taken := 0
	for _, g := range l.turns {
		n, more := 0, items
		for n < len(g.waiting) && sameNow(g.waiting[n].now, now) && (more == 0 || more+g.waiting[n].items <= maxItems) {
			more += g.waiting[n].items
			n++
		}
		if n == 0 {
			break
		}
		items = more
		g.busy = true
		gs = append(gs, g)
		for _, p := range g.waiting[:n] {
			calls = append(calls, p.calls...)
		}
		clear(g.waiting[:n])
		g.waiting = g.waiting[n:]
		taken++
	}
	clear(l.turns[:taken])
	l.turns = l.turns[taken:]
	return gs, calls, now, true
}

// done ends g's statement in flight: g takes its turn behind the groups
// waiting, if it has statements waiting itself.
func (l *fairLane) done(g *laneGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g.busy = false
	if len(g.waiting) > 0 {
		l.turns = append(l.turns, g)
	} else {
		delete(l.groups, g.name)
	}
}

// close closes l and returns the calls still waiting, for their callers to
// be told; statements in flight finish.
func (l *fairLane) close() []*call {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var rest []*call
	for _, g := range l.groups {
		for _, p := range g.waiting {
			rest = append(rest, p.calls...)
		}
		g.waiting = nil
	}
	l.turns = nil
	return rest
}

// sameNow reports whether a and b name the same instant, or are both the
// database's.
func sameNow(a, b *int64) bool {
	return a == b || a != nil && b != nil && *a == *b
}
