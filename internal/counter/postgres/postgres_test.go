package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformance(t *testing.T) {
	countertest.Run(t, countertest.Backend{Shared: shared, Breakable: breakable, Patient: true})
}

// shared gives each call a database of its own and opens stores, each with
// a pool of its own, on it. Their deadline is a second, not the default
// 50 ms: these cases test answers and exact counts, on a server where
// parallel tests create and drop databases, and each drop forces an
// immediate checkpoint that can hold a statement up past 50 ms (a Check
// then rightly answers ErrUnavailable, but that is not what they test). The
// default deadline is tested by breakable's case.
func shared(t *testing.T) func() counter.Store {
	dsn := pgtest.New(t)
	return func() counter.Store { return open(t, postgres.Config{DSN: dsn, Timeout: time.Second}) }
}

// breakable opens a store whose connections pass through a faultnet proxy.
func breakable(t *testing.T, link func(upstream string) *faultnet.Proxy) counter.Store {
	dsn := pgtest.New(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("database url: %v", err)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "5432")
	}
	u.Host = link(addr).Addr()
	return open(t, postgres.Config{DSN: u.String()})
}

// open opens a store that is closed when the test ends.
func open(t testing.TB, cfg postgres.Config) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := postgres.New(ctx, cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The benchmarks report checks/s beside ns/op: one check is one Request,
// whatever its number of items. Their stores wait up to 5 s: they measure
// throughput, not the deadline. Run them with
//
//	DATABASE_URL=… go test -run '^$' -bench . ./internal/counter/postgres
func BenchmarkCheck(b *testing.B) {
	dsn := pgtest.New(b)
	month := limit.Every(30 * 24 * time.Hour)
	item := func(key string) counter.Item {
		return counter.Item{Key: key, Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: month, Cost: 1}
	}
	run := func(b *testing.B, s *postgres.Store, req func() counter.Request) {
		b.Helper()
		ctx := context.Background()
		for b.Loop() {
			if _, err := s.Check(ctx, req()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	}
	parallel := func(b *testing.B, s *postgres.Store, req func(*rand.Rand) counter.Request) {
		b.Helper()
		// Coalescing needs callers waiting at once, as an HTTP server's
		// handlers are.
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			ctx := context.Background()
			for pb.Next() {
				if _, err := s.Check(ctx, req(r)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	}
	hot := func(*rand.Rand) counter.Request { return counter.Request{Items: []counter.Item{item("hot")}} }
	random := func(r *rand.Rand) counter.Request {
		return counter.Request{Items: []counter.Item{item(fmt.Sprintf("k%d", r.IntN(1_000_000)))}}
	}

	b.Run("one-item", func(b *testing.B) {
		s := open(b, postgres.Config{DSN: dsn, Timeout: 5 * time.Second})
		run(b, s, func() counter.Request { return counter.Request{Items: []counter.Item{item("one")}} })
	})
	b.Run("four-items", func(b *testing.B) {
		s := open(b, postgres.Config{DSN: dsn, Timeout: 5 * time.Second})
		req := counter.Request{Items: []counter.Item{item("four-a"), item("four-b"), item("four-c"), item("four-d")}}
		run(b, s, func() counter.Request { return req })
	})
	b.Run("parallel-hot-key", func(b *testing.B) {
		parallel(b, open(b, postgres.Config{DSN: dsn, Timeout: 5 * time.Second}), hot)
	})
	b.Run("parallel-random-keys", func(b *testing.B) {
		parallel(b, open(b, postgres.Config{DSN: dsn, Timeout: 5 * time.Second}), random)
	})
	// The same without coalescing, for the ratio: one request per function
	// call, on four connections at once.
	uncoalesced := postgres.Config{DSN: dsn, MaxItems: 1, MaxConns: 4, Inflight: 4, Timeout: 5 * time.Second}
	b.Run("parallel-hot-key-uncoalesced", func(b *testing.B) {
		parallel(b, open(b, uncoalesced), hot)
	})
	b.Run("parallel-random-keys-uncoalesced", func(b *testing.B) {
		parallel(b, open(b, uncoalesced), random)
	})
}

// BenchmarkCheckBatch: CheckBatch as /v1/check/batch calls it, checks/s
// beside ns/op (one op is one batch), one-item checks on random keys.
func BenchmarkCheckBatch(b *testing.B) {
	dsn := pgtest.New(b)
	month := limit.Every(30 * 24 * time.Hour)
	batch := func(r *rand.Rand, n int) []counter.Request {
		reqs := make([]counter.Request, n)
		for i := range reqs {
			reqs[i] = counter.Request{Group: "bench", Items: []counter.Item{
				{Key: fmt.Sprintf("k%d", r.IntN(1_000_000)), Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: month, Cost: 1},
			}}
		}
		return reqs
	}
	check := func(s *postgres.Store, reqs []counter.Request) error {
		_, errs := s.CheckBatch(context.Background(), reqs)
		return errors.Join(errs...)
	}
	// One caller's batches of the API's largest, 1,000 checks.
	b.Run("1000", func(b *testing.B) {
		s := open(b, postgres.Config{DSN: dsn, Timeout: 5 * time.Second})
		r := rand.New(rand.NewPCG(1, 2))
		for b.Loop() {
			if err := check(s, batch(r, 1000)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "checks/s")
	})
	// Many callers' batches of the Go client's 16, one tenant's, as an
	// instance's handlers send them.
	b.Run("parallel-16", func(b *testing.B) {
		s := open(b, postgres.Config{DSN: dsn, Timeout: 5 * time.Second})
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for pb.Next() {
				if err := check(s, batch(r, 16)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N*16)/b.Elapsed().Seconds(), "checks/s")
	})
}
