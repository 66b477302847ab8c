package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres/sqlcgen"
	"github.com/tollgate/tollgate/internal/limit"
)

// Lease operations are coalesced as Checks are, on a lane of their own:
// acquires, renewals and releases arriving while a statement of them is in
// the database gather into the next one, and a statement is one call of
// tollgate_lease_ops (migrations/000016_lease_ops.up.sql), one transaction,
// decided in arrival order. A burst on one hot key then costs one
// connection and one turn of the key's lock a statement, instead of a
// connection each waiting for the lock: no burst of leases, however large,
// holds more than the lane's one connection, and Checks keep theirs.

// Kinds of lease operation, as tollgate_lease_ops numbers them.
const (
	opAcquire int16 = 1
	opRenew   int16 = 2
	opRelease int16 = 3
)

// Statuses of a refused acquire, as tollgate_lease_ops answers them.
const (
	statusIDInUse   = 1
	statusGroupFull = 4
	maxLeaseOps     = 512
)

// leaseOp is one lease operation on its way through a statement.
type leaseOp struct {
	kind int16
	acq  counter.Acquire  // opAcquire
	ref  counter.LeaseRef // opRenew, opRelease
	// done receives one value once the answer or err is set; it has room
	// for it, so that answering never waits for the caller.
	done chan struct{}
	// The answer: the acquire's ceiling rows and lease row, or the
	// renewal's or release's row.
	ceil []sqlcgen.LeaseOpsRow
	row  sqlcgen.LeaseOpsRow
	err  error
	// abandoned is set by a caller that stopped waiting: a statement not
	// yet sent leaves the operation out.
	abandoned bool
}

// leaseLane gathers lease operations and sends them a statement at a time.
type leaseLane struct {
	mu      sync.Mutex
	pending []*leaseOp
	busy    bool // a statement is in the database
	closed  bool
}

// leaseOpsDo runs op through the lane and waits for its answer, at most
// s.timeout or until ctx ends. An operation with a Now of its own is sent
// alone, at that instant.
func (s *Store) leaseOpsDo(ctx context.Context, what string, op *leaseOp) error {
	op.done = make(chan struct{}, 1)
	now := op.acq.Now
	if op.kind != opAcquire {
		now = op.ref.Now
	}
	l := &s.leases
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return fmt.Errorf("%s: store closed: %w", what, counter.ErrUnavailable)
	}
	if !now.IsZero() {
		l.mu.Unlock()
		us := now.UnixMicro()
		go s.sendLeaseOps([]*leaseOp{op}, &us)
	} else {
		l.pending = append(l.pending, op)
		start := !l.busy
		l.busy = true
		l.mu.Unlock()
		if start {
			go s.leaseLoop()
		}
	}
	s.mu.Lock()
	expired := s.expiry(time.Now())
	s.mu.Unlock()
	if err := s.await(ctx, op.done, expired, true); err != nil {
		s.abandon(op)
		return fmt.Errorf("%s: %w: %w", what, counter.ErrUnavailable, err)
	}
	return op.err
}

func (s *Store) abandon(op *leaseOp) {
	s.leases.mu.Lock()
	op.abandoned = true
	s.leases.mu.Unlock()
}

// leaseLoop sends the pending operations, a statement at a time, until
// none is left; one runs while the lane is busy.
func (s *Store) leaseLoop() {
	l := &s.leases
	for {
		l.mu.Lock()
		ops := make([]*leaseOp, 0, min(len(l.pending), maxLeaseOps))
		n := 0
		for _, op := range l.pending {
			if len(ops) == maxLeaseOps {
				break
			}
			n++
			if !op.abandoned {
				ops = append(ops, op)
			}
		}
		l.pending = l.pending[n:]
		if n == 0 {
			l.pending = nil
			l.busy = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if len(ops) > 0 {
			s.sendLeaseOps(ops, nil)
		}
	}
}

// closeLeases fails the operations not yet sent; later ones fail at once.
func (s *Store) closeLeases() {
	l := &s.leases
	l.mu.Lock()
	l.closed = true
	rest := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, op := range rest {
		op.err = fmt.Errorf("lease operation: store closed: %w", counter.ErrUnavailable)
		op.done <- struct{}{}
	}
}

// sendLeaseOps makes the one round trip for ops, at instant now (Unix µs)
// or, when nil, the database's, and answers every op. Like send, it runs
// under its own deadline, not a caller's.
func (s *Store) sendLeaseOps(ops []*leaseOp, now *int64) {
	s.leaseStatements.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), s.sendTimeout)
	defer cancel()
	p := leaseOpsParams(ops)
	p.Now = now
	rows, err := s.q.LeaseOps(ctx, p)
	if err == nil {
		s.lastAnswer.Store(time.Now().UnixNano())
	}
	nceil := len(p.Algorithms)
	if err == nil && len(rows) != nceil+len(ops) {
		err = fmt.Errorf("%d rows for %d ceilings and %d lease operations", len(rows), nceil, len(ops))
	}
	if err != nil {
		err = s.failed(ctx, "lease operations", err)
		for _, op := range ops {
			op.err = err
			op.done <- struct{}{}
		}
		return
	}
	ceil := rows[:nceil]
	for i, op := range ops {
		if op.kind == opAcquire {
			k := len(op.acq.Ceilings)
			op.ceil, ceil = ceil[:k:k], ceil[k:]
		}
		op.row = rows[nceil+i]
		op.done <- struct{}{}
	}
}

// leaseOpsParams lays out ops as tollgate_lease_ops takes them: each
// acquire with ceilings is one consuming request of them, all ceilings, in
// the ceiling arguments of tollgate_check.
func leaseOpsParams(ops []*leaseOp) sqlcgen.LeaseOpsParams {
	n := len(ops)
	p := sqlcgen.LeaseOpsParams{
		Ops: make([]int16, n), Creqs: make([]int32, n), Grps: make([]string, n),
		LeaseKeys: make([][]byte, n), Tallies: make([][]byte, n), Ids: make([][]byte, n),
		Maxes: make([]int64, n), Ttls: make([]int64, n), GroupLimits: make([]int64, n),
	}
	var reqs []counter.Request
	items := 0
	for i, op := range ops {
		p.Ops[i] = op.kind
		switch op.kind {
		case opAcquire:
			a := op.acq
			p.Grps[i], p.LeaseKeys[i], p.Tallies[i], p.Ids[i] = a.Group, []byte(a.Key), []byte(a.Tally), []byte(a.ID)
			p.Maxes[i], p.Ttls[i], p.GroupLimits[i] = a.Limit, a.TTL.Microseconds(), a.GroupLimit
			if len(a.Ceilings) > 0 {
				reqs = append(reqs, a.CeilingRequest())
				items += len(a.Ceilings)
				p.Creqs[i] = int32(len(reqs))
			}
		default:
			p.Grps[i], p.Ids[i], p.Ttls[i] = op.ref.Group, []byte(op.ref.ID), op.ref.TTL.Microseconds()
			p.LeaseKeys[i], p.Tallies[i] = []byte{}, []byte{}
		}
	}
	keys, order := rowKeys(reqs, items)
	cp := checkParams(reqs, items, keys, order)
	p.Keys, p.Reqs, p.Slots, p.Algorithms, p.Limits = cp.Keys, cp.Reqs, cp.Slots, cp.Algorithms, cp.Limits
	p.Windows, p.Costs, p.Advisory, p.Consume, p.Ceilings = cp.Windows, cp.Costs, cp.Advisory, cp.Consume, cp.Ceilings
	return p
}

// Acquire implements counter.Store: coalesced with the other lease
// operations of this store into one round trip a statement. It returns within
// about cfg.Timeout (or ctx's deadline); errors wrap counter.ErrUnavailable,
// or counter.ErrInvalid for a malformed request or an id in use.
func (s *Store) Acquire(ctx context.Context, a counter.Acquire) (counter.Acquired, error) {
	if err := counter.ValidateAcquire(a); err != nil {
		return counter.Acquired{}, fmt.Errorf("acquire lease: %w", err)
	}
	op := &leaseOp{kind: opAcquire, acq: a}
	if err := s.leaseOpsDo(ctx, "acquire lease", op); err != nil {
		return counter.Acquired{}, err
	}
	r := op.row
	if !r.Allowed && r.Status == statusIDInUse {
		return counter.Acquired{}, fmt.Errorf("acquire lease: id in use: %w", counter.ErrInvalid)
	}
	now := time.UnixMicro(r.NowUs).UTC()
	res := counter.Acquired{Allowed: r.Allowed, GroupFull: r.Status == statusGroupFull, InFlight: r.InFlight, Now: now}
	if r.ExpiresUs != 0 {
		res.ExpiresAt = time.UnixMicro(r.ExpiresUs).UTC()
	}
	if len(a.Ceilings) == 0 {
		res.Ceilings = counter.Result{Allowed: true, Now: now}
		return res, nil
	}
	seen := make([]counter.Seen, len(a.Ceilings))
	for i, c := range op.ceil {
		seen[i] = counter.Seen{
			State:   limit.State{Start: c.SeenStart, Count: c.SeenCount, Prev: c.SeenPrev, TAT: c.SeenTat},
			Allowed: c.Allowed,
		}
	}
	res.Ceilings = counter.Answer(a.CeilingRequest(), seen, time.UnixMicro(op.ceil[0].NowUs).UTC())
	if !res.Ceilings.Allowed {
		// The lease was not looked at.
		res.InFlight, res.ExpiresAt = 0, time.Time{}
	}
	return res, nil
}

// Renew implements counter.Store, coalesced as Acquire is.
func (s *Store) Renew(ctx context.Context, ref counter.LeaseRef) (time.Time, error) {
	if err := counter.ValidateRef(ref, true); err != nil {
		return time.Time{}, fmt.Errorf("renew lease: %w", err)
	}
	op := &leaseOp{kind: opRenew, ref: ref}
	if err := s.leaseOpsDo(ctx, "renew lease", op); err != nil {
		return time.Time{}, err
	}
	if !op.row.Allowed {
		return time.Time{}, fmt.Errorf("renew lease: %w", counter.ErrNoLease)
	}
	return time.UnixMicro(op.row.ExpiresUs).UTC(), nil
}

// Release implements counter.Store, coalesced as Acquire is.
func (s *Store) Release(ctx context.Context, ref counter.LeaseRef) error {
	if err := counter.ValidateRef(ref, false); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	op := &leaseOp{kind: opRelease, ref: ref}
	if err := s.leaseOpsDo(ctx, "release lease", op); err != nil {
		return err
	}
	if !op.row.Allowed {
		return fmt.Errorf("release lease: %w", counter.ErrNoLease)
	}
	return nil
}

// errDirectBusy is a call that found every connection the store keeps for
// calls outside the lanes in use past its deadline.
var errDirectBusy = errors.New("every connection for direct calls busy")

// direct runs f for group holding one of the connections the store keeps
// for calls outside the two lanes (Reset, Held, reservations, charges), so
// that no number of them at once takes a connection from the lanes: a flood
// of resets queues behind itself, not in front of every tenant's checks.
// A group's calls take their turns (groupTurns): one at a time holds or
// waits for such a connection, so that a group whose calls stall leaves
// the others to every other group. The caller waits as for a Check
// (await): past the deadline only while the store keeps answering.
func (s *Store) direct(ctx context.Context, group, what string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.sendTimeout)
	defer cancel()
	s.mu.Lock()
	expired := s.expiry(time.Now())
	s.mu.Unlock()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		back, terr := s.directTurns.take(ctx, group)
		if terr != nil {
			err = fmt.Errorf("%w: %w", errDirectBusy, terr)
			return
		}
		defer back()
		select {
		case s.directConns <- struct{}{}:
		case <-ctx.Done():
			err = fmt.Errorf("%w: %w", errDirectBusy, ctx.Err())
			return
		}
		defer func() { <-s.directConns }()
		if err = f(ctx); err == nil {
			s.lastAnswer.Store(time.Now().UnixNano())
		}
	}()
	if werr := s.await(ctx, done, expired, true); werr != nil {
		return fmt.Errorf("%s: %w: %w", what, counter.ErrUnavailable, werr)
	}
	if err != nil {
		return s.failed(ctx, what, err)
	}
	return nil
}
