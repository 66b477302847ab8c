// Package redis is the counter.Store kept in Redis, on one server or on a
// Redis Cluster: a Lua script (check.lua, run with EVALSHA) reads, decides
// and writes all of a request's counters atomically with the arithmetic of
// internal/limit, in one round trip. Concurrent Checks share round trips
// and scripts: one script decides the checks that met in the queue, one
// after the other, each seeing what the ones before it counted (coalesce.go).
// The store turns every go-redis and network error into
// counter.ErrUnavailable within its deadline.
//
// On a cluster, go-redis's ClusterClient routes each script to the node that
// owns its keys' hash slot and follows MOVED and ASK redirects; the store
// adds no sharding of its own (cluster.go says what it adds and why).
//
// Of Tollgate's packages, redis imports only internal/counter and
// internal/limit; no go-redis type is seen outside it, and only cmd/tollgate
// imports it.
package redis

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// DefaultTimeout bounds one Check when Config.Timeout is zero.
const DefaultTimeout = 50 * time.Millisecond

// noGroup is the hash tag of requests without a Group: one fixed tag, so
// that such a request's keys still share one cluster slot (the slot of
// "{~}"), like any tenant's. It must not be empty (Redis Cluster hashes a
// whole key whose tag is "{}"), and it is no Group counter.Validate accepts,
// so that it names no one else's counters.
const noGroup = "~"

var (
	//go:embed checklib.lua
	checkLibLua string
	//go:embed check.lua
	checkTailLua string
)

// checkLua decides the checks of one script; checkSHA names it for EVALSHA.
var (
	checkLua = checkLibLua + checkTailLua
	checkSHA = goredis.NewScript(checkLua).Hash()
)

// Config configures a Store.
type Config struct {
	// URL names one server or a cluster:
	//
	//	redis://[user:password@]host:port[/db]     one server (rediss:// with TLS)
	//	redis+cluster://[user:password@]host:port[?addr=host:port&addr=host:port]
	//	redis+cluster://[user:password@]host:port,host:port[,…]
	//	                                           a Redis Cluster (rediss+cluster:// with TLS)
	//
	// A cluster URL names seed nodes (the hosts, then each addr); any one
	// that answers is enough, the others are learnt from it. A cluster has
	// database 0 only. Timeouts, retries and the protocol in the query are
	// overridden by the store's own.
	URL string
	// Prefix starts every key the store writes; it must not hold '{' or '}',
	// which would move the keys' hash tag.
	Prefix string
	// Timeout bounds each Check, connecting included; DefaultTimeout when zero.
	Timeout time.Duration
	// Logger receives an error record when the script's verdict differs
	// from limit.Admit's (a bug: checklib.lua no longer matches
	// internal/limit); nothing is logged when nil. Failed checks are
	// returned, not logged.
	Logger *slog.Logger
}

// ErrWrongMode is returned (wrapped) by Verify when a server's mode does not
// match the URL: a redis:// URL at a cluster node, or a redis+cluster:// URL
// at a server that is not in cluster mode.
var ErrWrongMode = errors.New("redis server mode does not match the URL")

// Store is a counter.Store on one Redis server or a Redis Cluster. Its keys
// are prefix{group}:key, hash-tagged so that a request's keys share one
// cluster slot (see encode). It is safe for concurrent use.
type Store struct {
	// c is a *goredis.Client, or a *goredis.ClusterClient when cluster is
	// set.
	c       goredis.UniversalClient
	cluster *goredis.ClusterClient
	// seeds are the options of a client for each address the URL names, for
	// Verify.
	seeds   []*goredis.Options
	prefix  string
	timeout time.Duration
	// lastAnswer is when (Unix ns) the server last answered a script
	// (late).
	lastAnswer atomic.Int64
	log        *slog.Logger

	// drift counts verdicts of the script that limit.Admit does not share.
	drift atomic.Int64
	// resent counts checks sent again after the cluster refused their
	// script before running it (TRYAGAIN, or MOVED and ASK past go-redis's
	// redirects).
	resent atomic.Int64
	// scripts counts the scripts sent (exec), for tests.
	scripts atomic.Int64

	mu  sync.Mutex
	one *lane // the queue of a single server
	// batches is CheckBatch's lane on a single server (batchlane.go).
	batches batchLane
	lanes   map[string]*lane // a cluster's queues, by master address (coalesce.go)
	closed  bool
	// inflight counts senders at work, which Close waits for.
	inflight sync.WaitGroup
	quit     chan struct{} // closed by Close
}

var errClosed = errors.New("store closed")

var _ counter.Store = (*Store)(nil)

// New opens a Store; it does not contact the server until the first Check
// (or Verify). A malformed URL or prefix, or a negative timeout, is an
// error.
func New(cfg Config) (*Store, error) {
	return newStore(cfg, nil)
}

// dialer, when not nil, replaces go-redis's dialing (tests route a node
// through a faultnet proxy with it).
type dialer func(ctx context.Context, network, addr string) (net.Conn, error)

func newStore(cfg Config, dial dialer) (*Store, error) {
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 {
		return nil, fmt.Errorf("redis timeout %s: must not be negative", timeout)
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("redis key prefix %q: must not hold '{' or '}'", cfg.Prefix)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		prefix:  cfg.Prefix,
		timeout: timeout,
		log:     log,
		quit:    make(chan struct{}),
	}
	copt, opt, err := parseOptions(cfg.URL)
	if err != nil {
		return nil, err
	}
	if copt != nil {
		boundCluster(copt, timeout, dial)
		s.cluster = goredis.NewClusterClient(copt)
		s.c = s.cluster
		for _, a := range copt.Addrs {
			s.seeds = append(s.seeds, seedOptions(copt, a))
		}
		s.lanes = map[string]*lane{}
		return s, nil
	}
	if dial != nil {
		opt.Dialer = dial
	}
	seed := *opt
	bound(&seed, verifyTimeout)
	bound(opt, timeout)
	s.c = goredis.NewClient(opt)
	s.seeds = []*goredis.Options{&seed}
	s.one = &lane{senders: senders}
	return s, nil
}

// protocol is the RESP version the store speaks. RESP2 has no push
// notifications, which the store does not use: with RESP3 go-redis peeks at
// the socket for them before every command, a system call per round trip,
// and connecting costs a HELLO.
const protocol = 2

// bound makes every wait inside go-redis end by the Check's deadline: a
// retry, a dial backoff or a longer socket timeout would outlive it.
func bound(opt *goredis.Options, timeout time.Duration) {
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialTimeout = timeout
	opt.DialerRetries = 1
	// A script's round trip may take up to twice the deadline from a
	// server that is answering, late (late, in coalesce.go).
	opt.ReadTimeout = 2 * timeout
	opt.WriteTimeout = 2 * timeout
	opt.PoolTimeout = timeout
	// Fewer commands on connect: a reconnect under load must fit the deadline.
	opt.DisableIdentity = true
	opt.Protocol = protocol
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// Close closes the store's connections. Checks after Close fail with
// counter.ErrUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	s.mu.Unlock()
	// Scripts in flight end by their deadlines.
	s.inflight.Wait()
	if err := s.c.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("close redis: %s", err.Error())
	}
	return nil
}

// Check decides req in one script, alone or among the checks queued with
// it (coalesce.go), under the store's timeout (or ctx's earlier deadline).
// Errors wrap counter.ErrInvalid for a malformed request
// (counter.Validate's bounds on Now keep it below 2^53 µs, which the
// script's Lua numbers hold exactly) and counter.ErrUnavailable for anything
// the server or the network did, including the deadline, with the context's
// error when it expired.
func (s *Store) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	return s.CheckInto(ctx, req, nil)
}

// CheckInto implements counter.Store: Check, its decisions written into
// into when it has room.
func (s *Store) CheckInto(ctx context.Context, req counter.Request, into []limit.Decision) (counter.Result, error) {
	if err := counter.Validate(req); err != nil {
		return counter.Result{}, err
	}
	j := newJob()
	s.encode(j, req)
	s.deadlines(ctx, j)
	if err := s.call(ctx, j); err != nil {
		// A job given up on may still be in a sender's hands: it is left
		// to the collector, not reused.
		if ctx.Err() == nil && !time.Now().Before(j.deadline) {
			err = context.DeadlineExceeded
		}
		return counter.Result{}, unavailable(ctx, err)
	}
	return s.result(ctx, req, j, into)
}

// deadlines sets j's deadline (the store's timeout) and hard deadline (ten
// times as long, at least half a second), either cut to ctx's deadline.
func (s *Store) deadlines(ctx context.Context, j *job) {
	now := time.Now()
	j.began, j.deadline, j.hard = now, now.Add(s.timeout), now.Add(max(10*s.timeout, 500*time.Millisecond))
	if d, ok := ctx.Deadline(); ok {
		j.deadline, j.hard = earlier(j.deadline, d), earlier(j.hard, d)
	}
}

// result reads req's answer from j's reply, its decisions written into
// into when it has room (counter.AnswerInto), and frees j.
func (s *Store) result(ctx context.Context, req counter.Request, j *job, into []limit.Decision) (counter.Result, error) {
	us, seen, err := decode(j.reply, j.seen[:0], len(req.Items))
	j.seen = seen
	if err != nil {
		return counter.Result{}, fmt.Errorf("redis check: %w: %w", counter.ErrUnavailable, err)
	}
	now := time.UnixMicro(us).UTC()
	if !req.Now.IsZero() {
		// What the script used, to the microsecond every store keeps.
		now = req.Now.Truncate(time.Microsecond)
	}
	s.verify(ctx, req, seen, now)
	res := counter.AnswerInto(req, seen, now, into)
	j.free()
	return res, nil
}

// verify repeats the script's verdicts with limit.Admit on the states it saw.
// A difference is a bug (checklib.lua no longer matches internal/limit); the
// script's verdict stands, since it is what was written, and the store logs
// the first difference and then ever more rarely.
func (s *Store) verify(ctx context.Context, req counter.Request, seen []counter.Seen, now time.Time) {
	us := now.UnixMicro()
	for i, it := range req.Items {
		ok, _ := limit.Admit(it.Algorithm, seen[i].State, us, it.Cost, it.Limit, it.Window)
		if ok == seen[i].Allowed {
			continue
		}
		if n := s.drift.Add(1); n&(n-1) == 0 {
			s.log.LogAttrs(ctx, slog.LevelError, "counter script disagrees with limit",
				slog.Int64("count", n),
				slog.String("algorithm", it.Algorithm.String()),
				slog.String("window", it.Window.String()),
				slog.Int64("limit", it.Limit),
				slog.Int64("cost", it.Cost),
				slog.Int64("now_us", us),
				slog.Int64("state_start", seen[i].State.Start),
				slog.Int64("state_count", seen[i].State.Count),
				slog.Int64("state_prev", seen[i].State.Prev),
				slog.Float64("state_tat", seen[i].State.TAT),
				slog.Bool("script_allowed", seen[i].Allowed))
		}
	}
}

// unavailable turns an error of go-redis or the network into ErrUnavailable,
// keeping the context's own error for errors.Is.
func unavailable(ctx context.Context, err error) error { return failed(ctx, "redis check", err) }

// failed turns an error of go-redis or the network in the operation what
// into ErrUnavailable, keeping the context's own error, or the store's
// deadline's, for errors.Is.
func failed(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: %w: %w", what, counter.ErrUnavailable, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", what, counter.ErrUnavailable, context.DeadlineExceeded)
	}
	return fmt.Errorf("%s: %w: %s", what, counter.ErrUnavailable, err.Error())
}

// key is the Redis key of the counter named key in group.
func (s *Store) key(group, key string) string {
	return s.prefix + "{" + cmp.Or(group, noGroup) + "}:" + key
}

// The sizes of checklib.lua's layouts: a request's header, and an item.
const (
	headerLen = 11
	itemLen   = 26
)

// encode lays req out in j for the script: its items' keys and the
// request's layout (checklib.lua). The keys are substrings of one string:
// prefix{group}:key.
//
// Every key of one request carries the same hash tag, so a whole check lands
// in one hash slot of a Redis Cluster and runs as one script on one node,
// atomically: Redis refuses a script whose keys span slots (CROSSSLOT), and
// a check split over nodes could not be all-or-nothing. The tag is the
// tenant (counter.Request.Group) because everything one check counts belongs
// to one tenant (its per-IP, quota and allotment ceilings and its policies),
// while different tenants hash to different slots and so spread over the
// shards. The price is that all of one tenant's counters live on one shard:
// one shard's script throughput (one Redis core; the README's benchmarks
// measure it) is that tenant's ceiling, however many shards the cluster has.
// A very hot tenant cannot be spread further without splitting its checks
// across slots, which would give up their atomicity. What relieves its
// shard: the gate's own ceilings are taken in advance (an instance takes a block of
// units per shared write and spends it locally), and the checks of one
// tenant that meet in a queue are decided by one script (coalesce.go).
//
// A request without a Group gets the fixed tag noGroup: one slot too.
func (s *Store) encode(j *job, req counter.Request) {
	var b strings.Builder
	b.Grow(s.keysLen(req))
	s.appendKeys(&b, req)
	s.encodeIn(j, req, b.String())
}

// keysLen is the length of req's keys, end to end.
func (s *Store) keysLen(req counter.Request) int {
	head := len(s.prefix) + len(cmp.Or(req.Group, noGroup)) + 3
	n := 0
	for _, it := range req.Items {
		n += head + len(it.Key)
	}
	return n
}

// appendKeys writes req's keys to b, end to end.
func (s *Store) appendKeys(b *strings.Builder, req counter.Request) {
	group := cmp.Or(req.Group, noGroup)
	for _, it := range req.Items {
		b.WriteString(s.prefix)
		b.WriteByte('{')
		b.WriteString(group)
		b.WriteString("}:")
		b.WriteString(it.Key)
	}
}

// encodeIn is encode with req's keys written already, end to end, in all
// (appendKeys).
func (s *Store) encodeIn(j *job, req counter.Request, all string) {
	j.group = cmp.Or(req.Group, noGroup)
	head := len(s.prefix) + len(j.group) + 3
	j.keys = j.keys[:0]
	off := 0
	for _, it := range req.Items {
		end := off + head + len(it.Key)
		j.keys = append(j.keys, all[off:end])
		off = end
	}
	j.spec = appendRequest(j.spec[:0], req)
}

// appendRequest appends req's layout (checklib.lua) to b. Every number is
// a whole number below 2^53 (counter.Validate), exact in a float64.
func appendRequest(b []byte, req counter.Request) []byte {
	peek := byte(0)
	if req.Mode == counter.Peek {
		peek = 1
	}
	now := -1.0
	if !req.Now.IsZero() {
		now = float64(req.Now.UnixMicro())
	}
	b = append(b, peek, byte(req.Ceilings), byte(len(req.Items)))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(now))
	for _, it := range req.Items {
		advisory := byte(0)
		if it.Advisory {
			advisory = 1
		}
		b = append(b, byte(it.Algorithm), advisory)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(it.Limit)))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(it.Window.Micros())))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(it.Cost)))
	}
	return b
}

var errReply = errors.New("unexpected script reply")

// stateLen is the size of a packed limit.State: four little-endian float64s.
const stateLen = 32

// replyLen is the size of a decided request's part of the script's reply.
func replyLen(items int) int { return 8 + (stateLen+1)*items }

// decode reads a request's part of the script's reply: the instant it used
// (Unix µs), then per item the state it saw and its verdict, appended to
// seen.
func decode(reply string, seen []counter.Seen, n int) (int64, []counter.Seen, error) {
	if len(reply) != replyLen(n) {
		return 0, seen, fmt.Errorf("%d bytes for %d items: %w", len(reply), n, errReply)
	}
	now := f64(reply)
	for i := range n {
		b := reply[8+(stateLen+1)*i:]
		st := unpackState(b)
		seen = append(seen, counter.Seen{State: st, Allowed: b[stateLen] == 1})
	}
	return int64(now), seen, nil
}

// unpackState reads the packed limit.State (struct.pack '<dddd': start,
// count, prev, tat) at the start of b.
func unpackState(b string) limit.State {
	return limit.State{Start: int64(f64(b)), Count: int64(f64(b[8:])), Prev: int64(f64(b[16:])), TAT: f64(b[24:])}
}

// f64 reads the little-endian float64 at the start of b, as the script's
// struct.pack('<d') wrote it. The counts and instants are whole numbers
// below 2^53, exact in a float64.
func f64(b string) float64 {
	_ = b[7]
	return math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
}
