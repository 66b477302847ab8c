package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
)

// pruneStatementTimeout bounds one pruning statement, instead of the
// sessions' statement_timeout, which is sized for Checks.
const pruneStatementTimeout = "10s"

// What a pruning statement deletes.
type pruned int

const (
	prunedCounters pruned = iota
	prunedLeases
	prunedReservations
)

// Prune deletes the counters whose state has expired by the database's
// clock (a counter past limit.Expiry is the same as none), then the leases
// that expired a minute or more ago, in statements of at most
// cfg.PruneRows rows that skip rows a Check or an acquire holds, until a
// statement finds fewer than that; then it deals with the reservations due
// a minute or more ago, as the next reservation or settlement of their
// group would (giving back the amounts of those that release on expiry),
// in statements of the groups of at most cfg.PruneRows of them. It returns
// the number deleted; its errors wrap counter.ErrUnavailable.
func (s *Store) Prune(ctx context.Context) (int64, error) {
	var total int64
	for _, what := range []pruned{prunedCounters, prunedLeases, prunedReservations} {
		for {
			n, err := s.pruneOnce(ctx, what)
			total += n
			if err != nil {
				return total, fmt.Errorf("prune counters: %w: %v", counter.ErrUnavailable, err)
			}
			if n < int64(s.pruneRows) {
				break
			}
		}
	}
	return total, nil
}

func (s *Store) pruneOnce(ctx context.Context, what pruned) (int64, error) {
	// A connection of those left by the lanes.
	select {
	case s.directConns <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-s.directConns }()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '"+pruneStatementTimeout+"'"); err != nil {
		return 0, err
	}
	q := s.q.WithTx(tx)
	prune := q.PruneCounters
	switch what {
	case prunedLeases:
		prune = q.PruneLeases
	case prunedReservations:
		prune = q.SweepReservations
	}
	n, err := prune(ctx, s.pruneRows)
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// Run prunes expired counters every cfg.PruneEvery until ctx is cancelled,
// then returns nil. A failed round is logged and tried again at the next
// tick. Several instances may run it at once.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := s.Prune(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.WarnContext(ctx, "counter prune failed", "deleted", n, "err", err)
		case n > 0:
			s.log.DebugContext(ctx, "expired counters pruned", "deleted", n)
		}
	}
}
