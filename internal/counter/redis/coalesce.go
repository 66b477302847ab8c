package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/counter"
)

// Coalescing: a Check sends its own script while a sender is free, else queues for the first sender to free, which sends up to maxPipeline checks as one check.lua a server (a tenant, on a cluster).
//
// The queue is kept per group (a tenant) and a sender takes the groups in
// turn, one check of each, so that a tenant's flood of waiting checks is
// not a queue its neighbours wait at the back of: a light tenant's check
// goes out in the next pipeline, whatever the flood holds waiting
// (BenchmarkNeighbourBesideFlood). Each group may hold maxGroupQueue
// checks waiting, so that a flood's waiting checks cannot fill the lane
// for everyone else either.
const (
	// senders is how many scripts (pipelines) of a single server's lane may
	// be in flight at once: while one is on the server, the next is being
	// sent or read. Four coalesced less (about 6 checks a script against 9
	// in the rate limit service's benchmark, for 15 % more of Tollgate's
	// CPU a decision); one left Redis idle while a pipeline travelled (in
	// BenchmarkNeighbourBesideFlood a third of two's checks a second).
	senders = 2
	// clusterSenders is a cluster master's: while a hash slot migrates,
	// go-redis follows a pipeline's ASK and MOVED replies with pauses of its
	// own inside the pipeline, and a master whose lane had fewer held up
	// the checks of its other slots (TestClusterReshardExact), or, paused,
	// kept its queued checks waiting past their deadlines
	// (TestClusterMasterDown).
	clusterSenders = 4
	maxPipeline    = 64
	// maxQueue bounds the checks waiting for a sender in a lane, and
	// maxGroupQueue those of one group. Healthy, the queue holds about one
	// check per concurrent caller; past these the server is not keeping up,
	// and a check fails at once rather than wait out its deadline.
	maxQueue      = 16384
	maxGroupQueue = 1024
	// maxScriptItems bounds the items one script decides, so that the
	// checks of one busy tenant hold the server for tens of microseconds at
	// a time, not milliseconds: other tenants' scripts wait behind each.
	maxScriptItems = 512
)

var errOverloaded = errors.New("too many checks waiting for the server")

// lane is the queue of the checks bound for one server: the single server's,
// or one cluster master's. A cluster has a lane per master so that a master
// that stops answering holds up only the checks of its own slots: one
// pipeline to several nodes returns when the slowest node does, and a
// stalled node would otherwise make every tenant's check wait out its
// deadline. Which master a check's slot is on is go-redis's answer
// (MasterForKey), and go-redis still routes the pipeline; a lane only groups
// the waiting. Lanes are kept per master address ever seen, a handful.
type lane struct {
	// waiting holds the groups with checks waiting for a sender, in the
	// order a sender takes them (take); queued counts their checks.
	waiting []*groupQueue
	queued  int
	// groups finds a waiting group's queue; spare keeps emptied ones.
	groups map[string]*groupQueue
	spare  []*groupQueue
	active int // senders at work: callers sending alone and drains
	// senders bounds active: senders or clusterSenders.
	senders int
	// lastAnswer is when (Unix ns) the lane's server last answered a
	// script (late): a cluster master that stopped answering is silent
	// while the others answer.
	lastAnswer atomic.Int64
}

// groupQueue is one group's checks waiting in a lane, in their order:
// jobs[head:].
type groupQueue struct {
	group string
	jobs  []*job
	head  int
}

// enqueue adds j to its group's queue, or returns errOverloaded when the
// lane or the group holds as many checks as it may.
func (l *lane) enqueue(j *job) error {
	if l.queued >= maxQueue {
		return errOverloaded
	}
	q := l.groups[j.group]
	if q == nil {
		if n := len(l.spare); n > 0 {
			q, l.spare = l.spare[n-1], l.spare[:n-1]
		} else {
			q = &groupQueue{}
		}
		q.group = j.group
		if l.groups == nil {
			l.groups = map[string]*groupQueue{}
		}
		l.groups[j.group] = q
		l.waiting = append(l.waiting, q)
	} else if len(q.jobs)-q.head >= maxGroupQueue {
		return errOverloaded
	}
	q.jobs = append(q.jobs, j)
	l.queued++
	return nil
}

// take moves up to max waiting checks into into, one of each group in
// turn (the group waiting longest first), and returns it.
func (l *lane) take(into []*job, max int) []*job {
	for len(into) < max && l.queued > 0 {
		for _, q := range l.waiting {
			if len(into) == max {
				break
			}
			if q.head < len(q.jobs) {
				into = append(into, q.jobs[q.head])
				q.jobs[q.head] = nil
				q.head++
				l.queued--
			}
		}
	}
	kept := l.waiting[:0]
	for _, q := range l.waiting {
		if q.head < len(q.jobs) {
			if q.head >= len(q.jobs)/2 {
				// Move the rest to the front, so that a group that never
				// empties does not grow its array without end.
				n := copy(q.jobs, q.jobs[q.head:])
				clear(q.jobs[n:])
				q.jobs, q.head = q.jobs[:n], 0
			}
			kept = append(kept, q)
			continue
		}
		delete(l.groups, q.group)
		q.jobs, q.head, q.group = q.jobs[:0], 0, ""
		l.spare = append(l.spare, q)
	}
	clear(l.waiting[len(kept):])
	l.waiting = kept
	return into
}

// job is one Check on its way to the server, kept for reuse once its
// caller has read the answer (jobs).
type job struct {
	// group is the request's hash tag, keys its items' keys and spec its
	// layout (encode).
	group string
	keys  []string
	spec  []byte
	// deadline is when the caller stops waiting for a server that has
	// stopped answering: the store's timeout, or its context's earlier
	// deadline; hard is when it stops waiting at all (late).
	deadline, hard time.Time
	began          time.Time
	// gone is set by a caller that stopped waiting; a drain skips the job if
	// it has not sent it yet.
	gone atomic.Bool
	// reply is the request's part of the script's reply (decode), or err
	// why there is none.
	reply string
	err   error
	// done receives one value when reply or err is set.
	done chan struct{}
	// seen is decode's buffer.
	seen []counter.Seen
	// lane is the lane the job waits in (call), nil for CheckBatch's jobs
	// and a test's.
	lane *lane
	// lua, when set, makes the job a script of its own (a lease
	// operation, lease.go) rather than a check: it goes through the lane
	// like a check, in a script of its own, and its reply is lua.reply.
	lua *luaCall
}

// luaCall is a script a job runs instead of check.lua: its body and hash,
// its arguments after the keys, and its reply.
type luaCall struct {
	body, sha string
	args      []any
	reply     any
}

// jobs holds jobs for reuse: a check that waits for its answer owns its job
// until it has read it.
var jobs = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

func newJob() *job { return jobs.Get().(*job) }

// free readies j for another check and gives it back. Only a caller that
// received j's answer may free it: one that stopped waiting leaves it to
// the sender that may still hold it.
func (j *job) free() {
	j.gone.Store(false)
	j.reply, j.err, j.lane = "", nil, nil
	clear(j.keys)
	jobs.Put(j)
}

// answered hands j's answer to its caller.
func (j *job) answered() { j.done <- struct{}{} }

// call decides j's request in a script and waits for the answer, j's
// deadline, ctx or Close, whichever comes first.
//
// A queued check sets no timer of its own: the drain that takes it answers
// it by its deadline (flush), and ctx's own deadline or cancellation ends
// the wait. A context with a timer per check took about 1.8 µs of
// Tollgate's CPU a check, a fifth of the store's, much of it on the
// runtime's timer locks.
func (s *Store) call(ctx context.Context, j *job) error {
	addr := ""
	if s.cluster != nil {
		node, err := s.cluster.MasterForKey(ctx, j.keys[0])
		if err != nil {
			return err
		}
		addr = node.Options().Addr
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	l := s.one
	if s.cluster != nil {
		if l = s.lanes[addr]; l == nil {
			l = &lane{senders: clusterSenders}
			s.lanes[addr] = l
		}
	}
	j.lane = l
	if l.active < l.senders && l.queued == 0 {
		l.active++
		s.inflight.Add(1)
		s.mu.Unlock()
		return s.runOne(ctx, j, l)
	}
	if err := l.enqueue(j); err != nil {
		s.mu.Unlock()
		return err
	}
	if l.active < l.senders {
		l.active++
		s.inflight.Add(1)
		go s.drain(l)
	}
	s.mu.Unlock()
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

// runOne sends j's script on the caller's goroutine and context, bounded by
// j's deadline, taking one of l's senders, which it gives back. A refusal
// that proves the script did not run (cluster.go) is sent again after a
// pause, with the sender given back first: a migrating hash slot then holds
// up only its own checks, not every check bound for its master.
func (s *Store) runOne(ctx context.Context, j *job, l *lane) error {
	held := true
	defer func() {
		if held {
			s.release(l)
		} else {
			s.inflight.Done()
		}
	}()
	// The script's own round trip is bounded by twice the deadline: a
	// server that is busy answers a script within it, one that stopped
	// does not.
	d := earlier(j.hard, time.Now().Add(2*s.timeout))
	if cd, ok := ctx.Deadline(); !ok || cd.After(d) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	one := []*job{j}
	for n := 0; ; n++ {
		cmd := script(ctx, false, one)
		err := s.c.Process(ctx, onceCmd{cmd})
		if noScript(err) {
			// A restart, a failover or SCRIPT FLUSH: EVAL sends the body and
			// caches it again.
			cmd = script(ctx, true, one)
			err = s.c.Process(ctx, onceCmd{cmd})
		}
		if s.cluster == nil || !resendable(err) {
			s.afterFailure(err)
			s.answered(j, err)
			answer(cmd, one)
			return j.err
		}
		if held {
			// Close still waits for this caller.
			s.inflight.Add(1)
			s.release(l)
			held = false
		}
		if !pause(ctx, n) {
			return err
		}
		s.resent.Add(1)
	}
}

// late reports whether j's caller stops waiting at now: past its hard
// deadline, or past its deadline when the server has answered nothing for
// twice the store's deadline since j began or since its last answer. A server that keeps answering scripts is
// busy, not failing, and the checks queued for it stay exact, only later;
// one that answers nothing is given up on within about three deadlines.
func (s *Store) late(j *job, now time.Time) bool {
	if !now.Before(j.hard) {
		return true
	}
	last := &s.lastAnswer
	if j.lane != nil {
		last = &j.lane.lastAnswer
	}
	silent := now.Sub(later(j.began, time.Unix(0, last.Load())))
	return !now.Before(j.deadline) && silent > 2*s.timeout
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// answered notes a script's reply that came back from the server (a reply,
// even an error reply, is progress; a network error or a deadline is not).
func (s *Store) answered(j *job, err error) {
	var rerr goredis.Error
	if err == nil || errors.As(err, &rerr) {
		now := time.Now().UnixNano()
		s.lastAnswer.Store(now)
		if j.lane != nil {
			j.lane.lastAnswer.Store(now)
		}
	}
}

// pause waits resendPause(n), or returns false when ctx ends first.
func pause(ctx context.Context, n int) bool {
	t := time.NewTimer(resendPause(n))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives back a caller's sender, or hands it to a drain when checks
// queued meanwhile: a queued check always has a sender who will see it.
func (s *Store) release(l *lane) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.queued > 0 && !s.closed {
		go s.drain(l)
		return
	}
	l.active--
	s.inflight.Done()
}

// drain takes one of l's senders and sends its queue in pipelines until it is
// empty.
func (s *Store) drain(l *lane) {
	taken := make([]*job, 0, maxPipeline)
	var calls []scriptCall
	for {
		s.mu.Lock()
		if l.queued == 0 || s.closed {
			l.active--
			s.inflight.Done()
			s.mu.Unlock()
			return
		}
		// Take up to maxPipeline live checks, dropping the ones whose callers
		// gave up: after an outage the queue empties at once.
		now := time.Now()
		taken = taken[:0]
		for len(taken) < maxPipeline && l.queued > 0 {
			n := len(taken)
			taken = l.take(taken, maxPipeline)
			live := taken[:n]
			for _, j := range taken[n:] {
				if j.gone.Load() || s.late(j, now) {
					j.err = context.DeadlineExceeded
					j.answered()
				} else {
					live = append(live, j)
				}
			}
			clear(taken[len(live):])
			taken = live
		}
		s.mu.Unlock()
		calls = s.flush(taken, calls[:0])
		clear(taken)
		clear(calls[:cap(calls)])
	}
}

// A scriptCall is one script of a flush's pipeline: it decides the
// requests of its jobs in their order.
type scriptCall struct {
	jobs []*job
	cmd  *goredis.Cmd
}

// flush decides the live ones of jobs in as few scripts as it may (split),
// sent in one pipeline, falling back to EVAL when the server has no script,
// and hands every job its answer; those a cluster refused before running
// them (cluster.go) are answered later, by resend.
func (s *Store) flush(jobs []*job, calls []scriptCall) []scriptCall {
	now := time.Now()
	live := jobs[:0]
	var deadline time.Time
	for _, j := range jobs {
		if j.gone.Load() || s.late(j, now) {
			j.err = context.DeadlineExceeded
			j.answered()
			continue
		}
		live = append(live, j)
		if deadline.IsZero() || j.hard.Before(deadline) {
			deadline = j.hard
		}
	}
	deadline = earlier(deadline, now.Add(2*s.timeout))
	if len(live) == 0 {
		return calls
	}
	// The earliest hard deadline of the jobs bounds the pipeline, so that
	// no caller waits past its own (call), and so does twice the store's
	// deadline: a busy server answers a pipeline within it, one that has
	// stopped answering does not.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	calls = s.split(live, calls)
	s.exec(ctx, calls)
	again := s.settle(calls)
	if len(again) == 0 {
		cancel()
		return calls
	}
	// Scripts a cluster refused before running them (their hash slot is
	// migrating) are sent again after a pause, off the lane's sender, which
	// goes on with the lane's other checks meanwhile. Their jobs leave the
	// drain's buffers, which it reuses.
	resend := make([]scriptCall, len(again))
	for i, c := range again {
		resend[i] = scriptCall{jobs: slices.Clone(c.jobs)}
	}
	clear(again)
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer cancel()
		s.resend(ctx, resend)
	}()
	return calls
}

// resend sends calls again, after a pause each time, until a cluster
// runs them or ctx ends (cluster.go), and hands every job its answer.
func (s *Store) resend(ctx context.Context, calls []scriptCall) {
	for n := 0; len(calls) > 0; n++ {
		if !pause(ctx, n) {
			for _, c := range calls {
				for _, j := range c.jobs {
					j.err = ctx.Err()
					j.answered()
				}
			}
			return
		}
		for _, c := range calls {
			s.resent.Add(int64(len(c.jobs)))
		}
		s.exec(ctx, calls)
		calls = s.settle(calls)
	}
}

// settle hands each job of calls, whose scripts exec sent, its answer, but
// for the scripts a cluster refused before running them: it returns those,
// without the jobs whose callers gave up meanwhile, in calls' own array.
func (s *Store) settle(calls []scriptCall) []scriptCall {
	again := calls[:0]
	for _, c := range calls {
		err := c.cmd.Err()
		if s.cluster != nil && resendable(err) {
			waiting := c.jobs[:0]
			for _, j := range c.jobs {
				if j.gone.Load() || s.late(j, time.Now()) {
					j.err = context.DeadlineExceeded
					j.answered()
				} else {
					waiting = append(waiting, j)
				}
			}
			if len(waiting) > 0 {
				again = append(again, scriptCall{jobs: waiting})
			}
			continue
		}
		s.afterFailure(err)
		s.answered(c.jobs[0], err)
		answer(c.cmd, c.jobs)
		for _, j := range c.jobs {
			j.answered()
		}
	}
	clear(calls[len(again):])
	return again
}

// split groups jobs into scripts of at most maxScriptItems
// items, each deciding its requests in their order of arrival. On a single
// server one script takes any requests: every key is on it, and a request
// that fails (a key holding something else than a counter) fails alone.
// On a cluster a script takes the requests of one group, whose keys share
// a hash slot; jobs is reordered so that each group's are together, in
// their order.
func (s *Store) split(jobs []*job, calls []scriptCall) []scriptCall {
	if s.cluster != nil {
		slices.SortStableFunc(jobs, func(a, b *job) int { return strings.Compare(a.group, b.group) })
	}
	first, items := 0, 0
	for i, j := range jobs {
		n := len(j.keys)
		// A script of its own stands alone, and so does the check after it.
		alone := j.lua != nil || jobs[first].lua != nil
		if i > first && (alone || items+n > maxScriptItems || s.cluster != nil && j.group != jobs[first].group) {
			calls = append(calls, scriptCall{jobs: jobs[first:i]})
			first, items = i, 0
		}
		items += n
	}
	if first < len(jobs) {
		calls = append(calls, scriptCall{jobs: jobs[first:]})
	}
	return calls
}

// exec sends the scripts of calls in one pipeline, and again by body those
// the server had no script for.
func (s *Store) exec(ctx context.Context, calls []scriptCall) {
	pipe := s.c.Pipeline()
	s.scripts.Add(int64(len(calls)))
	for i := range calls {
		calls[i].cmd = script(ctx, false, calls[i].jobs)
		_ = pipe.Process(ctx, onceCmd{calls[i].cmd})
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	missing := false
	for _, c := range calls {
		missing = missing || noScript(c.cmd.Err())
	}
	if missing {
		pipe = s.c.Pipeline()
		for i, c := range calls {
			if noScript(c.cmd.Err()) {
				calls[i].cmd = script(ctx, true, c.jobs)
				_ = pipe.Process(ctx, onceCmd{calls[i].cmd})
			}
		}
		_, _ = pipe.Exec(ctx)
	}
}

// noScript reports whether err is the server's answer to EVALSHA when it
// does not have the script. (goredis.HasErrorPrefix allocates even for a
// nil error.)
func noScript(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") }

// script makes the EVALSHA (or, with body set, EVAL) command that decides
// the requests of jobs in their order (check.lua).
func script(ctx context.Context, body bool, jobs []*job) *goredis.Cmd {
	if l := jobs[0].lua; l != nil {
		a := make([]any, 0, 3+len(jobs[0].keys)+len(l.args))
		if body {
			a = append(a, "eval", l.body)
		} else {
			a = append(a, "evalsha", l.sha)
		}
		a = append(a, len(jobs[0].keys))
		for _, k := range jobs[0].keys {
			a = append(a, k)
		}
		cmd := goredis.NewCmd(ctx, append(a, l.args...)...)
		cmd.SetFirstKeyPos(3)
		return cmd
	}
	nkeys, size := 0, 0
	for _, j := range jobs {
		nkeys += len(j.keys)
		size += len(j.spec)
	}
	a := make([]any, 0, 4+nkeys)
	if body {
		a = append(a, "eval", checkLua)
	} else {
		a = append(a, "evalsha", checkSHA)
	}
	a = append(a, nkeys)
	for _, j := range jobs {
		// Pointers, which go-redis writes as strings, box without copying.
		for i := range j.keys {
			a = append(a, &j.keys[i])
		}
	}
	if len(jobs) == 1 {
		a = append(a, jobs[0].spec)
	} else {
		spec := make([]byte, 0, size)
		for _, j := range jobs {
			spec = append(spec, j.spec...)
		}
		a = append(a, spec)
	}
	cmd := goredis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// answer sets each job's reply, or its err, from cmd's reply (check.lua).
func answer(cmd *goredis.Cmd, jobs []*job) {
	v, err := cmd.Result()
	if l := jobs[0].lua; l != nil {
		l.reply, jobs[0].err = v, err
		return
	}
	var reply string
	var why []any
	switch v := v.(type) {
	case string:
		reply = v
	case []any:
		if len(v) > 0 {
			reply, _ = v[0].(string)
			why = v[1:]
		}
	default:
		if err == nil {
			err = fmt.Errorf("reply %T: %w", v, errReply)
		}
	}
	for _, j := range jobs {
		switch {
		case err != nil:
			j.err = err
		case len(reply) >= 8 && f64(reply) < 0 && len(why) > 0:
			// A key of the request holds no counter state.
			msg, _ := why[0].(string)
			j.err = errors.New(msg)
			reply, why = reply[8:], why[1:]
		case len(reply) >= replyLen(len(j.keys)):
			j.reply = reply[:replyLen(len(j.keys))]
			reply = reply[replyLen(len(j.keys)):]
		default:
			j.err = fmt.Errorf("%d bytes left for %d items: %w", len(reply), len(j.keys), errReply)
			reply = ""
		}
	}
}
