package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
)

var _ counter.Batcher = (*Store)(nil)

// CheckBatch implements counter.Batcher: the requests are one batch of
// their own, sent at once in one statement (send), in their order, beside
// the batches the store coalesces. Requests with a Now of their own
// (tests, replays) are one statement when they all name the same instant,
// else checked one by one.
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
			return counter.CheckBatch(ctx, oneByOne{s}, reqs)
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
	if s.closed {
		s.mu.Unlock()
		for _, i := range at {
			errs[i] = errClosed
		}
		return res, errs
	}
	expired := s.expiry(time.Now())
	s.mu.Unlock()
	// send filters what it is given in place; calls stays the caller's.
	go s.send(slices.Clone(calls), now)
	for k, c := range calls {
		i := at[k]
		if err := s.await(ctx, c.done, expired); err != nil {
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

// oneByOne hides a Store's CheckBatch, for counter.CheckBatch's fallback.
type oneByOne struct{ counter.Store }
