package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// TestDeliveriesVerifyWithStandardWebhooks: the events of a revoked key and
// a raised alert, written by the triggers in the transactions that made
// them, reach the receiver signed so that the Standard Webhooks library
// accepts them; the same delivery with its body altered, or replayed with
// its old timestamp, is refused; after a rotation, both secrets verify.
func TestDeliveriesVerifyWithStandardWebhooks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tid := e.tenant()
	rc := newReceiver(t, ok)
	ep := e.endpoint(tid, rc.srv.URL+"/hooks")
	if !strings.HasPrefix(ep.Secret, "whsec_") {
		t.Fatalf("secret %q does not start with whsec_", ep.Secret)
	}

	tenants := pgstore.NewTenants(e.pool)
	k, err := tenants.CreateKey(ctx, tenant.Key{ID: "k_webhooks1", TenantID: tid, Prefix: "tg_live_wh1", Hash: []byte("h")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.RevokeKey(ctx, k.ID); err != nil { // twice: one event
		t.Fatal(err)
	}
	e.exec(`INSERT INTO alerts (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow)
		VALUES ($1, 'login', 'abc123', current_date, now(), now(), 12, 10, false)`, tid)
	e.run(webhooks.WorkerConfig{})
	eventually.True(t, 10*time.Second, "two events received", func() bool { return len(rc.requests()) >= 2 })

	got := rc.requests()
	types := map[string]map[string]any{}
	var msgs []verifyMsg
	for _, r := range got {
		var body struct {
			Type     string         `json:"type"`
			TenantID string         `json:"tenant_id"`
			Data     map[string]any `json:"data"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("body %s: %v", r.Body, err)
		}
		if body.TenantID != tid {
			t.Errorf("tenant_id %q, want %q", body.TenantID, tid)
		}
		types[body.Type] = body.Data
		msgs = append(msgs, verifyMsg{ep.Secret, r.ID, r.Timestamp, r.Signature, string(r.Body)})
	}
	if len(got) != 2 || types["key.revoked"] == nil || types["alert.triggered"] == nil {
		t.Fatalf("received %d events of types %v, want key.revoked and alert.triggered once each", len(got), types)
	}
	if d := types["key.revoked"]; d["key_id"] != "k_webhooks1" || d["key_prefix"] != "tg_live_wh1" {
		t.Errorf("key.revoked data %v", d)
	}
	if d := types["alert.triggered"]; d["policy"] != "login" || d["subject_digest"] != "abc123" || d["count"] != float64(12) || d["threshold"] != float64(10) {
		t.Errorf("alert.triggered data %v", d)
	}

	first := msgs[0]
	altered := first
	altered.Body = strings.Replace(first.Body, `"type"`, `"typ"`, 1)
	old, _ := strconv.ParseInt(first.Timestamp, 10, 64)
	replayed := first
	replayed.Timestamp = strconv.FormatInt(old-600, 10)
	replayed.Signature = webhooks.Sign(first.ID, time.Unix(old-600, 0), []byte(first.Body), []byte("not the secret"))
	wrongSecret := first
	wrongSecret.Secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verdicts := standardWebhooks(t, append(msgs, altered, replayed, wrongSecret))
	for i, v := range verdicts[:len(msgs)] {
		if v != "ok" {
			t.Errorf("delivery %d: the Standard Webhooks library says %q", i, v)
		}
	}
	for i, what := range []string{"altered body", "replayed with an old timestamp", "wrong secret"} {
		if v := verdicts[len(msgs)+i]; !strings.HasPrefix(v, "rejected") {
			t.Errorf("%s: the library says %q, want rejected", what, v)
		}
	}

	// A stale timestamp signed with the real key is still refused: a
	// capture replayed later does not pass.
	signedOld := verifyMsg{ep.Secret, first.ID, replayed.Timestamp, "", first.Body}
	rotated, err := e.svc.Rotate(ctx, tid, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret == ep.Secret || rotated.PreviousSecretExpiresAt == nil {
		t.Fatalf("rotate: secret unchanged or no expiry of the previous one: %+v", rotated)
	}
	if _, err := e.svc.Ping(ctx, tid, ep.ID); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the test.ping received", func() bool { return len(rc.requests()) >= 3 })
	ping := rc.requests()[2]
	if sigs := strings.Fields(ping.Signature); len(sigs) != 2 {
		t.Fatalf("after a rotation the signature header is %q, want two signatures", ping.Signature)
	}
	signedOld.Signature = ping.Signature
	verdicts = standardWebhooks(t, []verifyMsg{
		{rotated.Secret, ping.ID, ping.Timestamp, ping.Signature, string(ping.Body)},
		{ep.Secret, ping.ID, ping.Timestamp, ping.Signature, string(ping.Body)},
		signedOld,
	})
	if verdicts[0] != "ok" || verdicts[1] != "ok" {
		t.Errorf("after a rotation, new secret %q, previous secret %q: want both ok", verdicts[0], verdicts[1])
	}
	if !strings.HasPrefix(verdicts[2], "rejected") {
		t.Errorf("a delivery's signature under another timestamp: %q, want rejected", verdicts[2])
	}
}

// TestRetriesUntilDelivered: a receiver that answers 500 twice gets the
// event a third time and the delivery is settled; the log keeps 256 bytes
// of an answer at most.
func TestRetriesUntilDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tid := e.tenant()
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(strings.Repeat("é", 1000)))
			return
		}
		_, _ = w.Write([]byte("thanks"))
	})
	ep := e.endpoint(tid, rc.srv.URL)
	e.emit(tid, 1)
	e.run(webhooks.WorkerConfig{Retries: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}})
	eventually.True(t, 10*time.Second, "the delivery settled", func() bool { return e.statuses()["delivered"] == 1 })
	ds, err := e.svc.Deliveries(context.Background(), tid, ep.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	if d.Attempts != 3 || d.Status != "delivered" || d.LastStatusCode == nil || *d.LastStatusCode != 200 || d.ResponseExcerpt != "thanks" || d.NextAttemptAt != nil {
		t.Errorf("delivery log %+v, want 3 attempts, delivered, 200, excerpt thanks", d)
	}
	if got := rc.distinct(); got != 1 || len(rc.requests()) != 3 {
		t.Errorf("receiver got %d requests of %d events, want 3 of 1", len(rc.requests()), got)
	}
}

// TestFailingEndpointIsGivenUpAndDisabled: a delivery that fails every
// attempt is given up after the last retry; an endpoint failing for longer
// than DisableAfter is disabled with the reason; its waiting delivery is
// sent once it is enabled again.
func TestFailingEndpointIsGivenUpAndDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tid := e.tenant()
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(strings.Repeat("x", 1000)))
	})
	ep := e.endpoint(tid, rc.srv.URL)
	e.emit(tid, 1)
	e.run(webhooks.WorkerConfig{Retries: []time.Duration{time.Millisecond}})
	eventually.True(t, 10*time.Second, "the delivery given up", func() bool { return e.statuses()["failed"] == 1 })
	ds, err := e.svc.Deliveries(ctx, tid, ep.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d := ds[0]; d.Attempts != 2 || len(d.ResponseExcerpt) != webhooks.MaxExcerpt || d.LastError != "answered 502" {
		t.Errorf("given-up delivery %+v: want 2 attempts, a 256-byte excerpt, answered 502", d)
	}
	got, _ := e.svc.Endpoint(ctx, tid, ep.ID)
	if !got.Enabled || got.FailingSince == nil {
		t.Fatalf("after a day of failures the endpoint is %+v, want enabled and failing", got)
	}

	e.exec(`UPDATE webhook_endpoints SET failing_since = now() - interval '73 hours' WHERE id = $1`, ep.ID)
	e.emit(tid, 1)
	eventually.True(t, 10*time.Second, "the endpoint disabled", func() bool {
		got, _ = e.svc.Endpoint(ctx, tid, ep.ID)
		return !got.Enabled
	})
	if got.DisabledReason != webhooks.DisabledForFailures {
		t.Errorf("disabled reason %q", got.DisabledReason)
	}
	// The attempt that disabled it waits; events while it is disabled are
	// not queued for it.
	e.emit(tid, 1)
	before := len(rc.requests())
	if s := e.statuses(); s["retrying"] != 1 || s["failed"] != 1 || len(s) != 2 {
		t.Errorf("deliveries by status %v, want one failed and one waiting", s)
	}
	if _, err := e.svc.SetEnabled(ctx, tid, ep.ID, true, ""); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the waiting delivery sent once enabled", func() bool { return len(rc.requests()) > before })
}

// TestGoneAndSlowReceivers: a receiver that is gone (connection refused)
// is retried with the reason logged; one that answers slowly is delivered
// and its latency kept.
func TestGoneAndSlowReceivers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	slow := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		time.Sleep(300 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	})
	ta, tb := e.tenant(), e.tenant()
	epGone := e.endpoint(ta, gone.URL)
	epSlow := e.endpoint(tb, slow.srv.URL)
	e.emit(ta, 1)
	e.emit(tb, 1)
	e.run(webhooks.WorkerConfig{Retries: []time.Duration{time.Hour}})
	eventually.True(t, 10*time.Second, "both attempted", func() bool {
		s := e.statuses()
		return s["retrying"] == 1 && s["delivered"] == 1
	})
	ds, _ := e.svc.Deliveries(ctx, ta, epGone.ID, 1)
	if d := ds[0]; d.LastError != "connection refused" || d.LastStatusCode != nil || d.NextAttemptAt == nil {
		t.Errorf("gone receiver's delivery %+v", d)
	}
	ds, _ = e.svc.Deliveries(ctx, tb, epSlow.ID, 1)
	if d := ds[0]; d.LastLatencyMS == nil || *d.LastLatencyMS < 300 {
		t.Errorf("slow receiver's delivery %+v, want its latency of 300 ms or more", d)
	}
}

// TestHangingEndpointDoesNotDelayAnotherTenant: tenant A's receiver never
// answers (the attempt timeout is longer than the test); tenant B's 20
// events are all delivered while A's requests hang, at most two of them
// at once.
func TestHangingEndpointDoesNotDelayAnotherTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	hang := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	healthy := newReceiver(t, ok)
	ta, tb := e.tenant(), e.tenant()
	e.endpoint(ta, hang.srv.URL)
	e.endpoint(tb, healthy.srv.URL)
	e.emit(ta, 20)
	e.run(webhooks.WorkerConfig{Client: webhooks.NewClient(true, time.Hour), MaxInFlight: 8})
	eventually.True(t, 10*time.Second, "A's receiver holding two requests", func() bool { return len(hang.requests()) == 2 })
	e.emit(tb, 20)
	eventually.True(t, 10*time.Second, "B's 20 events delivered", func() bool { return healthy.distinct() == 20 })
	if n := len(hang.requests()); n != 2 {
		t.Errorf("A's hanging receiver got %d requests, want 2 (its endpoint's share)", n)
	}
	hang.mu.Lock()
	defer hang.mu.Unlock()
	if hang.maxIn > 2 {
		t.Errorf("A's receiver had %d requests in flight at once, want at most 2", hang.maxIn)
	}
}

// TestTwoInstancesDeliverEachEventOnce: two workers (two instances'
// worth) on one outbox deliver 200 events to a healthy receiver once
// each, at most two at a time.
func TestTwoInstancesDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := newReceiver(t, ok)
	tid := e.tenant()
	e.endpoint(tid, rc.srv.URL)
	e.run(webhooks.WorkerConfig{})
	e.run(webhooks.WorkerConfig{})
	const n = 200
	for range n / 20 {
		e.emit(tid, 20)
	}
	eventually.True(t, 30*time.Second, "every delivery settled", func() bool { return e.statuses()["delivered"] == n })
	if got, all := rc.distinct(), len(rc.requests()); got != n || all != n {
		t.Errorf("receiver got %d requests of %d events, want %d of %d", all, got, n, n)
	}
	if rc.maxIn > 2 {
		t.Errorf("%d requests in flight to one endpoint, want at most 2", rc.maxIn)
	}
}

// TestRedirectsAreNotFollowed: a 302 is a failed delivery; the place it
// points at gets nothing.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	target := newReceiver(t, ok)
	redirect := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, target.srv.URL, http.StatusFound)
	})
	tid := e.tenant()
	e.endpoint(tid, redirect.srv.URL)
	e.emit(tid, 1)
	e.run(webhooks.WorkerConfig{Retries: []time.Duration{time.Hour}})
	eventually.True(t, 10*time.Second, "the attempt recorded", func() bool { return e.statuses()["retrying"] == 1 })
	if n := len(target.requests()); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

// TestGuardRefusesInternalAddresses: without TOLLGATE_WEBHOOK_ALLOW_PRIVATE
// the client refuses a loopback receiver at connect time, and endpoints
// may not name internal addresses or plain http.
func TestGuardRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, ok)
	_, err := webhooks.NewClient(false, time.Second).Post(rc.srv.URL, "application/json", nil)
	if !errors.Is(err, webhooks.ErrRefusedAddress) {
		t.Errorf("POST to %s without allow-private: %v, want ErrRefusedAddress", rc.srv.URL, err)
	}
	if n := len(rc.requests()); n != 0 {
		t.Errorf("the loopback receiver got %d requests", n)
	}
	for _, c := range []struct {
		url          string
		allowPrivate bool
		ok           bool
	}{
		{"https://hooks.example.com/tollgate?x=1", false, true},
		{"http://hooks.example.com/", false, false},
		{"http://127.0.0.1:8080/", true, true},
		{"https://127.0.0.1/", false, false},
		{"https://10.1.2.3/", false, false},
		{"https://[::1]/", false, false},
		{"https://localhost/", false, false},
		{"https://169.254.169.254/latest/meta-data", true, false},
		{"https://[fd00:ec2::254]/", true, false},
		{"https://[fe80::1]/", true, false},
		{"https://0.0.0.0/", true, false},
		{"https://224.0.0.1/", true, false},
		{"https://user:pw@hooks.example.com/", false, false},
		{"ftp://hooks.example.com/", true, false},
		{"/relative", true, false},
		{"https://hooks.example.com/" + strings.Repeat("a", 2048), false, false},
	} {
		_, err := webhooks.CheckURL(c.url, c.allowPrivate)
		if (err == nil) != c.ok {
			t.Errorf("CheckURL(%.60q, allowPrivate %t): %v, want ok %t", c.url, c.allowPrivate, err, c.ok)
		}
		if err != nil && !errors.Is(err, webhooks.ErrInvalid) {
			t.Errorf("CheckURL(%.60q): %v does not wrap ErrInvalid", c.url, err)
		}
	}
}

// TestAtMostFiveEndpoints: concurrent creations cannot pass the limit.
func TestAtMostFiveEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tid := e.tenant()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := e.svc.Create(context.Background(), tid, "https://hooks.example.com/", []string{webhooks.EventKeyRevoked})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var made, refused int
	for err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, webhooks.ErrTooMany):
			refused++
		default:
			t.Errorf("create: %v", err)
		}
	}
	if made != webhooks.MaxEndpoints || refused != 3 {
		t.Errorf("%d made, %d refused, want 5 and 3", made, refused)
	}
}

// TestFinishedDeliveryMakesRoomForTheNext: an endpoint's backlog drains
// as fast as its receiver answers, not one pair of deliveries per poll:
// each delivery that finishes makes the worker claim again.
func TestFinishedDeliveryMakesRoomForTheNext(t *testing.T) {
	e := newEnv(t)
	tenant := e.tenant()
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	})
	e.endpoint(tenant, rc.srv.URL)
	e.emit(tenant, 20)
	// No poll to fall back on, and no notification: the first claim
	// takes two, and the rest must follow the deliveries that finish.
	w := e.run(webhooks.WorkerConfig{Poll: time.Hour})
	w.Wake()
	eventually.True(t, 20*time.Second, "backlog delivered without a poll", func() bool { return e.statuses()["delivered"] == 20 })
}

// TestBacklogCountsUnsettledDeliveries: the worker's Backlog is the
// outbox's deliveries not yet settled, those of every instance, and
// falls to zero once they are delivered.
func TestBacklogCountsUnsettledDeliveries(t *testing.T) {
	e := newEnv(t)
	tenant := e.tenant()
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	e.endpoint(tenant, rc.srv.URL)
	e.emit(tenant, 7)
	w := e.run(webhooks.WorkerConfig{BacklogEvery: 20 * time.Millisecond})
	eventually.True(t, 10*time.Second, "backlog of 7", func() bool { return w.Backlog() == 7 })
	close(release)
	eventually.True(t, 10*time.Second, "backlog empty", func() bool { return w.Backlog() == 0 && e.statuses()["delivered"] == 7 })
}
