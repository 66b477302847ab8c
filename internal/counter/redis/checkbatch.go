package redis

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// CheckBatch implements counter.Store: the requests go in one pipeline
// (flush). On a single server the batch waits in the batches' lane
// (batchlane.go) for a sender, which sends it whole with the batches
// waiting beside it, in scripts that decide their requests in order (up to
// maxScriptItems items a script); on a cluster it is sent from the caller's
// goroutine, one script per tenant, and go-redis sends each master its
// scripts in one round trip, the masters in parallel. A request whose keys hold something else than counters fails
// alone. Deadlines are Check's, per request; ctx's end stops the wait for
// all of them.
func (s *Store) CheckBatch(ctx context.Context, reqs []counter.Request) ([]counter.Result, []error) {
	res, errs := make([]counter.Result, len(reqs)), make([]error, len(reqs))
	if counter.TooLarge(reqs, errs) {
		return res, errs
	}
	at := make([]int, 0, len(reqs))
	// Every request's keys in one string, and its decisions in one slice.
	keys, items := 0, 0
	for i, req := range reqs {
		if err := counter.Validate(req); err != nil {
			errs[i] = err
			continue
		}
		at = append(at, i)
		keys += s.keysLen(req)
		items += len(req.Items)
	}
	if len(at) == 0 {
		return res, errs
	}
	var b strings.Builder
	b.Grow(keys)
	for _, i := range at {
		s.appendKeys(&b, reqs[i])
	}
	all := b.String()
	decisions := make([]limit.Decision, items)
	batch := make([]*job, 0, len(at))
	for _, i := range at {
		j := newJob()
		n := s.keysLen(reqs[i])
		s.encodeIn(j, reqs[i], all[:n])
		all = all[n:]
		s.deadlines(ctx, j)
		batch = append(batch, j)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, i := range at {
			errs[i] = unavailable(ctx, errClosed)
		}
		return res, errs
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	if s.cluster != nil {
		// flush reorders what it is given on a cluster; batch keeps the
		// order.
		s.flush(slices.Clone(batch), nil)
	} else if s.batches.add(reqs[at[0]].Group, slices.Clone(batch)) {
		// A sender was free: one starts, and sends this batch with the
		// ones waiting then, and those that come while it does
		// (batchlane.go); Close waits for it.
		s.inflight.Add(1)
		go func() {
			defer s.inflight.Done()
			s.sendBatches()
		}()
	}
	s.inflight.Done()
	for k, j := range batch {
		i := at[k]
		n := len(reqs[i].Items)
		into := decisions[:n:n]
		decisions = decisions[n:]
		if err := s.await(ctx, j); err != nil {
			if ctx.Err() == nil && !time.Now().Before(j.deadline) {
				err = context.DeadlineExceeded
			}
			errs[i] = unavailable(ctx, err)
			continue
		}
		res[i], errs[i] = s.result(ctx, reqs[i], j, into)
	}
	return res, errs
}

// await waits for j's answer: flush answers most jobs before it returns,
// and the ones a cluster refused before running them are sent again in the
// background.
func (s *Store) await(ctx context.Context, j *job) error {
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
		j.gone.Store(true)
		return ctx.Err()
	case <-s.quit:
		j.gone.Store(true)
		return errClosed
	}
}
