package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// WorkerConfig configures a Worker; zero values take the defaults.
type WorkerConfig struct {
	Store  Store
	Sealer *Sealer
	// Client sends the deliveries (NewClient); its timeout bounds one
	// attempt.
	Client *http.Client
	Logger *slog.Logger
	// MaxInFlight bounds the deliveries in flight on this instance
	// (default 64).
	MaxInFlight int
	// PerEndpoint bounds the deliveries in flight to one endpoint across
	// every instance (default 2), so that an endpoint that hangs holds
	// two deliveries in flight, not the queue.
	PerEndpoint int
	// PerTenant bounds one tenant's deliveries in flight on this instance
	// (default an eighth of MaxInFlight, at least PerEndpoint: 8 of 64). A
	// tenant's endpoints could hold MaxEndpoints × PerEndpoint = 10; at 8,
	// seven tenants whose receivers all hang hold 56 in flight and leave the
	// rest to every other tenant, and with more of them each delivery that
	// ends makes room for the tenant with fewest in flight (Store.Claim), so
	// none waits behind another's backlog for longer than an attempt lasts.
	// The share is this instance's, counted here: exact without a lock across
	// instances, and each instance added adds room for everyone.
	PerTenant int
	// Claim is how long a claimed delivery is this instance's: past it, an
	// instance that died has its deliveries claimed by another (default
	// 30 s, above the client's timeout).
	Claim time.Duration
	// Poll is how often the outbox is read when nothing woke the worker
	// (default 1 s): retries fall due without a notification.
	Poll time.Duration
	// Retries are the waits after each failed attempt (default
	// RetryDelays, about 3 days); the attempt after the last is given up.
	Retries []time.Duration
	// BacklogEvery is how often the outbox is counted: Backlog, Dropped,
	// and the deliveries this instance leaves to another pepper (default
	// 5 s).
	BacklogEvery time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Worker delivers due deliveries from the outbox, the same on every
// instance. Safe for concurrent use; Run once.
type Worker struct {
	cfg  WorkerConfig
	wake chan struct{}
	free chan struct{} // one token per delivery that may start
	// finished is signalled by each delivery that ends: it makes room
	// for another, and its endpoint has room for the next of its backlog.
	finished chan struct{}
	backlog  atomic.Int64
	dropped  atomic.Int64

	mu sync.Mutex
	// tenants counts this instance's deliveries in flight by tenant.
	tenants map[string]int
}

// NewWorker returns a Worker.
func NewWorker(cfg WorkerConfig) *Worker {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = 2
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = max(cfg.PerEndpoint, cfg.MaxInFlight/8)
	}
	if cfg.Claim <= 0 {
		cfg.Claim = 30 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.BacklogEvery <= 0 {
		cfg.BacklogEvery = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retries == nil {
		cfg.Retries = RetryDelays
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{cfg: cfg, wake: make(chan struct{}, 1), free: make(chan struct{}, cfg.MaxInFlight), finished: make(chan struct{}, 1),
		tenants: map[string]int{}}
	for range cfg.MaxInFlight {
		w.free <- struct{}{}
	}
	return w
}

// Wake makes the worker read the outbox now: a delivery was added (the
// change listener's "webhook" notifications). It never blocks.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx is cancelled, then waits for the deliveries in
// flight (each bounded by the client's timeout) and records them, and
// returns ctx's error.
func (w *Worker) Run(ctx context.Context) error {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	inflight.Go(func() { w.watchOutbox(ctx) })
	record := context.WithoutCancel(ctx)
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	for {
		claimed := w.claim(ctx, record, &inflight)
		if claimed {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		case <-t.C:
		case <-w.finished:
		}
	}
}

// claim claims as many due deliveries as may start and starts
// them; it reports whether it claimed any.
func (w *Worker) claim(ctx, record context.Context, inflight *sync.WaitGroup) bool {
	n := len(w.free)
	if n == 0 {
		return false
	}
	jobs, err := w.cfg.Store.Claim(ctx, ClaimRequest{
		Until: w.cfg.Now().Add(w.cfg.Claim), Max: n,
		PerEndpoint: w.cfg.PerEndpoint, PerTenant: w.cfg.PerTenant, InFlight: w.inFlight(),
		KeyID: w.cfg.Sealer.KeyID(),
	})
	if err != nil {
		if ctx.Err() == nil {
			w.cfg.Logger.ErrorContext(ctx, "webhook deliveries not claimed", "err", err)
		}
		return false
	}
	for _, j := range jobs {
		<-w.free
		w.mu.Lock()
		w.tenants[j.TenantID]++
		w.mu.Unlock()
		inflight.Go(func() {
			defer w.release(j.TenantID)
			w.deliver(record, j)
		})
	}
	return len(jobs) > 0
}

// inFlight returns the tenant of each delivery in flight.
func (w *Worker) inFlight() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for t, n := range w.tenants {
		for range n {
			out = append(out, t)
		}
	}
	return out
}

// Backlog is the outbox's deliveries not settled (metrics.QueueWebhooks),
// as last counted: the same on every instance. It never blocks.
func (w *Worker) Backlog() int { return int(w.backlog.Load()) }

// Dropped is the outbox's deliveries dropped for want of room
// (MaxPending), as last counted: the same on every instance. It never
// blocks.
func (w *Worker) Dropped() int { return int(w.dropped.Load()) }

// watchOutbox counts the outbox every BacklogEvery until ctx is
// cancelled; a count that fails keeps the last one. Deliveries dropped
// since the last count are said in the log once, until a count finds none
// more. Endpoints whose due deliveries this instance leaves alone, their
// secret sealed under another key, are labelled with its key when their
// secret opens under it (those sealed before keys had ids); the others
// are said in the log once, until there are none.
func (w *Worker) watchOutbox(ctx context.Context) {
	t := time.NewTicker(w.cfg.BacklogEvery)
	defer t.Stop()
	said, counted, dropping := false, false, false
	for {
		if o, err := w.cfg.Store.Outbox(ctx, w.cfg.Sealer.KeyID()); err == nil {
			w.backlog.Store(o.Unsettled)
			// The first count learns what was dropped before this
			// instance started.
			before := w.dropped.Swap(o.Dropped)
			rose := counted && o.Dropped > before
			if rose && !dropping {
				w.cfg.Logger.WarnContext(ctx, "webhook deliveries dropped: their endpoint had 1,000 waiting",
					"dropped", o.Dropped-before, "tenant_id", o.LastDroppedTenant)
			}
			counted, dropping = true, rose
			switch {
			case o.OtherKey == 0:
				said = false
			case w.label(ctx) > 0:
				w.Wake()
			case !said:
				said = true
				w.cfg.Logger.ErrorContext(ctx, "webhook deliveries left to instances with another pepper: their endpoints' secrets do not open under this instance's TOLLGATE_PEPPER",
					"endpoints", o.OtherKey)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// label gives the secrets sealed before keys had ids that open under this
// instance's key its id, and returns how many.
func (w *Worker) label(ctx context.Context) int {
	n, err := w.cfg.Store.LabelSecrets(ctx, w.cfg.Sealer.KeyID(), func(sealed []byte) bool {
		_, err := w.cfg.Sealer.open(sealed)
		return err == nil
	})
	if err != nil && ctx.Err() == nil {
		w.cfg.Logger.ErrorContext(ctx, "webhook secrets not labelled with their key", "err", err)
	}
	return n
}

// release counts a delivery of tenantID out of those in flight and tells
// Run that one ended.
func (w *Worker) release(tenantID string) {
	w.mu.Lock()
	if w.tenants[tenantID]--; w.tenants[tenantID] == 0 {
		delete(w.tenants, tenantID)
	}
	w.mu.Unlock()
	w.free <- struct{}{}
	select {
	case w.finished <- struct{}{}:
	default:
	}
}

// deliver sends one job and records its outcome.
func (w *Worker) deliver(ctx context.Context, j Job) {
	o := w.send(ctx, j)
	var err error
	if o.Error == "" {
		err = w.cfg.Store.Delivered(ctx, j.DeliveryID, o)
	} else {
		err = w.cfg.Store.Failed(ctx, j.DeliveryID, o, nextAttempt(w.cfg.Retries, j.Attempt, w.cfg.Now()))
	}
	if err != nil {
		// The claim runs out and another attempt follows: at least once.
		w.cfg.Logger.ErrorContext(ctx, "webhook delivery outcome not recorded", "delivery_id", j.DeliveryID, "tenant_id", j.TenantID, "err", err)
	}
}

// envelope is the body of every delivery: Standard Webhooks' type,
// timestamp and data, and the tenant.
type envelope struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	TenantID  string          `json:"tenant_id"`
	Data      json.RawMessage `json:"data"`
}

// Body is the JSON body of j's event, the same at every attempt.
func Body(j Job) []byte {
	b, _ := json.Marshal(envelope{Type: j.Type, Timestamp: j.EventAt.UTC(), TenantID: j.TenantID, Data: j.Data})
	return b
}

// MessageID is the webhook-id of an event: the same at every attempt and
// to every endpoint, so that receivers can drop repeats.
func MessageID(eventID string) string { return "msg_" + eventID }

// send makes one attempt. Any answer but a 2xx is a failure; the body of
// the answer is read up to MaxExcerpt bytes and no further.
func (w *Worker) send(ctx context.Context, j Job) Outcome {
	keys, err := w.keys(j)
	if err != nil {
		return Outcome{Error: err.Error()}
	}
	body := Body(j)
	now := w.cfg.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.URL, bytes.NewReader(body))
	if err != nil {
		return Outcome{Error: "invalid URL"}
	}
	id := MessageID(j.EventID)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Tollgate-Webhooks/1")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", itoa(now.Unix()))
	req.Header.Set("webhook-signature", Sign(id, now, body, keys...))
	start := time.Now()
	resp, err := w.cfg.Client.Do(req)
	lat := time.Since(start)
	if err != nil {
		return Outcome{Latency: lat, Error: failure(err)}
	}
	defer resp.Body.Close()
	buf := make([]byte, MaxExcerpt)
	n, _ := io.ReadFull(resp.Body, buf)
	o := Outcome{StatusCode: resp.StatusCode, Latency: lat, ResponseExcerpt: excerpt(buf[:n])}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		o.Error = "answered " + itoa(int64(resp.StatusCode))
	}
	return o
}

// keys opens the secrets that sign j: the endpoint's, and the one before
// it while it is still valid.
func (w *Worker) keys(j Job) ([][]byte, error) {
	k, err := w.cfg.Sealer.open(j.Secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{k}
	if len(j.PreviousSecret) > 0 && w.cfg.Now().Before(j.PreviousUntil) {
		if p, err := w.cfg.Sealer.open(j.PreviousSecret); err == nil {
			keys = append(keys, p)
		}
	}
	return keys, nil
}

// failure says in a few words why a request got no answer, without the
// URL (its query may hold the tenant's tokens).
func failure(err error) string {
	switch {
	case errors.Is(err, ErrRefusedAddress):
		return "refused: the receiver's address is not public"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		return "timed out"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	case strings.Contains(err.Error(), "no such host"):
		return "no such host"
	case strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509"):
		return "TLS handshake failed"
	}
	return "connection failed"
}

// excerpt keeps b as valid UTF-8 at most MaxExcerpt bytes long.
func excerpt(b []byte) string {
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b)
}

// RetryDelays are the waits after each failed attempt: seconds, then
// minutes, then hours, about 3 days (DisableAfter) in all; the attempt
// after the last is given up.
var RetryDelays = []time.Duration{
	5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
	12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour,
}

// nextAttempt is when a delivery that failed its attempt-th attempt is
// tried again, each wait off by up to a fifth either way so that the
// deliveries of one outage do not come back together; zero when it is
// given up.
func nextAttempt(delays []time.Duration, attempt int, now time.Time) time.Time {
	if attempt < 1 || attempt > len(delays) {
		return time.Time{}
	}
	d := delays[attempt-1]
	jitter := time.Duration(rand.Int64N(int64(d)*2/5+1)) - d/5
	return now.Add(d + jitter)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
