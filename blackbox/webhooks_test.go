package blackbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// allowPrivate lets instances deliver to the tests' receivers on loopback.
const allowPrivate = "TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1"

// manyTestSends lifts the limit on test events (10 a tenant a minute by
// default), which the tests send as their stream of events.
const manyTestSends = "TOLLGATE_WEBHOOK_TEST_SENDS=1000000"

// receipt is one delivery attempt a receiver saw.
type receipt struct {
	path, msgID, typ string
	data             json.RawMessage
	start, end       time.Time
	// cut is an attempt whose sender went away before it was answered.
	cut bool
}

// key names one delivery: the endpoint (its path) and the event.
func (r receipt) key() string { return r.path + " " + r.msgID }

// receiver is a tenant's webhook receiver: a real HTTP server that
// answers 200 after delay, or never (until its sender gives up) on the
// paths that hang, and records every attempt.
type receiver struct {
	srv   *httptest.Server
	delay atomic.Int64 // nanoseconds before answering
	hang  sync.Map     // path → chan struct{}: answer nothing until closed (hangOn)

	mu  sync.Mutex
	got []receipt
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	rc := receipt{path: req.URL.Path, msgID: req.Header.Get("webhook-id"), start: time.Now()}
	var env struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &env)
	}
	if err != nil || rc.msgID == "" || req.Header.Get("webhook-signature") == "" {
		http.Error(w, "not a Standard Webhooks delivery", http.StatusBadRequest)
		return
	}
	rc.typ, rc.data = env.Type, env.Data
	wait := time.Duration(r.delay.Load())
	var released chan struct{}
	if v, ok := r.hang.Load(rc.path); ok {
		wait, released = time.Hour, v.(chan struct{})
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-released:
			rc.cut = true
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-req.Context().Done():
			rc.cut = true
		}
	}
	rc.end = time.Now()
	r.mu.Lock()
	r.got = append(r.got, rc)
	r.mu.Unlock()
	if !rc.cut {
		w.WriteHeader(http.StatusNoContent)
	}
}

// hangOn makes the receiver hold every attempt at path unanswered, until
// the attempt gives up or hangOff(path).
func (r *receiver) hangOn(path string) { r.hang.Store(path, make(chan struct{})) }

// hangOff answers the attempts held at path 503, and those after them as
// any other.
func (r *receiver) hangOff(path string) {
	if v, ok := r.hang.LoadAndDelete(path); ok {
		close(v.(chan struct{}))
	}
}

// url is the receiver's URL for path (which names an endpoint).
func (r *receiver) url(path string) string { return r.srv.URL + path }

// receipts returns a copy of the attempts seen so far.
func (r *receiver) receipts() []receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// answered counts, per delivery, the attempts answered 2xx.
func (r *receiver) answered() map[string]int {
	n := map[string]int{}
	for _, rc := range r.receipts() {
		if !rc.cut {
			n[rc.key()]++
		}
	}
	return n
}

// hookEndpoint is an endpoint registered through the API.
type hookEndpoint struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	path   string
	key    string // the tenant's live key
}

// addEndpoint registers the receiver's path for the tenant of key, for
// events.
func addEndpoint(t testing.TB, in *instance, key string, rcv *receiver, path string, events ...string) hookEndpoint {
	t.Helper()
	c := do(t, "POST", in.base+"/v1/webhooks", key, map[string]any{"url": rcv.url(path), "events": events})
	if c.status != http.StatusCreated {
		t.Fatalf("POST /v1/webhooks: %d %s", c.status, c.body)
	}
	var e hookEndpoint
	c.json(t, &e)
	e.path, e.key = path, key
	return e
}

// ping sends the endpoint a test event through in and returns its message
// id (webhook-id).
func ping(t testing.TB, in *instance, e hookEndpoint) string {
	t.Helper()
	c := do(t, "POST", in.base+"/v1/webhooks/"+e.ID+"/test", e.key, nil)
	if c.status != http.StatusAccepted {
		t.Fatalf("POST /v1/webhooks/%s/test: %d %s", e.ID, c.status, c.body)
	}
	var d struct {
		EventID string `json:"event_id"`
	}
	c.json(t, &d)
	return "msg_" + d.EventID
}

// committedDeliveries returns every delivery in the outbox as the key a
// receiver records it under (path and webhook-id), with its attempts.
func committedDeliveries(t testing.TB, dsn string, paths map[string]string) map[string]int64 {
	t.Helper()
	rows := queryRows(t, dsn, `SELECT endpoint_id::text, 'msg_' || event_id::text, attempts::text FROM webhook_deliveries`)
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		var n int64
		fmt.Sscan(r[2], &n)
		out[paths[r[0]]+" "+r[1]] = n
	}
	return out
}

// TestWebhooksTwoInstancesAndSIGKILL runs two real instances delivering
// from one outbox. Healthy: each event reaches its receiver exactly once.
// Then, with a slow receiver, one instance is SIGKILLed while deliveries
// are in flight and restarted: every committed delivery arrives at least
// once, and only those the killed instance had in flight arrive twice
// (at least once, not exactly once).
func TestWebhooksTwoInstancesAndSIGKILL(t *testing.T) {
	// Parallel: most of its time is spent waiting out the killed
	// instance's claim on its deliveries (30 s).
	t.Parallel()
	dsn := pgtest.New(t)
	a, b := start(t, dsn, patientStore, allowPrivate, manyTestSends), start(t, dsn, patientStore, allowPrivate, manyTestSends)
	rcv := newReceiver(t)
	var eps []hookEndpoint
	paths := map[string]string{} // endpoint id → path
	for tn := range 2 {
		nt := createTenant(t, dsn, "pro")
		for n := range 2 {
			e := addEndpoint(t, a, nt.LiveKey, rcv, fmt.Sprintf("/t%d/e%d", tn, n), "key.revoked")
			eps = append(eps, e)
			paths[e.ID] = e.path
		}
	}

	// Healthy: 100 events, through both instances, each received once.
	sendPings := func(n int, ins ...*instance) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					ping(t, ins[i%len(ins)], eps[i%len(eps)])
				}
			})
		}
		wg.Wait()
	}
	sendPings(100, a, b)
	waitAllAnswered(t, dsn, rcv, paths, 30*time.Second)
	for k, n := range rcv.answered() {
		if n != 1 {
			t.Errorf("healthy phase: delivery %s received %d times, want exactly once", k, n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	before := len(rcv.receipts())

	// Killed: a slow receiver keeps deliveries in flight; 200 events are
	// committed, then one instance is killed while it sends.
	rcv.delay.Store(int64(300 * time.Millisecond))
	sendPings(200, a, b)
	eventually.True(t, 20*time.Second, "deliveries under way", func() bool { return len(rcv.receipts()) >= before+20 })
	killedAt := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	// The last attempts the killed instance sent, written to their sockets
	// before it died, can reach the receiver's handlers a little after:
	// the receiver runs in this busy process. An attempt that starts a
	// second after the instance is gone is not one of its.
	goneAt := time.Now().Add(time.Second)
	a = start(t, dsn, patientStore, allowPrivate, manyTestSends)
	// The killed instance's claims run out after 30 s; then the others
	// send what it held.
	waitAllAnswered(t, dsn, rcv, paths, 90*time.Second)

	committed := committedDeliveries(t, dsn, paths)
	received := map[string]int{}       // attempts that arrived, answered or cut off
	startedBefore := map[string]bool{} // received before the killed instance was gone
	inFlight, cut := 0, 0              // attempts under way at the kill, and those it cut off
	for _, rc := range rcv.receipts() {
		received[rc.key()]++
		if rc.start.Before(goneAt) {
			startedBefore[rc.key()] = true
		}
		if rc.start.Before(killedAt) && !rc.end.Before(killedAt) {
			inFlight++
		}
		if rc.cut {
			cut++
		}
	}
	dups := 0
	for k, attempts := range committed {
		switch n := received[k]; {
		case n == 0:
			t.Errorf("committed delivery %s never received", k)
		case n > 1:
			dups++
			// Only an attempt the killed instance made and could not
			// record is sent again, once its claim ran out.
			if !startedBefore[k] || attempts < 2 {
				t.Errorf("delivery %s received %d times in %d attempts, the first after the killed instance was gone: %v", k, n, attempts, !startedBefore[k])
			}
		}
	}
	for k := range received {
		if _, ok := committed[k]; !ok {
			t.Errorf("received %s, which is not in the outbox", k)
		}
	}
	// The killed instance held at most two deliveries per endpoint.
	if max := 2 * len(eps); dups > max {
		t.Errorf("%d deliveries received twice; the killed instance can have had at most %d in flight", dups, max)
	}
	t.Logf("%d deliveries committed; at the kill %d attempts were in flight, %d of them cut off by it; %d deliveries received twice",
		len(committed)-100, inFlight, cut, dups)
}

// waitAllAnswered waits until the receiver has answered every delivery in
// the outbox and the outbox holds nothing unsettled.
func waitAllAnswered(t *testing.T, dsn string, rcv *receiver, paths map[string]string, within time.Duration) {
	t.Helper()
	eventually.NoError(t, within, "every committed delivery received", func() error {
		answered := rcv.answered()
		var missing []string
		for k := range committedDeliveries(t, dsn, paths) {
			if answered[k] == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d deliveries not received, such as %s", len(missing), missing[0])
		}
		if n := queryInt(t, dsn, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`); n > 0 {
			return fmt.Errorf("%d deliveries not settled", n)
		}
		return nil
	})
}

// queryRows runs a query of three text columns on dsn.
func queryRows(t testing.TB, dsn, q string, args ...any) [][3]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([3]string, error) {
		var v [3]string
		err := r.Scan(&v[0], &v[1], &v[2])
		return v, err
	})
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}
