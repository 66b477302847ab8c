package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/counter"
	tgredis "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// newStore opens a store on a fresh prefix, closed when the test ends, whose
// log fails the test on any error record (the store logs one when its script
// and internal/limit disagree).
func newStore(t *testing.T, timeout time.Duration) (*tgredis.Store, *goredis.Client, string) {
	t.Helper()
	u, prefix := redistest.New(t)
	s := open(t, tgredis.Config{URL: u, Prefix: prefix, Timeout: timeout, Logger: testLogger(t)})
	t.Cleanup(func() { s.Close() })
	return s, rawClient(t, u), prefix
}

func rawClient(t *testing.T, u string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// mustMatch checks req on the store and on the model, the reference.
func mustMatch(t *testing.T, step int, s *tgredis.Store, m *countertest.Model, req counter.Request) counter.Result {
	t.Helper()
	got, err := s.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	want := m.Check(req, req.Now)
	if got.Allowed != want.Allowed || !got.Now.Equal(want.Now) {
		t.Fatalf("step %d %+v: allowed %v at %s, want %v at %s", step, req, got.Allowed, got.Now, want.Allowed, want.Now)
	}
	for i := range want.Decisions {
		if got.Decisions[i] != want.Decisions[i] {
			t.Fatalf("step %d item %d %+v at %s:\n got  %+v\n want %+v", step, i, req.Items[i],
				req.Now.Format(time.RFC3339Nano), got.Decisions[i], want.Decisions[i])
		}
	}
	return got
}

// TestPropertyRandomStreamsMatchLimit drives seeded random request streams
// of all three algorithms, any number of them ceilings and any of them
// advisory, with explicit clocks that go forward by microseconds to weeks
// and sometimes back, through the store and the model, starting just before
// month ends so that calendar months roll over.
func TestPropertyRandomStreamsMatchLimit(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, 5*time.Second)
	starts := []time.Time{
		time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC),
		time.Date(2027, 12, 31, 23, 59, 58, 500_000_000, time.UTC),
		time.Date(2028, 2, 28, 23, 59, 59, 999_000_000, time.UTC), // leap year
		time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC),           // no 29th
		time.Date(2026, 3, 14, 15, 9, 26, 535_897_000, time.UTC),
	}
	jumps := []time.Duration{0, 0, time.Microsecond, 7 * time.Microsecond, time.Millisecond,
		250 * time.Millisecond, time.Second, 13 * time.Second, time.Minute, time.Hour,
		26 * time.Hour, 9 * 24 * time.Hour, -time.Microsecond, -300 * time.Millisecond}
	windows := []limit.Window{limit.Every(time.Second), limit.Every(7 * time.Second),
		limit.Every(time.Minute), limit.Every(time.Hour), limit.Every(30 * 24 * time.Hour)}
	for seed := range 40 {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 7))
			group := fmt.Sprint("g", seed)
			var items []counter.Item
			for k := range 1 + r.IntN(4) {
				it := counter.Item{
					Key:       fmt.Sprint("k", k),
					Algorithm: limit.Algorithm(1 + r.IntN(3)),
					Window:    windows[r.IntN(len(windows))],
					Limit:     1 + r.Int64N(12),
				}
				if r.IntN(4) == 0 {
					it.Limit = 1 + r.Int64N(limit.MaxLimit)
				}
				if it.Algorithm == limit.FixedWindow && r.IntN(2) == 0 {
					it.Window = limit.Month
				}
				items = append(items, it)
			}
			m := countertest.NewModel()
			now := starts[seed%len(starts)]
			for step := range 60 {
				now = now.Add(jumps[r.IntN(len(jumps))])
				req := counter.Request{Group: group, Now: now}
				if r.IntN(5) == 0 {
					req.Mode = counter.Peek
				}
				for range 1 + r.IntN(4) {
					it := items[r.IntN(len(items))]
					switch r.IntN(4) {
					case 0:
						it.Cost = 1 + r.Int64N(it.Limit)
					case 1:
						it.Cost = 1 + r.Int64N(min(2*it.Limit, limit.MaxLimit))
					default:
						it.Cost = 1
					}
					it.Advisory = r.IntN(3) == 0
					req.Items = append(req.Items, it)
				}
				req.Ceilings = r.IntN(len(req.Items) + 1)
				mustMatch(t, step, s, m, req)
			}
		})
	}
}

// TestMonthWindows checks the script's calendar arithmetic against Go's at
// month boundaries from 1970 to 2199 (a request's Now is before 2200) and at
// random instants: the window each key is stored under, its expiry, and the
// roll-over at a month's end.
func TestMonthWindows(t *testing.T) {
	t.Parallel()
	s, raw, prefix := newStore(t, 5*time.Second)
	// Every month of a few years; the ends of February (leap years, the
	// centuries that are not, 2000 that is) and of the year in others.
	var instants []time.Time
	boundary := func(y int, mo time.Month) {
		first := time.Date(y, mo, 1, 0, 0, 0, 0, time.UTC)
		instants = append(instants, first)
		if first.Unix() > 0 {
			instants = append(instants, first.Add(-time.Microsecond))
		}
	}
	for _, y := range []int{1970, 2026, 2028, 2198} {
		for mo := time.January; mo <= time.December; mo++ {
			boundary(y, mo)
		}
	}
	for _, y := range []int{1971, 1972, 1999, 2000, 2001, 2024, 2025, 2100, 2101, 2196, 2197, 2199} {
		boundary(y, time.January)
		boundary(y, time.March)
	}
	// The last month whose end (the roll-over below) is still a valid Now.
	boundary(2199, time.November)
	last := time.Date(2199, 12, 1, 0, 0, 0, 0, time.UTC)
	instants = append(instants, last.Add(-time.Microsecond))
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		instants = append(instants, time.UnixMicro(r.Int64N(last.UnixMicro())).UTC())
	}
	ctx := context.Background()
	for i, at := range instants {
		it := counter.Item{Key: fmt.Sprint("m", i), Algorithm: limit.FixedWindow, Limit: 2, Window: limit.Month, Cost: 1}
		m := countertest.NewModel()
		req := counter.Request{Items: []counter.Item{it}, Now: at}
		mustMatch(t, i, s, m, req)
		start, end := limit.Month.Bounds(at.UnixMicro())
		v, err := raw.Get(ctx, prefix+"{~}:"+it.Key).Bytes()
		if err != nil {
			t.Fatalf("%s: GET: %v", at, err)
		}
		if got := int64(unpackFloat(v, 0)); got != start {
			t.Fatalf("%s: stored window start %s, want %s", at, time.UnixMicro(got).UTC(), time.UnixMicro(start).UTC())
		}
		// Redis expires by its own clock: what is left is the window's end
		// less this instant, plus the script's grace, less the test's time.
		ttl, err := raw.PTTL(ctx, prefix+"{~}:"+it.Key).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(end-at.UnixMicro())*time.Microsecond + time.Second
		if ttl > want+time.Millisecond || ttl < want-5*time.Second {
			t.Fatalf("%s: TTL %s, want about %s", at, ttl, want)
		}
		// The same month admits one more, then refuses; the next admits.
		mustMatch(t, i, s, m, req)
		if res := mustMatch(t, i, s, m, req); res.Allowed {
			t.Fatalf("%s: third of 2 allowed", at)
		}
		req.Now = time.UnixMicro(end).UTC()
		if res := mustMatch(t, i, s, m, req); !res.Allowed {
			t.Fatalf("%s: refused in the next month", req.Now)
		}
	}
}

// unpackFloat reads the i-th little-endian float64 of a stored state.
func unpackFloat(b []byte, i int) float64 {
	var u uint64
	for k := 7; k >= 0; k-- {
		u = u<<8 | uint64(b[8*i+k])
	}
	return math.Float64frombits(u)
}

// TestWritesOnlyWhenAllAdmitted checks the keys themselves: a refused request
// and a peek leave every stored byte and expiry as it was, a request's keys
// are prefix{group}:key, and a request refused by a policy writes its ceiling
// as a request of the ceiling alone would.
func TestWritesOnlyWhenAllAdmitted(t *testing.T) {
	t.Parallel()
	s, raw, prefix := newStore(t, 5*time.Second)
	ctx := context.Background()
	now := time.Date(2026, 5, 5, 5, 5, 5, 0, time.UTC)
	a := counter.Item{Key: "a", Algorithm: limit.SlidingWindow, Limit: 5, Window: limit.Every(time.Minute), Cost: 1}
	b := counter.Item{Key: "b", Algorithm: limit.TokenBucket, Limit: 1, Window: limit.Every(time.Hour), Cost: 1}
	res, err := s.Check(ctx, counter.Request{Group: "t1", Items: []counter.Item{a, b}, Now: now})
	if err != nil || !res.Allowed {
		t.Fatalf("first request: %+v, %v", res, err)
	}
	keys := []string{prefix + "{t1}:a", prefix + "{t1}:b"}
	snapshot := func() []string {
		var out []string
		for _, k := range keys {
			v, err := raw.Get(ctx, k).Result()
			if err != nil {
				t.Fatalf("GET %s: %v", k, err)
			}
			pexp, err := raw.PExpireTime(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%q@%d", v, pexp))
		}
		return out
	}
	before := snapshot()
	later := now.Add(time.Second)
	res, err = s.Check(ctx, counter.Request{Group: "t1", Items: []counter.Item{a, b}, Now: later})
	if err != nil || res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("second request: %+v, %v; want refused by b alone", res, err)
	}
	a.Cost = 4
	res, err = s.Check(ctx, counter.Request{Mode: counter.Peek, Group: "t1", Items: []counter.Item{a}, Now: later})
	if err != nil || !res.Allowed {
		t.Fatalf("peek: %+v, %v", res, err)
	}
	if after := snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("keys changed by a refused request and a peek:\n before %v\n after  %v", before, after)
	}
	if n, err := raw.Exists(ctx, prefix+"{~}:a").Result(); err != nil || n != 0 {
		t.Fatalf("a key outside the group's tag exists: %d, %v", n, err)
	}
	res, err = s.Check(ctx, counter.Request{Mode: counter.Peek, Items: []counter.Item{a}, Now: later})
	if err != nil || !res.Allowed || res.Decisions[0].Remaining != 5 {
		t.Fatalf("peek without a group: %+v, %v; want a new counter: the group's untouched", res, err)
	}
	if n, err := raw.Exists(ctx, prefix+"{~}:a").Result(); err != nil || n != 0 {
		t.Fatalf("a peek wrote %s{~}:a: %d, %v", prefix, n, err)
	}

	// b is spent in t1: the ceiling c is written, and b keeps its bytes.
	c := counter.Item{Key: "c", Algorithm: limit.SlidingWindow, Limit: 5, Window: limit.Every(time.Minute), Cost: 2}
	res, err = s.Check(ctx, counter.Request{Group: "t1", Ceilings: 1, Items: []counter.Item{c, b}, Now: later})
	if err != nil || res.Allowed || !res.Decisions[0].Allowed {
		t.Fatalf("ceiling and a spent policy: %+v, %v; want refused by the policy alone", res, err)
	}
	if after := snapshot(); after[1] != before[1] {
		t.Fatalf("a refused policy's key changed:\n before %v\n after  %v", before[1], after[1])
	}
	if _, err := s.Check(ctx, counter.Request{Group: "t2", Items: []counter.Item{c}, Now: later}); err != nil {
		t.Fatal(err)
	}
	keys = []string{prefix + "{t1}:c", prefix + "{t2}:c"}
	got := snapshot()
	var v1, v2 string
	var exp1, exp2 int64
	if _, err := fmt.Sscanf(got[0], "%q@%d", &v1, &exp1); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(got[1], "%q@%d", &v2, &exp2); err != nil {
		t.Fatal(err)
	}
	// The same instant and item give the same state and the same PX; the
	// absolute expiries differ by the time between the two writes.
	if v1 != v2 || exp1 <= 0 || exp2 < exp1 || exp2-exp1 > int64(500*time.Millisecond) {
		t.Fatalf("ceiling written beside a refused policy: %s; written alone: %s; want the same state and expiry", got[0], got[1])
	}
}

// TestRefusedAdvisoryKeepsItsKey refuses advisory items in a request kept
// whole and among kept ceilings: a key they share with nothing admitted
// keeps its bytes and its expiry, and a new one is not made.
func TestRefusedAdvisoryKeepsItsKey(t *testing.T) {
	t.Parallel()
	s, raw, prefix := newStore(t, 5*time.Second)
	ctx := context.Background()
	now := time.Date(2026, 5, 5, 5, 5, 5, 0, time.UTC)
	hour := limit.Every(time.Hour)
	old := counter.Item{Key: "old", Algorithm: limit.SlidingWindow, Limit: 5, Window: limit.Every(time.Minute), Cost: 1}
	spent := counter.Item{Key: "spent", Algorithm: limit.FixedWindow, Limit: 1, Window: hour, Cost: 1}
	for _, it := range []counter.Item{old, spent} {
		if res, err := s.Check(ctx, counter.Request{Group: "g", Items: []counter.Item{it}, Now: now}); err != nil || !res.Allowed {
			t.Fatalf("first use of %s: %+v, %v", it.Key, res, err)
		}
	}
	stored := func() string {
		t.Helper()
		v, err := raw.Get(ctx, prefix+"{g}:old").Result()
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		pexp, err := raw.PExpireTime(ctx, prefix+"{g}:old").Result()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%q@%d", v, pexp)
	}
	before := stored()

	// Later, with a window of an hour: written, they would move the expiry.
	later := now.Add(time.Second)
	enforced := counter.Item{Key: "enforced", Algorithm: limit.FixedWindow, Limit: 10, Window: hour, Cost: 1}
	onOld := counter.Item{Key: "old", Algorithm: limit.SlidingWindow, Limit: 1, Window: hour, Cost: 2, Advisory: true}
	onNew := counter.Item{Key: "new", Algorithm: limit.FixedWindow, Limit: 1, Window: hour, Cost: 2, Advisory: true}
	for _, req := range []counter.Request{
		{Group: "g", Items: []counter.Item{enforced, onOld, onNew}, Now: later},
		{Group: "g", Ceilings: 3, Items: []counter.Item{enforced, onOld, onNew, spent}, Now: later},
	} {
		res, err := s.Check(ctx, req)
		if err != nil || !res.Decisions[0].Allowed || res.Decisions[1].Allowed || res.Decisions[2].Allowed {
			t.Fatalf("%+v: %+v, %v; want the enforced item allowed, the advisory ones refused", req, res, err)
		}
		if after := stored(); after != before {
			t.Fatalf("%+v: a refused advisory item's key went from %s to %s", req, before, after)
		}
		if n, err := raw.Exists(ctx, prefix+"{g}:new").Result(); err != nil || n != 0 {
			t.Fatalf("%+v: a refused advisory item made its key: %d, %v", req, n, err)
		}
	}
}

// TestConcurrentStoresExact races 1,000 two-item requests from three stores,
// each with its own connections, on one shared counter at limit 100 with the
// server's clock, and checks both the admissions and the stored count.
func TestConcurrentStoresExact(t *testing.T) {
	t.Parallel()
	u, prefix := redistest.New(t)
	var stores []*tgredis.Store
	for range 3 {
		s := open(t, tgredis.Config{URL: u, Prefix: prefix, Timeout: 5 * time.Second, Logger: testLogger(t)})
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	shared := counter.Item{Key: "shared", Algorithm: limit.FixedWindow, Limit: 100, Window: limit.Every(30 * 24 * time.Hour), Cost: 1}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			own := counter.Item{Key: fmt.Sprint("own", i), Algorithm: limit.TokenBucket, Limit: 3, Window: limit.Every(time.Hour), Cost: 1}
			res, err := stores[i%3].Check(context.Background(), counter.Request{Group: "g", Items: []counter.Item{own, shared}})
			if err != nil {
				t.Errorf("check %d: %v", i, err)
				return
			}
			if res.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 100 {
		t.Errorf("1,000 requests at limit 100: %d allowed, want 100", got)
	}
	v, err := rawClient(t, u).Get(context.Background(), prefix+"{g}:shared").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if got := unpackFloat(v, 1); got != 100 {
		t.Errorf("stored count %v, want 100", got)
	}
}

// TestUnavailableWithinDeadline cuts, stalls and flushes: every failure wraps
// counter.ErrUnavailable (and no go-redis error), arrives within the
// deadline, the caller's earlier deadline is kept, and the store recovers by
// itself.
func TestUnavailableWithinDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 40 * time.Millisecond
	const margin = 200 * time.Millisecond
	u, prefix := redistest.New(t)
	p := faultnet.New(t, redisAddr(t, u))
	s := open(t, tgredis.Config{URL: viaProxy(t, u, p), Prefix: prefix, Timeout: timeout, Logger: testLogger(t)})
	t.Cleanup(func() { s.Close() })
	req := counter.Request{Items: []counter.Item{{Key: "k", Algorithm: limit.TokenBucket, Limit: limit.MaxLimit, Window: limit.Every(time.Second), Cost: 1}}}

	down := func(what string, ctx context.Context, within time.Duration) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				start := time.Now()
				_, err := s.Check(ctx, req)
				took := time.Since(start)
				var rerr goredis.Error
				switch {
				case !errors.Is(err, counter.ErrUnavailable):
					t.Errorf("%s, call %d: got %v, want ErrUnavailable", what, i, err)
				case errors.As(err, &rerr):
					t.Errorf("%s, call %d: a go-redis error escaped: %v", what, i, err)
				case took > within+margin:
					t.Errorf("%s, call %d: answered after %s, want within %s", what, i, took, within+margin)
				}
			})
		}
		wg.Wait()
	}
	up := func(what string) {
		t.Helper()
		eventually.NoError(t, 10*time.Second, what+": checks answered again", func() error {
			_, err := s.Check(context.Background(), req)
			return err
		})
	}
	up("start")

	p.Stall()
	down("stalled", context.Background(), timeout)
	short, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	down("stalled, caller deadline 5ms", short, 5*time.Millisecond)
	cancel()
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	up("after the stall")

	p.Cut()
	down("cut", context.Background(), timeout)
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	up("after the cut")

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Check(cancelled, req)
	if !errors.Is(err, counter.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v, want ErrUnavailable and context.Canceled", err)
	}
}

// TestScriptFlushStorm runs checks while the server's script cache is
// flushed over and over: each check reloads the script (EVAL) or fails with
// ErrUnavailable within the deadline; none hangs, and all work afterwards.
func TestScriptFlushStorm(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	s, raw, _ := newStore(t, timeout)
	ctx := context.Background()
	req := counter.Request{Items: []counter.Item{{Key: "storm", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 1}}}
	stop := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for i := 0; i < 200; i++ {
			select {
			case <-stop:
				return
			default:
			}
			raw.ScriptFlush(ctx)
			time.Sleep(time.Millisecond)
		}
	})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 50 {
				start := time.Now()
				_, err := s.Check(ctx, req)
				if took := time.Since(start); took > timeout+200*time.Millisecond {
					t.Errorf("check took %s during a flush storm", took)
				}
				if err == nil {
					ok.Add(1)
				} else if !errors.Is(err, counter.ErrUnavailable) {
					t.Errorf("got %v, want nil or ErrUnavailable", err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flusher.Wait()
	if ok.Load() == 0 {
		t.Errorf("no check succeeded during the storm")
	}
	raw.ScriptFlush(ctx)
	if _, err := s.Check(ctx, req); err != nil {
		t.Fatalf("after the storm: %v", err)
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, 0)
	it := counter.Item{Key: "k", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Minute), Cost: 1}
	for name, req := range map[string]counter.Request{
		"no items":        {},
		"before 1970":     {Items: []counter.Item{it}, Now: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)},
		"2200":            {Items: []counter.Item{it}, Now: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)},
		"after 2^53 µs":   {Items: []counter.Item{it}, Now: time.UnixMicro(1 << 53)},
		"sliding a month": {Items: []counter.Item{{Key: "k", Algorithm: limit.SlidingWindow, Limit: 1, Window: limit.Month, Cost: 1}}},
	} {
		if _, err := s.Check(context.Background(), req); !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if _, err := tgredis.New(tgredis.Config{URL: "http://nope"}); err == nil {
		t.Errorf("New with an http URL: no error")
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	u, prefix := redistest.New(t)
	s := open(t, tgredis.Config{URL: u, Prefix: prefix})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	it := counter.Item{Key: "k", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Minute), Cost: 1}
	if _, err := s.Check(context.Background(), counter.Request{Items: []counter.Item{it}}); !errors.Is(err, counter.ErrUnavailable) {
		t.Fatalf("check after Close: got %v, want ErrUnavailable", err)
	}
}

// testLogger fails the test on any record at error level or above.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(failHandler{t})
}

type failHandler struct{ t testing.TB }

func (h failHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h failHandler) Handle(_ context.Context, r slog.Record) error {
	var attrs []string
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a.String())
		return true
	})
	h.t.Errorf("store logged: %s %v", r.Message, attrs)
	return nil
}

func (h failHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h failHandler) WithGroup(string) slog.Handler      { return h }
