package redis

// CheckBatch's lane on a single server. A batch (POST /v1/check/batch, one
// tenant's) was a pipeline of its own, sent from its caller's goroutine: a
// script, a write and a read on each side for every batch, however many
// batches were in flight beside it (per_call 16 at the Go client's batches of
// 16 in docs/benchmarks.md, How cost grows). Batches now queue by group and
// a sender takes the waiting ones, whole, the groups in turn, into one
// pipeline (flush cuts it into scripts of at most maxScriptItems items, sent
// in order on one connection): the batches that arrive while a pipeline is
// on the server go out together in the next.
//
//   - A batch is never split between senders: its checks are decided in
//     its order, in one pipeline. Batches of a group in different
//     pipelines are concurrent requests, in no order.
//   - batchSenders pipelines at once, as the single checks' lane has
//     senders: while one is on the server the next is being sent or read.
//   - The groups waiting are served in turn, one batch each, while the
//     pipeline holds at most batchPipelineItems items (a batch of more is a
//     pipeline of its own): a tenant's flood of batches queues behind
//     itself, and another tenant's batch waits for at most one batch of
//     each tenant ahead of it.
//   - A batch that finds a sender free starts one, which sends it at once
//     with the batches waiting then, and goes on while batches wait (its
//     caller waits for its own answer only, not for the lane to empty).
//
// A cluster's batches keep their pipeline of their own (cluster.go's resends
// and the lanes per master are per check).

import "sync"

const (
	batchSenders       = 2
	batchPipelineItems = 2048
)

// batchLane queues batches by group for its senders.
type batchLane struct {
	mu      sync.Mutex
	active  int
	groups  map[string][][]*job
	turns   []string
	waiting int // batches waiting
}

// add queues batch (its jobs, in order) under group, and reports whether
// the caller is to send (run): a sender was free.
func (l *batchLane) add(group string, batch []*job) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.groups == nil {
		l.groups = map[string][][]*job{}
	}
	if len(l.groups[group]) == 0 {
		l.turns = append(l.turns, group)
	}
	l.groups[group] = append(l.groups[group], batch)
	l.waiting++
	if l.active < batchSenders {
		l.active++
		return true
	}
	return false
}

// take moves waiting batches into jobs, the groups in turn, one batch
// each round, while they hold at most batchPipelineItems items (the first
// always); none left ends the sender (ok false).
func (l *batchLane) take(jobs []*job) (_ []*job, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting == 0 {
		l.active--
		return jobs, false
	}
	items := 0
	for l.waiting > 0 {
		g := l.turns[0]
		q := l.groups[g]
		n := 0
		for _, j := range q[0] {
			n += len(j.keys)
		}
		if items > 0 && items+n > batchPipelineItems {
			break
		}
		items += n
		jobs = append(jobs, q[0]...)
		q[0] = nil
		l.waiting--
		l.turns = l.turns[1:]
		if q = q[1:]; len(q) > 0 {
			l.groups[g] = q
			l.turns = append(l.turns, g)
		} else {
			delete(l.groups, g)
		}
	}
	return jobs, true
}

// sendBatches sends the waiting batches, a pipeline at a time, until none
// is waiting; it is started by the add that was given a sender.
func (s *Store) sendBatches() {
	var jobs []*job
	var calls []scriptCall
	for {
		var ok bool
		if jobs, ok = s.batches.take(jobs[:0]); !ok {
			return
		}
		calls = s.flush(jobs, calls[:0])
		clear(jobs)
		clear(calls[:cap(calls)])
	}
}
