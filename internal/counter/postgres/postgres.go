// Package postgres is the counter.Store that keeps counters in PostgreSQL's
// counters table, so that every Tollgate instance sharing a database shares
// its counts exactly. The arithmetic runs inside the database, in the
// function tollgate_check (migrations/000013_counter_check_lean.up.sql),
// which reproduces internal/limit's steps operation for operation, and, for
// the common statement of one-item consuming fixed-window checks, in
// tollgate_check_fixed_packed (migrations/000015_counter_check_fixed_packed.up.sql),
// one set-based statement with the same answers.
//
// Throughput comes from coalescing: concurrent Checks are gathered while the
// previous statement is in the database and decided by one function call,
// one round trip and one transaction, in arrival order, so that a hot key (a
// tenant's quota) costs one row update per statement instead of one per
// request, and the call's fixed cost (most of a lone Check's) is shared.
// What a Check costs Tollgate on its own is kept to a pooled call, a share
// of a timer and its Answer; the rest is per statement.
//
// Every tenant shares the store's connections, so each kind of work has a
// lane of its own and takes no other's: the coalesced Checks, the lease
// operations (leaseops.go), and CheckBatch's batches (fairlane.go), which
// send one statement of a tenant at a time, tenants in turn, in statements
// of at most Config.MaxItems items, on connections the pool opens for them
// alone. Reset, Held, reservations (reserve.go) and pruning take the
// connections left.
//
// postgres imports internal/counter, internal/limit, pgx and its own sqlc
// output in sqlcgen, generated from the queries in sql/ beside it; only
// cmd/tollgate imports it, and no pgx type crosses its API.
package postgres

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres/sqlcgen"
	"github.com/tollgate/tollgate/internal/limit"
)

// Defaults of Config.
const (
	DefaultTimeout    = 50 * time.Millisecond
	DefaultInflight   = 1
	DefaultWindow     = 200 * time.Microsecond
	DefaultMaxItems   = 512
	DefaultPruneEvery = time.Minute
	DefaultPruneRows  = 1000
)

// Config configures a Store.
type Config struct {
	// DSN locates the database (postgres://… or key=value), migrated to at
	// least 000002. The store opens a pool of its own on it whose sessions
	// run with synchronous_commit=off: a commit returns before its WAL is
	// flushed, so a server crash forgets the counts of about the last
	// wal_writer_delay (200 ms by default; three times that at worst),
	// which a rate limit tolerates. Counts that bill money must not rely on
	// this store alone.
	DSN string
	// MaxConns bounds the connections of the lanes every tenant shares: at
	// least 3, for the Checks' statements (Inflight of them), the lease
	// operations' statements (one) and the rest (Reset, Held, reservations,
	// pruning: those left). The pool opens Inflight more for CheckBatch's lane
	// (fairlane.go), so that no tenant's batches take a connection of the
	// Checks' lane, and one more for probes of a server that seems silent
	// (await). Zero keeps the DSN's pool_max_conns, or pgxpool's default
	// (the larger of 4 and the number of CPUs). The pool keeps them all
	// open (unless the DSN sets pool_min_conns).
	MaxConns int32
	// Timeout is how long a call waits for a store that has stopped
	// answering, queueing included (rounded up to a whole millisecond, so
	// that the Checks of one millisecond share a timer); zero means
	// DefaultTimeout. A call still waiting then waits on while the store
	// keeps answering statements, up to ten times as long (at least half a
	// second), and CheckBatch's behind its own group's statements for as long
	// as it keeps answering them: a busy store is not an outage (await). A
	// statement whose callers have given up still runs for up to ten times as
	// long (at least half a second) before its connection is dropped, so that
	// a server that is only slow keeps its warm connections; its counts may
	// then apply although its callers were told ErrUnavailable.
	Timeout time.Duration
	// Inflight bounds the statements in the database at once (MaxConns bounds
	// it too), of the Checks' lane and as many of CheckBatch's lane; zero
	// means DefaultInflight. Checks arriving meanwhile gather into the next
	// statement. More statements at once use more database cores on distinct
	// keys, but on a hot key they only queue for its row lock, and fewer,
	// larger statements do the same work in fewer round trips: on a 2-core
	// box a call costs the database about 130 µs of CPU, and each item about
	// 15 µs more. There, with Tollgate on the same cores, 2 statements at
	// once (a Window of 0.2 to 1 ms) cost the database 10 to 40 % more CPU a
	// check than 1, for no more checks a second.
	Inflight int
	// Window is how long a statement gathers once its first Check has
	// arrived, when fewer than Inflight statements are in flight but some are
	// (an idle store sends at once); zero means DefaultWindow. It matters
	// only with Inflight above 1.
	Window time.Duration
	// MaxItems is the number of items after which a statement of Checks
	// stops gathering, and the most one statement of CheckBatch's lane
	// holds (a longer batch is cut into statements of at most that many);
	// zero means DefaultMaxItems.
	MaxItems int
	// PruneEvery is how often Run deletes expired counters; zero means
	// DefaultPruneEvery.
	PruneEvery time.Duration
	// PruneRows is the number of rows each pruning statement deletes at
	// most; zero means DefaultPruneRows.
	PruneRows int32
	// Logger receives what Run cannot return; nil discards it.
	Logger *slog.Logger
}

// Store is the PostgreSQL counter.Store. It is safe for concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	q           *sqlcgen.Queries
	log         *slog.Logger
	timeout     time.Duration // a caller's wait
	sendTimeout time.Duration // a statement's round trip
	window      time.Duration
	maxItems    int
	inflight    int
	pruneEvery  time.Duration
	pruneRows   int32

	mu      sync.Mutex
	pending []*call
	items   int       // items in pending
	firstAt time.Time // when the oldest pending call arrived
	closed  bool
	// expired is closed once Checks that arrived in the expiredMs'th
	// millisecond since opened have waited the timeout (see expiry).
	opened    time.Time
	expired   chan struct{}
	expiredMs int64

	kick      chan struct{} // wakes the loop: capacity 1
	freed     chan struct{} // a statement of the loop's finished: capacity inflight
	quit      chan struct{}
	loopDone  chan struct{}
	closeOnce sync.Once

	// lastFailure is when (Unix ns) a round trip last failed in a way that
	// may have broken connections: connections idle since before it are
	// pinged before their next use.
	lastFailure atomic.Int64
	// lastAnswer is when (Unix ns) a statement of any lane last came back
	// answered: the store is making progress (await).
	lastAnswer atomic.Int64
	// probing is set while a probe is in flight.
	probing atomic.Bool
	// statements counts the statements sent, fixedStatements the calls of
	// tollgate_check_fixed_packed among them (a split statement's
	// included), splitStatements the statements sent as two (splitFixed),
	// for tests; leaseStatements the calls of tollgate_lease_ops.
	statements      atomic.Int64
	fixedStatements atomic.Int64
	splitStatements atomic.Int64
	leaseStatements atomic.Int64

	// leases is the lane of lease operations (leaseops.go), which holds one
	// connection at most; directConns bounds the calls outside both lanes
	// (Reset, Held, reservations, charges) to the connections the lanes
	// leave, which directTurns lets one call of each group hold or wait for
	// at a time. batchLane is CheckBatch's (fairlane.go), on connections of
	// its own.
	leases      leaseLane
	directConns chan struct{}
	directTurns groupTurns
	batchLane   fairLane
}

var _ counter.Store = (*Store)(nil)

// New opens a store on cfg.DSN and returns once its connections are open
// and warmed up (under ctx). An unreachable database wraps counter.ErrUnavailable; a
// database without tollgate_check or tollgate_check_fixed_packed is an error of its own.
func New(ctx context.Context, cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		// Not quoted: the parse error may hold the password.
		return nil, errors.New("open counter store: DSN is not a valid PostgreSQL connection string")
	}
	s := &Store{
		log:        cfg.Logger,
		timeout:    orDefault(cfg.Timeout, DefaultTimeout),
		window:     orDefault(cfg.Window, DefaultWindow),
		maxItems:   orDefault(cfg.MaxItems, DefaultMaxItems),
		pruneEvery: orDefault(cfg.PruneEvery, DefaultPruneEvery),
		pruneRows:  orDefault(cfg.PruneRows, DefaultPruneRows),
		opened:     time.Now(),
		kick:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		loopDone:   make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.sendTimeout = max(10*s.timeout, 500*time.Millisecond)
	s.sizeLanes(pc, cfg.MaxConns, cfg.Inflight)
	s.configureConns(pc)

	s.pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open counter store: %v", err)
	}
	s.q = sqlcgen.New(s.pool)
	if err := s.warmPool(ctx, pc.MinConns); err != nil {
		s.pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42883" { // undefined_function
			return nil, errors.New("open counter store: function tollgate_check or tollgate_check_fixed_packed is missing: migrate the database")
		}
		return nil, fmt.Errorf("open counter store: %w: %v", counter.ErrUnavailable, err)
	}
	go s.loop()
	return s, nil
}

// sizeLanes divides pc's connections among the lanes (Config.MaxConns and
// Config.Inflight say how): Inflight statements of the Checks' lane, one
// connection for the lease operations, the rest for the direct calls, and
// as many more for CheckBatch's lane, plus one for probes.
func (s *Store) sizeLanes(pc *pgxpool.Config, maxConns int32, inflight int) {
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	if pc.MaxConns < 3 {
		// A connection for each lane and one for the rest.
		pc.MaxConns = 3
	}
	s.inflight = min(orDefault(inflight, DefaultInflight), int(pc.MaxConns)-2)
	s.freed = make(chan struct{}, s.inflight)
	s.directConns = make(chan struct{}, int(pc.MaxConns)-s.inflight-1)
	// As many connections more for CheckBatch's lane, held by its senders
	// alone, and one, which nothing but a probe waits for.
	s.batchLane.max = s.inflight
	pc.MaxConns += int32(s.inflight) + 1
	if pc.MinConns == 0 {
		// Every connection open and warm from the start and kept so: a
		// connection opened under load would put its warm-up (tens of
		// milliseconds, longer on a busy server) in the path of the lease
		// acquire that waits for it, past its deadline.
		pc.MinConns = pc.MaxConns
	}
}

// configureConns sets up the sessions of pc's connections: commits that do
// not wait for their WAL, statements that end before their round trip gives
// up, bounded dials, a warm-up and pings after a failure.
func (s *Store) configureConns(pc *pgxpool.Config) {
	params := pc.ConnConfig.RuntimeParams
	params["synchronous_commit"] = "off"
	if _, ok := params["statement_timeout"]; !ok {
		// Ends a statement before the client drops its connection for it, so
		// that the connection stays usable, and bounds what a statement that
		// nobody waits for can hold (row locks, a server process).
		params["statement_timeout"] = strconv.FormatInt((s.sendTimeout / 2).Milliseconds(), 10)
	}
	if _, ok := params["application_name"]; !ok {
		params["application_name"] = "tollgate-counters"
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		// A dial that the server never answers goes on in the background
		// after its statement has given up, holding a connection of the pool.
		pc.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	pc.AfterConnect = warmUp
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		// pgxpool's rule (idle over a second), and any connection that was
		// idle when another one failed: it may be dead too, and would fail a
		// whole statement.
		last := s.lastFailure.Load()
		return p.IdleDuration > time.Second || (last != 0 && p.IdleDuration > time.Since(time.Unix(0, last)))
	}
}

// warmPool holds n of the pool's connections at once, so that each is
// opened and warmed up before New returns, and gives them back.
func (s *Store) warmPool(ctx context.Context, n int32) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// orDefault returns v, or def when v is zero or negative.
func orDefault[T int | int32 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// call is one Check on its way through a statement. Calls are reused: one
// whose caller has read its answer goes back to callPool, while one whose
// caller stopped waiting is left to the garbage collector, since its
// statement may still answer it.
type call struct {
	req counter.Request
	// done receives one value once seen and now, or err, are set; it has
	// room for it, so that answering never waits for the caller.
	done chan struct{}
	seen []counter.Seen
	now  time.Time
	err  error
	// abandoned is set by a caller that stopped waiting, so that a statement
	// not yet sent leaves its request out.
	abandoned atomic.Bool
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Check implements counter.Store. It returns within two to three times
// cfg.Timeout when the store answers nothing, within ten when it keeps
// answering other statements but not this one, or by ctx's deadline if
// sooner: a store that has not answered by then, is closed, or whose caller's
// ctx ends, returns an error wrapping counter.ErrUnavailable, and
// context.DeadlineExceeded or ctx's error for the first and the last. A
// malformed request wraps counter.ErrInvalid. Requests without a Now are
// coalesced; one with a Now is sent on its own.
func (s *Store) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	return s.CheckInto(ctx, req, nil)
}

// CheckInto implements counter.Store: Check, its decisions written into
// into when it has room.
func (s *Store) CheckInto(ctx context.Context, req counter.Request, into []limit.Decision) (counter.Result, error) {
	if err := counter.Validate(req); err != nil {
		return counter.Result{}, fmt.Errorf("check counters: %w", err)
	}
	c := callPool.Get().(*call)
	c.req = req
	expired, err := s.enqueue(c)
	if err != nil {
		c.req = counter.Request{}
		callPool.Put(c)
		return counter.Result{}, err
	}
	if err := s.await(ctx, c.done, expired, true); err != nil {
		c.abandoned.Store(true)
		return counter.Result{}, fmt.Errorf("check counters: %w: %w", counter.ErrUnavailable, err)
	}
	res, err := counter.Result{}, c.err
	if err == nil {
		res = counter.AnswerInto(req, c.seen, c.now, into)
	}
	c.req, c.seen, c.now, c.err = counter.Request{}, nil, time.Time{}, nil
	callPool.Put(c)
	return res, err
}

var errClosed = fmt.Errorf("check counters: store closed: %w", counter.ErrUnavailable)

// await waits for done until ctx ends or the store is failing. The deadline
// (Config.Timeout, when expired is closed) is how long a call waits for a
// store that has stopped answering: a call still waiting then goes on
// waiting, a deadline at a time, until the store has been silent for two
// deadlines (no statement of any lane answered since the call began or since
// the last answer, whichever is later: one statement in flight may take
// longer than one deadline on a starved CPU) and, when bounded, at most until
// its round trip's own bound (sendTimeout). A store that answers late because
// it is busy (this machine's CPU taken by a burst, a hot row, a long queue of
// statements) is not an outage, and its answers stay exact; one that answers
// nothing is given up on within two to three deadlines. A call of
// CheckBatch's lane is not bounded: it may wait its turn behind its own
// group's statements, and its own statement, once sent, is bounded by send's
// deadline.
func (s *Store) await(ctx context.Context, done <-chan struct{}, expired <-chan struct{}, bounded bool) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
	}
	// The call began a deadline ago (give or take the millisecond expired
	// is rounded to): silence is counted from then, or from the store's
	// last answer if later.
	began := time.Now().Add(-s.timeout)
	var t *time.Timer
	for waited := s.timeout; ; waited += s.timeout {
		since := time.Unix(0, s.lastAnswer.Load())
		if since.Before(began) {
			since = began
		}
		silent := time.Since(since)
		if bounded && waited >= s.sendTimeout || silent > 2*s.timeout {
			return context.DeadlineExceeded
		}
		if silent >= s.timeout/2 {
			s.probe()
		}
		if t == nil {
			t = time.NewTimer(s.timeout)
			defer t.Stop()
		} else {
			t.Reset(s.timeout)
		}
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// probe asks the server a trivial question on the connection the pool keeps
// for it, once at a time, when the lanes have been silent for half a
// deadline: statements may wait on row locks or a starved CPU for longer than
// a deadline while the server is up, and its answer to the probe says so (it
// counts as an answer, for await). A server that is down or stalled answers
// no probe either.
func (s *Store) probe() {
	if !s.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.timeout)
		defer cancel()
		if _, err := s.pool.Exec(ctx, "SELECT 1"); err == nil {
			s.lastAnswer.Store(time.Now().UnixNano())
		}
	}()
}

// Close stops the store: Checks not yet sent fail with
// counter.ErrUnavailable, statements in flight finish, and the pool is closed.
// It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.loopDone
		s.closeLeases()
		s.closeBatches()
		s.pool.Close()
	})
	return nil
}

// send makes the one round trip for calls, at instant now (Unix µs) or,
// when nil, the database's, and completes every call. It runs under its own
// deadline, not a caller's: it serves many callers, and a connection
// abandoned mid-statement is lost.
func (s *Store) send(calls []*call, now *int64) {
	live := calls[:0]
	for _, c := range calls {
		if !c.abandoned.Load() {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	calls = live
	s.statements.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), s.sendTimeout)
	defer cancel()

	reqs := make([]counter.Request, len(calls))
	n := 0
	for i, c := range calls {
		reqs[i] = c.req
		n += len(c.req.Items)
	}
	seen, at, err := s.decide(ctx, reqs, n, now)
	if err == nil {
		s.lastAnswer.Store(time.Now().UnixNano())
	}
	if err != nil {
		err = s.unavailable(ctx, err)
		for _, c := range calls {
			c.err = err
			c.done <- struct{}{}
		}
		return
	}
	for _, c := range calls {
		k := len(c.req.Items)
		c.seen, c.now = seen[:k:k], at
		seen = seen[k:]
		// The call is its caller's again after this.
		c.done <- struct{}{}
	}
}

// decide makes the round trip for reqs, of n items in all, and returns what
// each item saw, in order, in one slice for the statement (each call's part
// is read by Answer before its caller returns), and the instant used. A
// statement of one-item consuming fixed-window requests, those on one key
// alike, the common one, goes to tollgate_check_fixed_packed, set-based; any
// other to tollgate_check, which decides item by item, unless enough of its
// requests are such one-item checks on keys the others do not name: then
// those go set-based and the others item by item, in two statements one
// after the other (splitFixed).
func (s *Store) decide(ctx context.Context, reqs []counter.Request, n int, now *int64) ([]counter.Seen, time.Time, error) {
	seen := make([]counter.Seen, n)
	keys, order := rowKeys(reqs, n)
	if p, at, ok := fixedParams(reqs, keys, order); ok {
		t, err := s.decideFixed(ctx, reqs, p, at, now, seen)
		return seen, t, err
	}
	if sp, ok := splitFixed(reqs, keys, order); ok {
		if p, at, ok := fixedParams(sp.fast.reqs, sp.fast.keys, sp.fast.order); ok {
			s.splitStatements.Add(1)
			fast := make([]counter.Seen, len(sp.fast.reqs))
			t, err := s.decideFixed(ctx, sp.fast.reqs, p, at, now, fast)
			if err != nil {
				return nil, time.Time{}, err
			}
			// The other requests at the same instant, so that the
			// statement's requests are decided at one, as one statement's.
			us := t.UnixMicro()
			rest := make([]counter.Seen, len(sp.rest.keys))
			if _, err := s.decideItemwise(ctx, sp.rest.reqs, len(sp.rest.keys), sp.rest.keys, sp.rest.order, &us, rest); err != nil {
				// The set-based statement's counts stay: its callers are
				// told the store failed, as when a statement's answer is
				// lost on its way back.
				return nil, time.Time{}, err
			}
			sp.scatter(seen, fast, rest)
			return seen, t, nil
		}
	}
	t, err := s.decideItemwise(ctx, reqs, n, keys, order, now, seen)
	return seen, t, err
}

// decideFixed sends reqs, laid out by fixedParams as p and at, to
// tollgate_check_fixed_packed, and sets seen[i], request i's only item's.
func (s *Store) decideFixed(ctx context.Context, reqs []counter.Request, p sqlcgen.CheckCountersFixedPackedParams, at []fixedAt, now *int64, seen []counter.Seen) (time.Time, error) {
	s.fixedStatements.Add(1)
	p.Now = now
	r, err := s.q.CheckCountersFixedPacked(ctx, p)
	if err == nil && (len(r.Starts) != len(p.Keys) || len(r.Counts) != len(p.Keys) || len(r.Admitted) != len(p.Keys)) {
		err = fmt.Errorf("%d, %d and %d answers for %d keys", len(r.Starts), len(r.Counts), len(r.Admitted), len(p.Keys))
	}
	if err != nil {
		return time.Time{}, err
	}
	// Request i is the at[i].nth on its key: the ones before it that were
	// admitted counted its cost each, and the key holds what all its
	// admitted ones counted.
	for i, a := range at {
		cost, admitted := reqs[i].Items[0].Cost, int64(r.Admitted[a.key])
		before := min(int64(a.nth), admitted)
		seen[i] = counter.Seen{
			State:   limit.State{Start: r.Starts[a.key], Count: r.Counts[a.key] - (admitted-before)*cost},
			Allowed: int64(a.nth) < admitted,
		}
	}
	return time.UnixMicro(r.NowUs).UTC(), nil
}

// decideItemwise sends reqs, of n items whose row keys and their order
// rowKeys gave, to tollgate_check, and sets seen, an entry an item.
func (s *Store) decideItemwise(ctx context.Context, reqs []counter.Request, n int, keys []string, order []int32, now *int64, seen []counter.Seen) (time.Time, error) {
	p := checkParams(reqs, n, keys, order)
	p.Now = now
	rows, err := s.q.CheckCounters(ctx, p)
	if err == nil && len(rows) != n {
		err = fmt.Errorf("%d rows for %d items", len(rows), n)
	}
	if err != nil {
		return time.Time{}, err
	}
	for i, r := range rows {
		seen[i] = counter.Seen{
			State:   limit.State{Start: r.SeenStart, Count: r.SeenCount, Prev: r.SeenPrev, TAT: r.SeenTat},
			Allowed: r.Allowed,
		}
	}
	return time.UnixMicro(rows[0].NowUs).UTC(), nil
}

// minSplit is the fewest one-item fixed-window checks for which a statement
// that has others too is sent as two (splitFixed): below it, the second
// round trip and function call cost more than the set-based path saves.
const minSplit = 8

// statementPart is some of a statement's requests, with their items' row
// keys, in order, and those keys' lock order (as rowKeys gives them); items
// holds where each item of the part is among the statement's items.
type statementPart struct {
	reqs  []counter.Request
	keys  []string
	order []int32
	items []int32
}

// split is a statement's requests in two parts: fast, one-item consuming
// fixed-window requests, each on a key no request of rest names, and rest.
type split struct{ fast, rest statementPart }

// splitFixed splits reqs, whose items' row keys and their order rowKeys
// gave, into the one-item fixed-window checks the set-based statement can
// decide and the rest, when there are at least minSplit of the first and
// some of the second. No key is in both: each part decides its requests in
// their order, so the requests on any one key are decided in the order
// they came, as in one statement; requests on distinct keys do not see each
// other.
func splitFixed(reqs []counter.Request, keys []string, order []int32) (split, bool) {
	var sp split
	// The keys the requests that cannot go set-based name.
	other := make(map[string]struct{})
	k, candidates := 0, 0
	for _, req := range reqs {
		if setBased(req) {
			candidates++
		} else {
			for j := range req.Items {
				other[keys[k+j]] = struct{}{}
			}
		}
		k += len(req.Items)
	}
	if candidates < minSplit || candidates == len(reqs) {
		return sp, false
	}
	// Each item's part (true: fast) and place in it.
	inFast := make([]bool, len(keys))
	place := make([]int32, len(keys))
	k = 0
	for _, req := range reqs {
		_, named := other[keys[k]]
		fast := setBased(req) && !named
		part := &sp.rest
		if fast {
			part = &sp.fast
		}
		part.reqs = append(part.reqs, req)
		for j := range req.Items {
			inFast[k+j], place[k+j] = fast, int32(len(part.keys))
			part.keys = append(part.keys, keys[k+j])
			part.items = append(part.items, int32(k+j))
		}
		k += len(req.Items)
	}
	if len(sp.fast.reqs) < minSplit {
		return sp, false
	}
	sp.fast.order = make([]int32, 0, len(sp.fast.keys))
	sp.rest.order = make([]int32, 0, len(sp.rest.keys))
	for _, i := range order {
		if inFast[i] {
			sp.fast.order = append(sp.fast.order, place[i])
		} else {
			sp.rest.order = append(sp.rest.order, place[i])
		}
	}
	return sp, true
}

// scatter puts what the parts' items saw where they are among the
// statement's items.
func (sp split) scatter(seen, fast, rest []counter.Seen) {
	for j, i := range sp.fast.items {
		seen[i] = fast[j]
	}
	for j, i := range sp.rest.items {
		seen[i] = rest[j]
	}
}

// setBased reports whether req is the kind tollgate_check_fixed_packed
// decides: one consuming fixed-window item.
func setBased(req counter.Request) bool {
	return len(req.Items) == 1 && req.Mode == counter.Consume && req.Items[0].Algorithm == limit.FixedWindow
}

// fixedAt places a request of a tollgate_check_fixed_packed statement: the
// index of its key, and how many requests on that key came before it.
type fixedAt struct{ key, nth int32 }

// fixedParams lays out reqs, whose row keys and their order rowKeys gave,
// as tollgate_check_fixed_packed takes them, and where each request is among them,
// when every request is one consuming
// fixed-window item and the requests on one row agree on its limit, window
// and cost; ok is false otherwise. (For one item, advisory or a ceiling or
// neither, tollgate_check keeps its count exactly when it is admitted, as
// tollgate_check_fixed_packed does.)
func fixedParams(reqs []counter.Request, keys []string, order []int32) (p sqlcgen.CheckCountersFixedPackedParams, at []fixedAt, ok bool) {
	for _, req := range reqs {
		if !setBased(req) {
			return p, nil, false
		}
	}
	n := len(reqs)
	p = sqlcgen.CheckCountersFixedPackedParams{
		Keys:    make([]string, 0, n),
		Ns:      make([]int32, 0, n),
		Limits:  make([]int64, 0, n),
		Windows: make([]int64, 0, n),
		Costs:   make([]int64, 0, n),
	}
	at = make([]fixedAt, n)
	for _, i := range order {
		it := reqs[i].Items[0]
		k := len(p.Keys) - 1
		if k >= 0 && keys[i] == p.Keys[k] {
			if it.Limit != p.Limits[k] || it.Window.Micros() != p.Windows[k] || it.Cost != p.Costs[k] {
				return p, nil, false
			}
			// order is a stable sort: the requests on one key keep
			// their arrival order.
			at[i] = fixedAt{key: int32(k), nth: p.Ns[k]}
			p.Ns[k]++
			continue
		}
		at[i] = fixedAt{key: int32(k + 1)}
		p.Keys = append(p.Keys, keys[i])
		p.Ns = append(p.Ns, 1)
		p.Limits = append(p.Limits, it.Limit)
		p.Windows = append(p.Windows, it.Window.Micros())
		p.Costs = append(p.Costs, it.Cost)
	}
	return p, at, true
}

// checkParams lays out reqs, of n items in all, whose row keys and their
// order rowKeys gave, as tollgate_check takes them: the statement's distinct
// row keys in byte order (its lock order), and each item's request, position
// among them and arguments.
func checkParams(reqs []counter.Request, n int, keys []string, order []int32) sqlcgen.CheckCountersParams {
	p := sqlcgen.CheckCountersParams{
		Reqs:       make([]int32, 0, n),
		Slots:      make([]int32, n),
		Algorithms: make([]int16, 0, n),
		Limits:     make([]int64, 0, n),
		Windows:    make([]int64, 0, n),
		Costs:      make([]int64, 0, n),
		Advisory:   make([]bool, 0, n),
		Consume:    make([]bool, len(reqs)),
		Ceilings:   make([]int32, len(reqs)),
	}
	for i, req := range reqs {
		p.Consume[i] = req.Mode == counter.Consume
		p.Ceilings[i] = int32(req.Ceilings)
		for _, it := range req.Items {
			p.Reqs = append(p.Reqs, int32(i+1))
			p.Algorithms = append(p.Algorithms, int16(it.Algorithm))
			p.Limits = append(p.Limits, it.Limit)
			p.Windows = append(p.Windows, it.Window.Micros())
			p.Costs = append(p.Costs, it.Cost)
			p.Advisory = append(p.Advisory, it.Advisory)
		}
	}
	p.Keys = make([]string, 0, n)
	for _, i := range order {
		if len(p.Keys) == 0 || p.Keys[len(p.Keys)-1] != keys[i] {
			p.Keys = append(p.Keys, keys[i])
		}
		p.Slots[i] = int32(len(p.Keys))
	}
	return p
}

// rowKeys returns the row key of each of reqs' n items, in order, and the
// items' indexes sorted by it, bytewise (the lock order). The keys are built
// into one buffer and cut out of one string: an allocation a statement rather
// than one an item. Items on one key keep their order.
func rowKeys(reqs []counter.Request, n int) (keys []string, order []int32) {
	size := 0
	for _, req := range reqs {
		for _, it := range req.Items {
			size += len(req.Group) + len(it.Key) + 5
		}
	}
	buf, ends := make([]byte, 0, size), make([]int, 0, n)
	for _, req := range reqs {
		for _, it := range req.Items {
			buf = appendRowKey(buf, req.Group, it.Key)
			ends = append(ends, len(buf))
		}
	}
	all, start := string(buf), 0
	keys = make([]string, n)
	for i, end := range ends {
		keys[i], start = all[start:end], end
	}
	order = make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(keys[a], keys[b]) })
	return keys, order
}

// unavailable turns a failed round trip of a Check into
// counter.ErrUnavailable, keeping the pgx error as text only.
func (s *Store) unavailable(ctx context.Context, err error) error {
	return s.failed(ctx, "check counters", err)
}

// failed turns a failed round trip of the operation what into
// counter.ErrUnavailable, keeping the pgx error as text only.
func (s *Store) failed(ctx context.Context, what string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// Not an answer from the server: the connection may be what broke.
		s.lastFailure.Store(time.Now().UnixNano())
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w: %w", what, counter.ErrUnavailable, ctxErr)
	}
	return fmt.Errorf("%s: %w: %v", what, counter.ErrUnavailable, err)
}

// maxRowKey bounds the bytes of a row key: a B-tree entry must fit a third
// of an 8 kB page, and one oversized key would fail its whole statement.
const maxRowKey = 2000

// The longest row key is an "x" and the hex of up to three digits of
// length, a colon, the longest group, a slash and the longest key: this
// stops the build should counter's bounds ever let it outgrow maxRowKey.
const _ = uint(maxRowKey - (1 + 2*(3+1+counter.MaxGroupLen+1+counter.MaxKeyLen)))

// appendRowKey appends the counters.key of key in group to buf: the
// group's length in decimal, a colon, the group, a slash and the key, so
// that no two pairs share a row. A pair that PostgreSQL text cannot hold (a
// key of invalid UTF-8, or with a NUL byte) is stored as "x" and the hex of
// that string instead; no plain row key starts with "x".
func appendRowKey(buf []byte, group, key string) []byte {
	start := len(buf)
	buf = strconv.AppendInt(buf, int64(len(group)), 10)
	buf = append(append(append(append(buf, ':'), group...), '/'), key...)
	if k := buf[start:]; !utf8.Valid(k) || bytes.IndexByte(k, 0) >= 0 {
		k = bytes.Clone(k)
		buf = hex.AppendEncode(append(buf[:start], 'x'), k)
	}
	return buf
}

// warmUpKey starts the counters and lease groups warmUp uses, each
// session its own; no row key starts with "~".
const warmUpKey = "~warm-up"

// warmUp readies a new connection for Checks and leases: it registers the
// store's array encoders, prepares the statements and runs each path of
// tollgate_check, tollgate_check_fixed_packed and the lease functions once, since
// PL/pgSQL plans each statement on its first use in a session, so that no
// caller's statement pays for it. The first call in a session takes far longer
// than the sessions' statement_timeout allows a Check, hence a transaction
// with its own, rolled back: prepared statements and plans outlive it.
func warmUp(ctx context.Context, conn *pgx.Conn) error {
	registerArrayEncoders(conn.TypeMap())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '30s'"); err != nil {
		return err
	}
	// Rows and leases of this session's own, so that connections warming
	// up at once (a pool filling under load, several instances starting)
	// never wait for each other's locks; none of it is kept.
	key := warmUpKey + "/" + strconv.FormatUint(uint64(conn.PgConn().PID()), 10)
	second, hour := limit.Every(time.Second).Micros(), limit.Every(time.Hour).Micros()
	q := sqlcgen.New(tx)
	_, err = q.CheckCounters(ctx, sqlcgen.CheckCountersParams{
		Keys:       []string{key},
		Reqs:       []int32{1, 1, 1, 1},
		Slots:      []int32{1, 1, 1, 1},
		Algorithms: []int16{int16(limit.FixedWindow), int16(limit.FixedWindow), int16(limit.SlidingWindow), int16(limit.TokenBucket)},
		Limits:     []int64{limit.MaxLimit, limit.MaxLimit, limit.MaxLimit, limit.MaxLimit},
		Windows:    []int64{second, limit.Month.Micros(), second, hour},
		Costs:      []int64{1, 1, 1, 1},
		Advisory:   []bool{false, false, false, false},
		Consume:    []bool{true},
		Ceilings:   []int32{0},
	})
	if err != nil {
		return err
	}
	// tollgate_check_fixed_packed, each of its ways: every key admitted, one
	// refused (its cost above its limit), and several requests on a key.
	for _, ns := range []int32{1, 2} {
		if _, err := q.CheckCountersFixedPacked(ctx, sqlcgen.CheckCountersFixedPackedParams{
			Keys:    []string{key, key + "/month"},
			Ns:      []int32{ns, 1},
			Limits:  []int64{limit.MaxLimit, 1},
			Windows: []int64{second, limit.Month.Micros()},
			Costs:   []int64{1, 2},
		}); err != nil {
			return err
		}
	}
	// The lease count the dashboard reads, and a reset. The warm-up group is
	// none that counter.Validate accepts.
	if _, err := q.HeldLeases(ctx, sqlcgen.HeldLeasesParams{Grp: key, Tallies: [][]byte{[]byte("t")}}); err != nil {
		return err
	}
	if err := q.ResetKey(ctx, sqlcgen.ResetKeyParams{Grp: key, Key: []byte("k"), CounterKey: key}); err != nil {
		return err
	}
	// tollgate_lease_ops, each way: an acquire with a ceiling taken, one
	// refused for want of a place, one over its group's cap, a renewal and
	// a release.
	for range 2 {
		acq := []*leaseOp{
			{kind: opAcquire, acq: counter.Acquire{Group: key, Key: "k2", Tally: "t", ID: "c", Limit: 1, TTL: time.Second, GroupLimit: 10,
				Ceilings: []counter.Item{{Key: "c", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Second), Cost: 1}}}},
			{kind: opAcquire, acq: counter.Acquire{Group: key, Key: "k2", ID: "d", Limit: 1, TTL: time.Second, GroupLimit: 10}},
			{kind: opAcquire, acq: counter.Acquire{Group: key, Key: "k3", ID: "e", Limit: 1, TTL: time.Second, GroupLimit: 1}},
			{kind: opRenew, ref: counter.LeaseRef{Group: key, ID: "c", TTL: time.Second}},
			{kind: opRelease, ref: counter.LeaseRef{Group: key, ID: "c"}},
		}
		if _, err := q.LeaseOps(ctx, leaseOpsParams(acq)); err != nil {
			return err
		}
	}
	return nil
}
