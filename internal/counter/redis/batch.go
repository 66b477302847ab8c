package redis

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Coalescing. A Check that finds a free sending slot and nothing queued
// sends its own script at once, from its own goroutine: alone, it pays no
// hand-off. When all slots are busy it queues, and whichever slot frees
// first drains the queue in pipelines of up to maxBatch scripts, so that
// under load many checks share a round trip and a socket write. Every
// request stays its own EVALSHA, atomic by itself.
//
// Measured on two cores (medians of five interleaved runs, one-item checks):
// against always sending alone, a lone caller is as fast (17.0k vs 15.9k
// checks/s) and 64 concurrent callers get 1.8 times (one hot key) to 3.2
// times (random keys) the checks per second. Queueing every check for
// background senders scaled the same but cost a lone caller 40 %. Four slots
// beat one and two (which leave Redis idle while a slot decodes); eight
// gained nothing.
const (
	senders  = 4
	maxBatch = 64
	// maxQueue bounds the checks waiting for a slot. Healthy, the queue holds
	// about one check per concurrent caller; past this the server is not
	// keeping up, and a check fails at once rather than wait out its deadline.
	maxQueue = 4096
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
	queue  []*job // checks waiting for a slot
	active int    // slots taken, by callers sending alone and by drains
}

// job is one queued Check on its way to the server.
type job struct {
	keys     []string
	args     []any
	deadline time.Time
	// gone is set by a caller that stopped waiting; a drain skips the job if
	// it has not sent it yet.
	gone  atomic.Bool
	reply []any
	err   error
	done  chan struct{}
}

// call runs one script and waits for its reply, its context or Close,
// whichever comes first.
func (s *Store) call(ctx context.Context, keys []string, args []any) ([]any, error) {
	addr := ""
	if s.cluster != nil {
		node, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		addr = node.Options().Addr
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	l := s.one
	if s.cluster != nil {
		if l = s.lanes[addr]; l == nil {
			l = &lane{}
			s.lanes[addr] = l
		}
	}
	if l.active < senders && len(l.queue) == 0 {
		l.active++
		s.inflight.Add(1)
		s.mu.Unlock()
		reply, err := s.runOne(ctx, keys, args)
		s.release(l)
		return reply, err
	}
	if len(l.queue) >= maxQueue {
		s.mu.Unlock()
		return nil, errOverloaded
	}
	deadline, _ := ctx.Deadline()
	j := &job{keys: keys, args: args, deadline: deadline, done: make(chan struct{})}
	l.queue = append(l.queue, j)
	if l.active < senders {
		l.active++
		s.inflight.Add(1)
		go s.drain(l)
	}
	s.mu.Unlock()
	select {
	case <-j.done:
		return j.reply, j.err
	case <-ctx.Done():
		j.gone.Store(true)
		return nil, ctx.Err()
	case <-s.quit:
		j.gone.Store(true)
		return nil, errClosed
	}
}

// runOne sends one script on the caller's goroutine and context, again
// after each refusal that proves it did not run (cluster.go).
func (s *Store) runOne(ctx context.Context, keys []string, args []any) ([]any, error) {
	for n := 0; ; n++ {
		cmd := script(ctx, false, keys, args)
		err := s.c.Process(ctx, onceCmd{cmd})
		if goredis.HasErrorPrefix(err, "NOSCRIPT") {
			// A restart, a failover or SCRIPT FLUSH: EVAL sends the body and
			// caches it again.
			cmd = script(ctx, true, keys, args)
			err = s.c.Process(ctx, onceCmd{cmd})
		}
		if s.cluster == nil || !resendable(err) {
			s.afterFailure(err)
			return cmd.Slice()
		}
		if !pause(ctx, n) {
			return nil, err
		}
		s.resent.Add(1)
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

// release gives back a caller's slot, or hands it to a drain when checks
// queued meanwhile: a queued check always has a slot holder who will see it.
func (s *Store) release(l *lane) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(l.queue) > 0 && !s.closed {
		go s.drain(l)
		return
	}
	l.active--
	s.inflight.Done()
}

// drain holds a slot of l and sends its queue in pipelines until it is
// empty.
func (s *Store) drain(l *lane) {
	batch := make([]*job, 0, maxBatch)
	cmds := make([]*goredis.Cmd, 0, maxBatch)
	for {
		s.mu.Lock()
		if len(l.queue) == 0 || s.closed {
			l.active--
			s.inflight.Done()
			s.mu.Unlock()
			return
		}
		// Take up to maxBatch live checks, dropping the ones whose callers
		// gave up: after an outage the queue empties at once.
		now := time.Now()
		n := 0
		batch = batch[:0]
		for ; n < len(l.queue) && len(batch) < maxBatch; n++ {
			if j := l.queue[n]; j.gone.Load() || !now.Before(j.deadline) {
				j.err = context.DeadlineExceeded
				close(j.done)
			} else {
				batch = append(batch, j)
			}
		}
		rest := copy(l.queue, l.queue[n:])
		clear(l.queue[rest:])
		l.queue = l.queue[:rest]
		s.mu.Unlock()
		cmds = s.flush(batch, cmds[:0])
		clear(batch)
		clear(cmds[:cap(cmds)])
	}
}

// flush sends the live jobs of batch in one pipeline, falling back to EVAL
// for those the server has no script for, sends again those a cluster
// refused before running them (cluster.go), and hands every job its reply.
func (s *Store) flush(batch []*job, cmds []*goredis.Cmd) []*goredis.Cmd {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	for _, j := range batch {
		if j.gone.Load() || !now.Before(j.deadline) {
			j.err = context.DeadlineExceeded
			close(j.done)
			continue
		}
		live = append(live, j)
		if j.deadline.After(deadline) {
			deadline = j.deadline
		}
	}
	// The latest deadline of the batch bounds the pipeline; each caller stops
	// waiting at its own.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for n := 0; len(live) > 0; n++ {
		cmds = s.exec(ctx, live, cmds[:0])
		again := live[:0]
		for i, j := range live {
			err := cmds[i].Err()
			if s.cluster != nil && resendable(err) && !j.gone.Load() && time.Now().Before(j.deadline) {
				again = append(again, j)
				continue
			}
			s.afterFailure(err)
			j.reply, j.err = cmds[i].Slice()
			close(j.done)
		}
		if len(again) == 0 {
			break
		}
		if !pause(ctx, n) {
			for _, j := range again {
				j.err = ctx.Err()
				close(j.done)
			}
			break
		}
		s.resent.Add(int64(len(again)))
		live = again
	}
	return cmds
}

// exec sends the scripts of jobs in one pipeline, and again by body those
// the server had no script for; cmds[i] answers jobs[i].
func (s *Store) exec(ctx context.Context, jobs []*job, cmds []*goredis.Cmd) []*goredis.Cmd {
	pipe := s.c.Pipeline()
	for _, j := range jobs {
		c := script(ctx, false, j.keys, j.args)
		cmds = append(cmds, c)
		_ = pipe.Process(ctx, onceCmd{c})
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	missing := false
	for _, c := range cmds {
		missing = missing || goredis.HasErrorPrefix(c.Err(), "NOSCRIPT")
	}
	if missing {
		pipe = s.c.Pipeline()
		for i, c := range cmds {
			if goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				cmds[i] = script(ctx, true, jobs[i].keys, jobs[i].args)
				_ = pipe.Process(ctx, onceCmd{cmds[i]})
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}
