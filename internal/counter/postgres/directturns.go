package postgres

import (
	"context"
	"sync"
)

// groupTurns lets one direct call of each group at a time take a
// connection the store keeps for calls outside its lanes (direct); the
// group's other calls wait their turn, holding nothing. A group's calls that stall (on its own rows' locks, or queued on
// its reservations' advisory lock, which lets one through at a time across
// instances anyway) hold one of those connections, and every other group
// finds the rest: with the default pool on up to four CPUs there are two.
//
// Before, the connections went first come, first served: a tenant's flood
// of reservations held them all, each waiting at the database for the one
// ahead of it, and another tenant's reset waited behind the whole flood,
// past its deadline (the fault suite's reservations-postgres phase, on a
// loaded box; TestDirectCallsTakeTurnsByGroup).
type groupTurns struct {
	mu    sync.Mutex
	turns map[string]*turn
}

// turn is one group's: its token, and how many calls hold or wait for it.
type turn struct {
	token chan struct{}
	calls int
}

// take waits for group's turn until ctx ends, and returns what gives it
// back.
func (g *groupTurns) take(ctx context.Context, group string) (func(), error) {
	g.mu.Lock()
	if g.turns == nil {
		g.turns = map[string]*turn{}
	}
	t := g.turns[group]
	if t == nil {
		t = &turn{token: make(chan struct{}, 1)}
		g.turns[group] = t
	}
	t.calls++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if t.calls--; t.calls == 0 {
			delete(g.turns, group)
		}
		g.mu.Unlock()
	}
	select {
	case t.token <- struct{}{}:
		return func() { <-t.token; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
