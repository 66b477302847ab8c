package webhooks_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// Endpoint ids that sort first and last: claiming by endpoint id would
// serve lowID's deliveries before highID's whatever their age.
const (
	lowID  = "00000000-0000-4000-8000-000000000001"
	highID = "ffffffff-ffff-4fff-bfff-ffffffffffff"
)

// hangingReceiver is a receiver that holds every request until the test
// lets one go (a value on release) or calls stop, which the test defers:
// the worker, stopped at cleanup, waits for its requests.
func hangingReceiver(t *testing.T) (rc *receiver, release chan<- struct{}, stop func()) {
	t.Helper()
	one := make(chan struct{})
	done := make(chan struct{})
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-one:
		case <-done:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return rc, one, func() { close(done) }
}

// renumber gives an endpoint that has no deliveries yet the id id.
func (e *env) renumber(ep webhooks.Created, id string) {
	e.t.Helper()
	e.exec(`UPDATE webhook_endpoints SET id = $2 WHERE id = $1`, ep.ID, id)
}

// inFlight counts the receiver's requests not yet answered.
func (rc *receiver) inFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.inflight
}

// TestOldestDueFirstAcrossEndpoints: with room for one endpoint's
// deliveries, the one due longest is sent first, whatever the endpoints'
// ids: tenant B's delivery, due an hour ago, goes before tenant A's, due a
// minute ago, though A's endpoint id sorts first and its receiver never
// answers.
func TestOldestDueFirstAcrossEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hang, _, stop := hangingReceiver(t)
	defer stop()
	healthy := newReceiver(t, ok)
	ta, tb := e.tenant(), e.tenant()
	e.renumber(e.endpoint(ta, hang.srv.URL), lowID)
	e.renumber(e.endpoint(tb, healthy.srv.URL), highID)
	e.emit(ta, 10)
	e.emit(tb, 1)
	e.exec(`UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 minute' WHERE tenant_id = $1`, ta)
	e.exec(`UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 hour' WHERE tenant_id = $1`, tb)
	e.run(webhooks.WorkerConfig{Client: webhooks.NewClient(true, time.Hour), MaxInFlight: 2})
	eventually.True(t, 10*time.Second, "B's delivery, the oldest due, delivered", func() bool { return healthy.distinct() == 1 })
}

// TestTenantsHoldAShareOfTheDeliveriesInFlight: five tenants whose receivers
// never answer, each with two endpoints and a backlog, hold at most their
// share of an instance's 16 deliveries in flight (an eighth: two each, where
// their endpoints would take four), so that tenant C's event, queued once
// they hold them, is delivered while they hang.
func TestTenantsHoldAShareOfTheDeliveriesInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hang, _, stop := hangingReceiver(t)
	defer stop()
	healthy := newReceiver(t, ok)
	for i := range 5 {
		tn := e.tenant()
		e.renumber(e.endpoint(tn, hang.srv.URL+"/a"), lowID[:len(lowID)-2]+string(rune('1'+i))+"a")
		e.renumber(e.endpoint(tn, hang.srv.URL+"/b"), lowID[:len(lowID)-2]+string(rune('1'+i))+"b")
		e.emit(tn, 5)
	}
	tc := e.tenant()
	e.renumber(e.endpoint(tc, healthy.srv.URL), highID)
	e.run(webhooks.WorkerConfig{Client: webhooks.NewClient(true, time.Hour), MaxInFlight: 16})
	eventually.True(t, 10*time.Second, "the hanging tenants holding their share", func() bool { return hang.inFlight() >= 10 })
	e.emit(tc, 1)
	eventually.True(t, 10*time.Second, "C's event delivered while the others hang", func() bool { return healthy.distinct() == 1 })
	hang.mu.Lock()
	defer hang.mu.Unlock()
	if hang.maxIn > 10 {
		t.Errorf("the five hanging tenants held %d in flight at once, want at most 10 (two each)", hang.maxIn)
	}
}

// TestRoomGoesToTheTenantWithFewestInFlight: two tenants whose receivers hang
// hold all four deliveries in flight of an instance, two each, with older
// deliveries waiting; when one of their requests is answered, the room it
// frees goes to tenant C, which has nothing in flight, not to the backlog
// that has waited longer.
func TestRoomGoesToTheTenantWithFewestInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hang, release, stop := hangingReceiver(t)
	defer stop()
	healthy := newReceiver(t, ok)
	for i := range 2 {
		tn := e.tenant()
		e.renumber(e.endpoint(tn, hang.srv.URL), lowID[:len(lowID)-1]+string(rune('1'+i)))
		e.emit(tn, 5)
	}
	tc := e.tenant()
	e.renumber(e.endpoint(tc, healthy.srv.URL), highID)
	e.run(webhooks.WorkerConfig{Client: webhooks.NewClient(true, time.Hour), MaxInFlight: 4})
	eventually.True(t, 10*time.Second, "the hanging tenants holding all four in flight", func() bool { return hang.inFlight() == 4 })
	e.emit(tc, 1)
	release <- struct{}{}
	eventually.True(t, 10*time.Second, "C's event delivered in the room freed", func() bool { return healthy.distinct() == 1 })
}
