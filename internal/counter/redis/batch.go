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
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if s.active < senders && len(s.queue) == 0 {
		s.active++
		s.inflight.Add(1)
		s.mu.Unlock()
		reply, err := s.runOne(ctx, keys, args)
		s.release()
		return reply, err
	}
	if len(s.queue) >= maxQueue {
		s.mu.Unlock()
		return nil, errOverloaded
	}
	deadline, _ := ctx.Deadline()
	j := &job{keys: keys, args: args, deadline: deadline, done: make(chan struct{})}
	s.queue = append(s.queue, j)
	if s.active < senders {
		s.active++
		s.inflight.Add(1)
		go s.drain()
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

// runOne sends one script on the caller's goroutine and context.
func (s *Store) runOne(ctx context.Context, keys []string, args []any) ([]any, error) {
	reply, err := s.c.EvalSha(ctx, checkSHA, keys, args...).Slice()
	if goredis.HasErrorPrefix(err, "NOSCRIPT") {
		// A restart or SCRIPT FLUSH: EVAL sends the body and caches it again.
		reply, err = s.c.Eval(ctx, checkLua, keys, args...).Slice()
	}
	return reply, err
}

// release gives back a caller's slot, or hands it to a drain when checks
// queued meanwhile: a queued check always has a slot holder who will see it.
func (s *Store) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 && !s.closed {
		go s.drain()
		return
	}
	s.active--
	s.inflight.Done()
}

// drain holds a slot and sends the queue in pipelines until it is empty.
func (s *Store) drain() {
	batch := make([]*job, 0, maxBatch)
	cmds := make([]*goredis.Cmd, 0, maxBatch)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.closed {
			s.active--
			s.inflight.Done()
			s.mu.Unlock()
			return
		}
		// Take up to maxBatch live checks, dropping the ones whose callers
		// gave up: after an outage the queue empties at once.
		now := time.Now()
		n := 0
		batch = batch[:0]
		for ; n < len(s.queue) && len(batch) < maxBatch; n++ {
			if j := s.queue[n]; j.gone.Load() || !now.Before(j.deadline) {
				j.err = context.DeadlineExceeded
				close(j.done)
			} else {
				batch = append(batch, j)
			}
		}
		rest := copy(s.queue, s.queue[n:])
		clear(s.queue[rest:])
		s.queue = s.queue[:rest]
		s.mu.Unlock()
		cmds = s.flush(batch, cmds[:0])
		clear(batch)
		clear(cmds[:cap(cmds)])
	}
}

// flush sends the live jobs of batch in one pipeline, falling back to EVAL
// for those the server has no script for, and hands every job its reply.
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
	if len(live) == 0 {
		return cmds
	}
	// The latest deadline of the batch bounds the pipeline; each caller stops
	// waiting at its own.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	pipe := s.c.Pipeline()
	for _, j := range live {
		cmds = append(cmds, pipe.EvalSha(ctx, checkSHA, j.keys, j.args...))
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
				cmds[i] = pipe.Eval(ctx, checkLua, live[i].keys, live[i].args...)
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, j := range live {
		j.reply, j.err = cmds[i].Slice()
		close(j.done)
	}
	return cmds
}
