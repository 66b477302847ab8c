package redis

import (
	"context"
	"net"

	"github.com/tollgate/tollgate/internal/counter"
)

// NewWithDialer is New with go-redis's dialing replaced by dial, so that a
// test can route one node through a faultnet proxy.
func NewWithDialer(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Store, error) {
	return newStore(cfg, dial)
}

// Scripts counts the check scripts the store's pipelines sent.
func (s *Store) Scripts() int64 { return s.scripts.Load() }

// Resent counts the checks the store sent again after a cluster refused
// their script before running it.
func (s *Store) Resent() int64 { return s.resent.Load() }

// CheckBatchScripts is CheckBatch, which decides reqs as a drain decides
// the checks it takes from the queue, with how many scripts it sent.
func (s *Store) CheckBatchScripts(ctx context.Context, reqs []counter.Request) ([]counter.Result, []error, int) {
	batch := make([]*job, len(reqs))
	for i, req := range reqs {
		batch[i] = &job{}
		s.encode(batch[i], req)
	}
	scripts := len(s.split(batch, nil))
	res, errs := s.CheckBatch(ctx, reqs)
	return res, errs, scripts
}

// ResendPause is resendPause, the pause before a refused script is sent
// again the n-th time.
var ResendPause = resendPause
