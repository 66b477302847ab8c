package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
)

// CheckBatch implements counter.Store: the requests go through the
// batches' lane (fairlane.go), in their order, in one statement when they
// hold at most Config.MaxItems items, else in statements of at most that
// many, one after the other; a batch's place in the lane is its first
// request's Group (the gate's batches are one tenant's). Requests with a
// Now of their own (tests, replays) go the same way when they all name the
// same instant, else are checked one by one. A caller waits as a Check
// does (await), and behind its own group's statements while the store
// keeps answering them; errors are Check's.
func (s *Store) CheckBatch(ctx context.Context, reqs []counter.Request) ([]counter.Result, []error) {
	res, errs := make([]counter.Result, len(reqs)), make([]error, len(reqs))
	if counter.TooLarge(reqs, errs) {
		return res, errs
	}
	calls := make([]*call, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, req := range reqs {
		if err := counter.Validate(req); err != nil {
			errs[i] = fmt.Errorf("check counters: %w", err)
			continue
		}
		if len(calls) > 0 && !req.Now.Equal(calls[0].req.Now) {
			return counter.CheckEach(ctx, s, reqs)
		}
		c := &call{req: req, done: make(chan struct{}, 1)}
		calls = append(calls, c)
		at = append(at, i)
	}
	if len(calls) == 0 {
		return res, errs
	}
	var now *int64
	if t := calls[0].req.Now; !t.IsZero() {
		us := t.UnixMicro()
		now = &us
	}
	s.mu.Lock()
	expired := s.expiry(time.Now())
	s.mu.Unlock()
	start, ok := s.batchLane.add(calls[0].req.Group, cut(calls, s.maxItems, now))
	if !ok {
		for _, i := range at {
			errs[i] = errClosed
		}
		return res, errs
	}
	if start {
		go s.sendBatches()
	}
	for k, c := range calls {
		i := at[k]
		if err := s.await(ctx, c.done, expired, false); err != nil {
			for _, c := range calls[k:] {
				c.abandoned.Store(true)
			}
			err = fmt.Errorf("check counters: %w: %w", counter.ErrUnavailable, err)
			for _, i := range at[k:] {
				errs[i] = err
			}
			break
		}
		if c.err != nil {
			errs[i] = c.err
			continue
		}
		res[i] = counter.Answer(reqs[i], c.seen, c.now)
	}
	return res, errs
}

// sendBatches is a sender of the batches' lane: it sends the statement of
// the groups whose turn it is, one after the other, until none is waiting.
func (s *Store) sendBatches() {
	for {
		gs, calls, now, ok := s.batchLane.next(s.maxItems)
		if !ok {
			return
		}
		s.send(calls, now)
		for _, g := range gs {
			s.batchLane.done(g)
		}
	}
}

// closeBatches fails the batches' calls not yet sent; later ones fail at
// once.
func (s *Store) closeBatches() {
	for _, c := range s.batchLane.close() {
		c.err = errClosed
		c.done <- struct{}{}
	}
}
