package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// BenchmarkReserveSettle is one tenant's reservations, each settled, from
// eight callers of one store: what the tenant's advisory lock (and its turn
// on the direct calls' connections) lets through. One op is a reservation
// and its settlement.
func BenchmarkReserveSettle(b *testing.B) {
	benchReserve(b, 100_000, func(ctx context.Context, s *postgres.Store, id string, res counter.Reserved) error {
		if !res.Allowed {
			return fmt.Errorf("reserve %s: %+v", id, res)
		}
		_, err := s.Settle(ctx, counter.SettleRef{Group: "g", ID: id, Used: 4})
		return err
	})
}

// BenchmarkReserveAtTheBound is a tenant's reservations past its cap of
// live ones (one, held before they start), from eight callers of one store: each is refused,
// GroupFull, without the tenant's advisory lock.
func BenchmarkReserveAtTheBound(b *testing.B) {
	benchReserve(b, 1, func(_ context.Context, _ *postgres.Store, id string, res counter.Reserved) error {
		if res.Allowed || !res.GroupFull {
			return fmt.Errorf("reserve %s past the cap: %+v", id, res)
		}
		return nil
	})
}

// benchReserve reserves from eight callers, each reservation then passed to
// then; the callers stop at the first error, which fails b (b.Fatal is the
// benchmark goroutine's alone).
func benchReserve(b *testing.B, cap int64, then func(ctx context.Context, s *postgres.Store, id string, res counter.Reserved) error) {
	s := open(b, postgres.Config{DSN: pgtest.New(b), Timeout: 5 * time.Second})
	budget := counter.Item{Key: "tokens", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 10}
	reserve := func(ctx context.Context, id string) (counter.Reserved, error) {
		return s.Reserve(ctx, counter.Reservation{Request: counter.Request{Group: "g", Items: []counter.Item{budget}}, ID: id, TTL: time.Hour, GroupLimit: cap})
	}
	// One held before the callers start: the cap's, when it is 1.
	if res, err := reserve(context.Background(), "0"); err != nil || !res.Allowed {
		b.Fatalf("the first reservation: %+v, %v", res, err)
	}
	var n atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			id := strconv.FormatInt(n.Add(1), 10)
			res, err := reserve(ctx, id)
			if err == nil {
				err = then(ctx, s, id, res)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
