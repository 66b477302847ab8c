package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Batching defaults and bounds (WithBatching). A batch of 16 already pays
// the HTTP cost once for 16 checks, and batches that small keep several
// requests in flight, which Tollgate answers side by side: 64 callers
// through DefaultBatchSize make about 1.3–1.6 times the checks a second of
// batches of 100 on every store (docs/benchmarks.md).
const (
	DefaultBatchDelay = time.Millisecond
	DefaultBatchSize  = 16
	// MaxBatchSize is the most checks Tollgate takes in one batch.
	MaxBatchSize = 1000
)

// WithBatching makes concurrent Check and Peek calls travel together: a
// call that finds no other waiting and no batch in flight is sent at once,
// alone, as without batching; calls made while a request is in flight wait
// up to maxDelay (or until maxChecks are waiting, or the request in flight
// returns) and go in one POST /v1/check/batch. A batch holds at most
// maxChecks, and one is sent as soon as it is full, whatever is in
// flight. Each call still gets its own Decision and error, FailMode and
// all, and returns when its own context ends even while its batch is in
// flight. maxDelay <= 0 means
// DefaultBatchDelay; maxChecks <= 0 DefaultBatchSize, and at most
// MaxBatchSize. The middleware checks through the Client, so it batches
// when its Client does.
//
// Batching pays the HTTP cost once for many checks: an app server that
// checks each of its own requests sends one request to Tollgate per
// millisecond instead of one per check. It needs a Tollgate that serves
// /v1/check/batch.
func WithBatching(maxDelay time.Duration, maxChecks int) Option {
	if maxDelay <= 0 {
		maxDelay = DefaultBatchDelay
	}
	if maxChecks <= 0 {
		maxChecks = DefaultBatchSize
	}
	return func(c *Client) {
		c.batcher = &batcher{maxDelay: maxDelay, maxChecks: min(maxChecks, MaxBatchSize), idle: make(chan []*waiter)}
	}
}

// batcher gathers the checks of one Client.
type batcher struct {
	c         *Client
	maxDelay  time.Duration
	maxChecks int

	mu       sync.Mutex
	pending  []*waiter
	inflight int         // requests in flight
	timer    *time.Timer // flushes pending at maxDelay, when set

	// idle hands a batch to a sender waiting for one (sender).
	idle chan []*waiter
}

// senderIdle is how long a sender waits for another batch before it ends.
const senderIdle = time.Second

// waiter is one call waiting for its batch.
type waiter struct {
	in   checkIn
	done chan struct{} // signalled once raw, or d and err, are set
	// raw is the waiter's result of its batch, which the caller reads
	// itself: a batch's answers are read side by side, each by its own
	// caller, rather than one after the other before any returns.
	raw []byte
	d   Decision
	err error
}

// waiters are waiters whose call has returned with its answer, for the
// next calls: the sender signals done once, and only a caller that
// received it puts its waiter back.
var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// check sends in alone or in a batch, and waits for its answer or ctx.
func (b *batcher) check(ctx context.Context, in checkIn) (Decision, error) {
	b.mu.Lock()
	if b.inflight == 0 && len(b.pending) == 0 {
		// Alone: no reason to wait.
		b.inflight++
		b.mu.Unlock()
		return b.alone(ctx, in)
	}
	w := waiters.Get().(*waiter)
	w.in = in
	b.pending = append(b.pending, w)
	switch {
	case len(b.pending) >= b.maxChecks:
		b.flushLocked()
	case b.timer == nil:
		b.timer = time.AfterFunc(b.maxDelay, b.flush)
	}
	b.mu.Unlock()
	select {
	case <-w.done:
		d, err := w.d, w.err
		if w.raw != nil {
			d, err = w.result(b.c)
		}
		*w = waiter{done: w.done}
		waiters.Put(w)
		return d, err
	case <-ctx.Done():
		// w is its batch's still: the sender answers it, and it goes.
		return b.c.checkFailed(unavailable("POST", "/v1/check/batch", ctx.Err()))
	}
}

// alone sends in to /v1/check by itself.
func (b *batcher) alone(ctx context.Context, in checkIn) (Decision, error) {
	defer b.returned()
	return b.c.checkOne(ctx, in)
}

// returned notes a request that came back, and sends what gathered
// meanwhile at once: waiting longer would only add to its latency.
func (b *batcher) returned() {
	b.mu.Lock()
	b.inflight--
	if b.inflight == 0 && len(b.pending) > 0 {
		b.flushLocked()
	}
	b.mu.Unlock()
}

func (b *batcher) flush() {
	b.mu.Lock()
	b.flushLocked()
	b.mu.Unlock()
}

// flushLocked sends the pending calls as one batch; b.mu is held.
func (b *batcher) flushLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.pending) == 0 {
		return
	}
	batch := b.pending
	b.pending = nil
	b.inflight++
	select {
	case b.idle <- batch:
	default:
		go b.sender(batch)
	}
}

// sender sends batch, then each batch it is handed while it waits, and
// ends once none came for senderIdle. Senders outlive their batch so that
// their stacks do: a goroutine per batch grew a new stack into net/http's
// depth for every request (a twentieth of the client's CPU).
func (b *batcher) sender(batch []*waiter) {
	t := time.NewTimer(senderIdle)
	defer t.Stop()
	for {
		b.send(batch)
		b.returned()
		t.Reset(senderIdle)
		select {
		case batch = <-b.idle:
		case <-t.C:
			return
		}
	}
}

// checkField matches the field of a batch's 400 that names one check.
var checkField = regexp.MustCompile(`^checks\[(\d+)\]\.?(.*)$`)

// send makes the batch's request and answers each waiter. A 400 that
// names one check answers that check's caller with it (as /v1/check would
// have, the field named within the check) and sends the others again: one
// caller's mistake is not the others'.
func (b *batcher) send(batch []*waiter) {
	for len(batch) > 0 {
		if len(batch) == 1 {
			w := batch[0]
			out := decisionOut{asked: w.in.Items}
			err := b.c.do(context.Background(), "POST", "/v1/check", &w.in, &out)
			w.answer(b.c, out.d, err)
			return
		}
		var out checkBatchOut
		err := b.c.do(context.Background(), "POST", "/v1/check/batch", checkBatchIn(batch), &out)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			if m := checkField.FindStringSubmatch(ae.Field); m != nil {
				if i, _ := strconv.Atoi(m[1]); i < len(batch) {
					one := *ae
					one.Field = m[2]
					batch[i].answer(b.c, Decision{}, fmt.Errorf("POST /v1/check: %w", &one))
					batch = append(batch[:i:i], batch[i+1:]...)
					continue
				}
			}
		}
		if err == nil && len(out.results) != len(batch) {
			err = unavailable("POST", "/v1/check/batch", fmt.Errorf("%d results for %d checks", len(out.results), len(batch)))
		}
		if err != nil {
			for _, w := range batch {
				w.answer(b.c, Decision{}, err)
			}
			return
		}
		for i, w := range batch {
			w.raw = out.results[i]
			w.done <- struct{}{}
		}
		return
	}
}

// answer hands w the decision d, or err.
func (w *waiter) answer(c *Client, d Decision, err error) {
	if err != nil {
		w.d, w.err = c.checkFailed(err)
	} else {
		w.d = d
	}
	w.done <- struct{}{}
}

// result reads w's result of its batch: the decision /v1/check would have
// answered (read by the same reader, readCheckAnswer), or the refusal of
// Tollgate's own ceilings (a problem with its status), as errors alike.
func (w *waiter) result(c *Client) (Decision, error) {
	d, err := readCheckAnswer(w.raw, w.in.Items)
	if err == nil {
		return d, nil
	}
	var head struct {
		Status int `json:"status"`
	}
	_ = json.Unmarshal(w.raw, &head)
	switch head.Status {
	case 0:
		err = unavailable("POST", "/v1/check/batch", fmt.Errorf("a result is not Tollgate's: %w", err))
	case http.StatusTooManyRequests:
		err = fmt.Errorf("POST /v1/check/batch: %w", rateLimited(http.Header{}, w.raw))
	case http.StatusPaymentRequired:
		var p problemBody
		_ = json.Unmarshal(w.raw, &p)
		err = fmt.Errorf("POST /v1/check/batch: %w", &PaymentRequiredError{BillingURL: p.BillingURL, Detail: p.Detail})
	default:
		err = unavailable("POST", "/v1/check/batch", fmt.Errorf("a result of status %d", head.Status))
	}
	return c.checkFailed(err)
}
