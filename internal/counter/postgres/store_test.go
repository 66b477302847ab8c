package postgres_test

// What the conformance suite cannot see from outside a Store: statements
// of several requests decided in one call, pruning, lock order, key encoding,
// a server that is slow rather than gone, and opening and closing.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// base is mid-month, so that a month window is a plain one unless a test
// moves to its edge.
var base = time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)

func sameResult(t interface {
	Helper()
	Fatalf(string, ...any)
}, what string, req counter.Request, got, want counter.Result) {
	t.Helper()
	if got.Allowed != want.Allowed || !got.Now.Equal(want.Now) {
		t.Fatalf("%s %+v: allowed %v at %s, want %v at %s", what, req, got.Allowed, got.Now, want.Allowed, want.Now)
	}
	for i := range want.Decisions {
		if got.Decisions[i] != want.Decisions[i] {
			t.Fatalf("%s item %d of %+v:\n got  %+v\n want %+v", what, i, req, got.Decisions[i], want.Decisions[i])
		}
	}
}

func mustCheck(t testing.TB, s counter.Store, req counter.Request) counter.Result {
	t.Helper()
	res, err := s.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("check %+v: %v", req, err)
	}
	return res
}

func fixed(key string, lim int64, w limit.Window) counter.Item {
	return counter.Item{Key: key, Algorithm: limit.FixedWindow, Limit: lim, Window: w, Cost: 1}
}

// TestStatementMatchesSequentialModel sends random sets of requests, with any
// number of ceilings and any items advisory, as one function call each: every
// request must be decided as if the requests had come one after the other
// (countertest.Model is what one statement must decide for the requests in
// its order), each seeing what the ones before it kept: all of a request, its
// ceilings alone, or nothing, less its refused advisory items.
func TestStatementMatchesSequentialModel(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{DSN: pgtest.New(t), Timeout: 10 * time.Second})
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		defs := anyCounters(rt, "k", 1, 3)
		m := countertest.NewModel()
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(30*24*time.Hour)).Draw(rt, "start"))).Truncate(time.Microsecond)
		for round := range rapid.IntRange(1, 8).Draw(rt, "rounds") {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Microsecond, 300 * time.Millisecond, time.Second, time.Minute, -time.Millisecond}).Draw(rt, "jump"))
			var reqs []counter.Request
			for range rapid.IntRange(1, 12).Draw(rt, "requests") {
				reqs = append(reqs, anyRequest(rt, group, defs))
			}
			statementMatchesModel(rt, s, m, round, reqs, now)
		}
	})
}

// anyCounters draws n (from lo to hi) counters of any algorithm, keyed
// prefix0, prefix1…, on windows of a second to a month (a month only for a
// fixed window).
func anyCounters(rt *rapid.T, prefix string, lo, hi int) []counter.Item {
	windows := []limit.Window{limit.Every(time.Second), limit.Every(time.Minute), limit.Every(time.Hour), limit.Month}
	var defs []counter.Item
	for i := range rapid.IntRange(lo, hi).Draw(rt, "counters") {
		alg := limit.Algorithm(rapid.IntRange(1, 3).Draw(rt, "alg"))
		w := rapid.SampledFrom(windows).Draw(rt, "window")
		if w.Month && alg != limit.FixedWindow {
			w = limit.Every(time.Minute)
		}
		defs = append(defs, counter.Item{Key: fmt.Sprintf("%s%d", prefix, i), Algorithm: alg, Limit: rapid.Int64Range(1, 8).Draw(rt, "limit"), Window: w})
	}
	return defs
}

// anyRequest draws a request in group of one to three items among defs,
// any of them advisory, any number of them ceilings, consuming or peeking.
func anyRequest(rt *rapid.T, group string, defs []counter.Item) counter.Request {
	req := counter.Request{Group: group}
	if rapid.IntRange(0, 3).Draw(rt, "peek") == 0 {
		req.Mode = counter.Peek
	}
	for range rapid.IntRange(1, 3).Draw(rt, "items") {
		it := rapid.SampledFrom(defs).Draw(rt, "item")
		it.Cost = rapid.Int64Range(1, it.Limit+1).Draw(rt, "cost")
		it.Advisory = rapid.IntRange(0, 2).Draw(rt, "advisory") == 0
		req.Items = append(req.Items, it)
	}
	req.Ceilings = rapid.IntRange(0, len(req.Items)).Draw(rt, "ceilings")
	return req
}

// statementMatchesModel sends reqs as one call at now and holds each answer
// to what m, which has seen the rounds before, decides for it.
func statementMatchesModel(rt *rapid.T, s *postgres.Store, m *countertest.Model, round int, reqs []counter.Request, now time.Time) {
	got, err := postgres.CheckCoalesced(s, reqs, now)
	if err != nil {
		rt.Fatalf("round %d: %v", round, err)
	}
	for i, req := range reqs {
		sameResult(rt, fmt.Sprintf("round %d request %d", round, i), req, got[i], m.Check(req, now))
	}
}

// TestEdgesMatchModel walks instants at the edges of calendar months (a leap
// February included), and a clock that steps back across a window's start,
// through every algorithm.
func TestEdgesMatchModel(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{DSN: pgtest.New(t), Timeout: 10 * time.Second})
	us := time.Microsecond
	instants := []time.Time{
		time.Date(2026, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 500000000, time.UTC), // back into December
		time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Add(us),
		time.Date(2028, 2, 29, 23, 59, 59, 999999000, time.UTC),
		time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC).Add(-us),
		time.Date(2028, 3, 1, 0, 0, 1, 0, time.UTC),
		time.Date(2028, 3, 1, 0, 0, 0, 999999000, time.UTC),
		time.Date(2028, 3, 1, 0, 0, 2, 500000000, time.UTC),
	}
	items := []counter.Item{
		{Key: "month", Algorithm: limit.FixedWindow, Limit: 5, Window: limit.Month, Cost: 1},
		{Key: "second", Algorithm: limit.FixedWindow, Limit: 2, Window: limit.Every(time.Second), Cost: 1},
		{Key: "sliding", Algorithm: limit.SlidingWindow, Limit: 3, Window: limit.Every(time.Second), Cost: 1},
		{Key: "bucket", Algorithm: limit.TokenBucket, Limit: 3, Window: limit.Every(time.Second), Cost: 1},
	}
	m := countertest.NewModel()
	for _, now := range instants {
		for _, it := range items {
			for _, cost := range []int64{1, 2} {
				it.Cost = cost
				req := counter.Request{Items: []counter.Item{it}, Now: now}
				sameResult(t, now.Format(time.RFC3339Nano), req, mustCheck(t, s, req), m.Check(req, now))
			}
		}
	}
}

// TestCoalescedChecksAreExact races many Checks on one key through one
// store: they must share round trips and still admit exactly the limit.
func TestCoalescedChecksAreExact(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{DSN: pgtest.New(t), Timeout: 10 * time.Second})
	before := postgres.Statements(s)
	const callers, lim = 200, 50
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		it := counter.Item{Key: "hot-" + alg.String(), Algorithm: alg, Limit: lim, Window: limit.Every(24 * time.Hour), Cost: 1}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range callers {
			wg.Go(func() {
				<-start
				if mustCheck(t, s, counter.Request{Items: []counter.Item{it}}).Allowed {
					allowed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := allowed.Load(); got != lim {
			t.Errorf("%s: %d callers at limit %d: %d allowed", alg, callers, lim, got)
		}
	}
	if sent := postgres.Statements(s) - before; sent >= 3*callers {
		t.Errorf("%d round trips for %d checks: nothing was coalesced", sent, 3*callers)
	} else {
		t.Logf("%d checks in %d round trips", 3*callers, sent)
	}
}

// TestOpposingKeyOrdersDoNotDeadlock sends requests naming the same keys in
// opposite orders, new keys and existing ones, through two stores at once.
func TestOpposingKeyOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	stores := []*postgres.Store{
		open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second, Inflight: 2}),
		open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second, Inflight: 2}),
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 30 {
				names := []string{"a", "b", "c", "d", fmt.Sprintf("new-%d", i), fmt.Sprintf("new-%d", i+1)}
				r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
				var req counter.Request
				for _, n := range names[:4] {
					req.Items = append(req.Items, fixed(n, limit.MaxLimit, limit.Every(time.Hour)))
				}
				if _, err := stores[g%2].Check(context.Background(), req); err != nil {
					t.Errorf("goroutine %d, request %d: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestKeysAreOpaque uses keys and groups that a naive concatenation would
// confuse, bytes PostgreSQL text cannot hold, and the longest group and key
// counter.Validate allows: each is a counter of its own.
func TestKeysAreOpaque(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{DSN: pgtest.New(t), Timeout: 10 * time.Second})
	long := strings.Repeat("g", counter.MaxGroupLen-1)
	pairs := []struct{ group, key string }{
		{"a", "b/c"}, {"a1", "c"}, {"a", "1c"}, {"", "a/b/c"}, {"", "1:a/b/c"}, {"", "2:a1/c"},
		{"", "x"}, {"", "~warm-up"},
		{"t", "\x00"}, {"t", "\xff"}, {"t", "\xff\x00"}, {"t", "é"},
		{long + "1", strings.Repeat("k", counter.MaxKeyLen)}, {long + "2", strings.Repeat("k", counter.MaxKeyLen)},
		{long + "1", strings.Repeat("\xff", counter.MaxKeyLen)}, {long + "2", strings.Repeat("\xff", counter.MaxKeyLen)},
	}
	for _, p := range pairs {
		req := counter.Request{Group: p.group, Items: []counter.Item{fixed(p.key, 1, limit.Every(time.Hour))}, Now: base}
		if res := mustCheck(t, s, req); !res.Allowed {
			t.Errorf("group %.20q key %q: first use refused: it shares a counter", p.group, p.key)
		}
		if res := mustCheck(t, s, req); res.Allowed {
			t.Errorf("group %.20q key %q: second use allowed: its counter was not kept", p.group, p.key)
		}
	}
}

// TestPruneDeletesExpiredKeepsLive prunes in statements smaller than the
// expired rows.
func TestPruneDeletesExpiredKeepsLive(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, PruneRows: 2})
	hour := limit.Every(time.Hour)
	past := time.Now().Add(-48 * time.Hour)
	for i := range 5 {
		mustCheck(t, s, counter.Request{Items: []counter.Item{fixed(fmt.Sprintf("old-%d", i), 10, hour)}, Now: past})
	}
	// Decided at an instant ahead of the database's clock, so that they
	// expire long after the test.
	ahead := time.Now().Add(24 * time.Hour)
	live := []counter.Item{
		fixed("live-fixed", 10, hour),
		{Key: "live-sliding", Algorithm: limit.SlidingWindow, Limit: 10, Window: hour, Cost: 1},
		{Key: "live-bucket", Algorithm: limit.TokenBucket, Limit: 10, Window: hour, Cost: 3},
	}
	for _, it := range live {
		mustCheck(t, s, counter.Request{Items: []counter.Item{it}, Now: ahead})
	}

	n, err := s.Prune(context.Background())
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if n < 5 {
		t.Errorf("pruned %d rows, want at least the 5 expired", n)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var old, kept int
	if err := conn.QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE key LIKE '%/old-%'), count(*) FILTER (WHERE key LIKE '%/live-%') FROM counters").Scan(&old, &kept); err != nil {
		t.Fatal(err)
	}
	if old != 0 || kept != len(live) {
		t.Errorf("after pruning: %d expired rows left (want 0), %d live rows (want %d)", old, kept, len(live))
	}
	for _, it := range live {
		res := mustCheck(t, s, counter.Request{Mode: counter.Peek, Items: []counter.Item{it}, Now: ahead})
		// One consumption of its cost; the peek counts nothing.
		if got, want := res.Decisions[0].Remaining, 10-it.Cost; got != want {
			t.Errorf("%s after pruning: remaining %d, want %d", it.Key, got, want)
		}
	}
}

// TestSlowServer holds a counter's row locked from another session: the
// server is up (it answers the store's probes), so the store waits for the
// row past its deadline, but no longer than the statement's own bound
// (statement_timeout, five deadlines at the default), then answers
// ErrUnavailable; a caller's cancellation ends its wait at once, and the
// store answers again once the lock is gone.
func TestSlowServer(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn})
	patient := open(t, postgres.Config{DSN: dsn, Timeout: 5 * time.Second})
	req := counter.Request{Items: []counter.Item{fixed("locked", limit.MaxLimit, limit.Every(time.Hour))}}
	// The row to lock, made by the patient store: on a server busy with
	// parallel tests, a first check may take longer than the default 50 ms,
	// and that is not what this test is about.
	mustCheck(t, patient, req)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM counters WHERE key LIKE '%/locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	const slack = 150 * time.Millisecond
	start := time.Now()
	_, err = s.Check(ctx, req)
	if took, bound := time.Since(start), 10*postgres.DefaultTimeout+slack; !errors.Is(err, counter.ErrUnavailable) || took > bound {
		t.Errorf("row locked: got %v after %s, want ErrUnavailable within %s", err, took, bound)
	}

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	_, err = patient.Check(cctx, req)
	if took := time.Since(start); !errors.Is(err, counter.ErrUnavailable) || !errors.Is(err, context.Canceled) || took > 20*time.Millisecond+slack {
		t.Errorf("caller cancelled: got %v after %s, want ErrUnavailable (canceled) within %s", err, took, 20*time.Millisecond+slack)
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := patient.Check(ctx, req); err != nil {
		t.Errorf("lock released: %v", err)
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.Config{DSN: pgtest.New(t)})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	it := fixed("k", 1, limit.Every(time.Hour))
	for _, req := range []counter.Request{{Items: []counter.Item{it}}, {Items: []counter.Item{it}, Now: base}} {
		if _, err := s.Check(context.Background(), req); !errors.Is(err, counter.ErrUnavailable) {
			t.Errorf("closed store, now %v: got %v, want ErrUnavailable", req.Now, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	newContext := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		ctx := newContext(t)
		_, err := postgres.New(ctx, postgres.Config{DSN: "postgres://tollgate@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"})
		if !errors.Is(err, counter.ErrUnavailable) {
			t.Errorf("got %v, want ErrUnavailable", err)
		}
	})
	t.Run("bad DSN keeps the password out", func(t *testing.T) {
		t.Parallel()
		ctx := newContext(t)
		_, err := postgres.New(ctx, postgres.Config{DSN: "postgres://tollgate:s3cret@127.0.0.1:notaport/db"})
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("got %v, want an error without the password", err)
		}
	})
	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		ctx := newContext(t)
		dsn := pgtest.New(t)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP FUNCTION tollgate_check"); err != nil {
			t.Fatal(err)
		}
		_, err = postgres.New(ctx, postgres.Config{DSN: dsn})
		if err == nil || errors.Is(err, counter.ErrUnavailable) || !strings.Contains(err.Error(), "migrate") {
			t.Errorf("got %v, want an error asking for migrations", err)
		}
	})
}

// TestMalformedCallsAreRefused calls tollgate_check with arguments the
// store never sends: each must raise, and count nothing.
func TestMalformedCallsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A call of one request of two items on keys a and b, which each case
	// breaks in one place.
	type args struct {
		keys              []string
		reqs, slots       []any
		advisory          []any
		consume, ceilings []any
	}
	ok := func() args {
		return args{
			keys: []string{"a", "b"}, reqs: []any{1, 1}, slots: []any{1, 2}, advisory: []any{false, false},
			consume: []any{true}, ceilings: []any{0},
		}
	}
	cases := []struct {
		name  string
		spoil func(*args)
	}{
		{"item arrays of different lengths", func(b *args) { b.slots = []any{1} }},
		{"a NULL advisory", func(b *args) { b.advisory = []any{false, nil} }},
		{"keys out of order", func(b *args) { b.keys = []string{"b", "a"} }},
		{"a key twice", func(b *args) { b.keys = []string{"a", "a"} }},
		{"a request without consume", func(b *args) { b.consume = []any{} }},
		{"a request without ceilings", func(b *args) { b.ceilings = []any{nil} }},
		{"more ceilings than items", func(b *args) { b.ceilings = []any{3} }},
		{"negative ceilings", func(b *args) { b.ceilings = []any{-1} }},
		{"a NULL request number", func(b *args) { b.reqs = []any{1, nil} }},
	}
	const call = `SELECT * FROM tollgate_check($1::text[], $2::integer[], $3::integer[], '{1,1}', '{10,10}',
		'{3600000000,3600000000}', '{1,1}', $4::boolean[], $5::boolean[], $6::integer[], NULL)`
	b := ok()
	if _, err := conn.Exec(ctx, call, b.keys, b.reqs, b.slots, b.advisory, b.consume, b.ceilings); err != nil {
		t.Fatalf("the well-formed call: %v", err)
	}
	for _, c := range cases {
		b := ok()
		c.spoil(&b)
		_, err := conn.Exec(ctx, call, b.keys, b.reqs, b.slots, b.advisory, b.consume, b.ceilings)
		if err == nil || !strings.Contains(err.Error(), "tollgate_check:") {
			t.Errorf("%s: got %v, want an error from tollgate_check", c.name, err)
		}
	}
	if counted := countedOn(t, conn, "a", "b"); counted != 2 {
		t.Errorf("a and b counted %d in all, want 2 (the well-formed call alone)", counted)
	}
}

// TestMalformedFixedCallsAreRefused: tollgate_check_fixed_packed refuses
// a call it cannot read as one, counting nothing: arrays of different
// lengths, a key without requests (none, or NULL).
func TestMalformedFixedCallsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const call = `SELECT * FROM tollgate_check_fixed_packed('{a,b}', $1::integer[], $2::bigint[], '{3600000000,3600000000}', '{1,1}', NULL)`
	if _, err := conn.Exec(ctx, call, []any{1, 2}, []any{10, 10}); err != nil {
		t.Fatalf("the well-formed call: %v", err)
	}
	cases := []struct {
		name   string
		ns     []any
		limits []any
	}{
		{"arrays of different lengths", []any{1, 1}, []any{10}},
		{"a key without requests", []any{1, 0}, []any{10, 10}},
		{"a key with NULL requests", []any{nil, 1}, []any{10, 10}},
	}
	for _, c := range cases {
		_, err := conn.Exec(ctx, call, c.ns, c.limits)
		if err == nil || !strings.Contains(err.Error(), "tollgate_check_fixed_packed:") {
			t.Errorf("%s: got %v, want an error from tollgate_check_fixed_packed", c.name, err)
		}
	}
	if counted := countedOn(t, conn, "a", "b"); counted != 3 {
		t.Errorf("a and b counted %d in all, want 3 (the well-formed call alone)", counted)
	}
}

// countedOn returns what the counters of keys hold in all.
func countedOn(t *testing.T, conn *pgx.Conn, keys ...string) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), "SELECT coalesce(sum(count), 0) FROM counters WHERE key = ANY($1)", keys).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
