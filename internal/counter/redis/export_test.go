package redis

import (
	"context"
	"net"
	"slices"

	"github.com/tollgate/tollgate/internal/counter"
)

// NewWithDialer is New with go-redis's dialing replaced by dial, so that a
// test can route one node through a faultnet proxy.
func NewWithDialer(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Store, error) {
	return newStore(cfg, dial)
}

// Resent counts the checks the store sent again after a cluster refused
// their script before running it.
func (s *Store) Resent() int64 { return s.resent.Load() }

// CheckBatch decides reqs as a drain decides the checks it takes from the
// queue: in one pipeline of as few scripts as the store makes of them, each
// deciding its requests in order. It returns each request's answer or
// error, and how many scripts it sent. reqs must be valid.
func (s *Store) CheckBatch(ctx context.Context, reqs []counter.Request) ([]counter.Result, []error, int) {
	batch := make([]*job, len(reqs))
	for i, req := range reqs {
		if err := counter.Validate(req); err != nil {
			panic(err)
		}
		batch[i] = newJob()
		s.encode(batch[i], req)
		s.deadlines(ctx, batch[i])
	}
	scripts := len(s.split(slices.Clone(batch), nil))
	// flush reorders what it is given on a cluster.
	s.flush(slices.Clone(batch), nil)
	res := make([]counter.Result, len(reqs))
	errs := make([]error, len(reqs))
	for i, j := range batch {
		<-j.done
		if j.err != nil {
			errs[i] = unavailable(ctx, j.err)
			continue
		}
		res[i], errs[i] = s.result(ctx, reqs[i], j)
	}
	return res, errs, scripts
}

// ResendPause is resendPause, the pause before a refused script is sent
// again the n-th time.
var ResendPause = resendPause
