package webhooks_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/kit/digest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// sealerOf is the Sealer of an instance started with pepper, as serve
// makes it.
func sealerOf(t *testing.T, pepper string) *webhooks.Sealer {
	t.Helper()
	s, err := webhooks.NewSealer(digest.Key([]byte(pepper), "tollgate webhook secrets"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// endpointSealed registers url for tenantID through an instance whose
// secrets sealer seals.
func (e *env) endpointSealed(sealer *webhooks.Sealer, tenantID, url string) webhooks.Created {
	e.t.Helper()
	svc := &webhooks.Service{Store: e.store, Sealer: sealer, AllowPrivate: true}
	c, err := svc.Create(context.Background(), tenantID, url, webhooks.EventTypes)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// signedWith reports whether r carries the signature of secret (whsec_…)
// alone.
func signedWith(t *testing.T, r received, secret string) bool {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	at, err := strconv.ParseInt(r.Timestamp, 10, 64)
	if err != nil {
		t.Fatalf("webhook-timestamp %q: %v", r.Timestamp, err)
	}
	return r.Signature == webhooks.Sign(r.ID, time.Unix(at, 0), r.Body, key)
}

// TestAnotherPepperLeavesDeliveriesAlone: two instances' workers on one
// outbox under different peppers (TOLLGATE_PEPPER keys the Sealer), and
// endpoints whose secrets were sealed under the one, the other, or a third
// pepper no instance has. Each delivery is sent once, in one attempt, by
// the worker that can sign it: a worker does not claim what it cannot
// open, so no attempt is spent on it. The third pepper's wait, untried,
// and each worker says so in its log once.
func TestAnotherPepperLeavesDeliveriesAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other, third := sealerOf(t, "another-pepper-of-another-instance"), sealerOf(t, "a-third-pepper-nobody-runs-with")
	rcA, rcB, rcC := newReceiver(t, ok), newReceiver(t, ok), newReceiver(t, ok)
	ta, tb, tc := e.tenant(), e.tenant(), e.tenant()
	epA := e.endpoint(ta, rcA.srv.URL)
	epB := e.endpointSealed(other, tb, rcB.srv.URL)
	e.endpointSealed(third, tc, rcC.srv.URL)
	for _, tn := range []string{ta, tb, tc} {
		e.emit(tn, 10)
	}
	logA, logB := &logbuf.Buffer{}, &logbuf.Buffer{}
	// A spent attempt would wait an hour: the test would see it.
	retries := []time.Duration{time.Hour}
	e.run(webhooks.WorkerConfig{Sealer: other, Logger: slog.New(slog.NewTextHandler(logB, nil)), Retries: retries, BacklogEvery: 20 * time.Millisecond})
	e.run(webhooks.WorkerConfig{Logger: slog.New(slog.NewTextHandler(logA, nil)), Retries: retries, BacklogEvery: 20 * time.Millisecond})
	eventually.True(t, 10*time.Second, "the events of A and B delivered", func() bool { return e.statuses()["delivered"] == 20 })
	const said = "another pepper"
	eventually.True(t, 10*time.Second, "both workers saying they leave C's deliveries", func() bool {
		return strings.Contains(logA.String(), said) && strings.Contains(logB.String(), said)
	})

	rows, err := e.pool.Query(context.Background(), `SELECT tenant_id::text, status, attempts, last_error FROM webhook_deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var tn, status, lastError string
		var attempts int
		if err := rows.Scan(&tn, &status, &attempts, &lastError); err != nil {
			t.Fatal(err)
		}
		want, wantAttempts := "delivered", 1
		if tn == tc {
			want, wantAttempts = "pending", 0
		}
		if status != want || attempts != wantAttempts || lastError != "" {
			t.Errorf("a delivery of tenant %s: %s after %d attempts (%q), want %s after %d", tn, status, attempts, lastError, want, wantAttempts)
		}
	}
	for _, c := range []struct {
		name   string
		rc     *receiver
		secret string
	}{{"A", rcA, epA.Secret}, {"B", rcB, epB.Secret}} {
		got := c.rc.requests()
		if len(got) != 10 || c.rc.distinct() != 10 {
			t.Errorf("%s's receiver got %d requests of %d events, want 10 of 10", c.name, len(got), c.rc.distinct())
		}
		for _, r := range got {
			if !signedWith(t, r, c.secret) {
				t.Errorf("%s's receiver got %s signed %q, not with its secret", c.name, r.ID, r.Signature)
			}
		}
	}
	if n := len(rcC.requests()); n != 0 {
		t.Errorf("C's receiver got %d requests, want none", n)
	}
	for name, l := range map[string]*logbuf.Buffer{"A": logA, "B": logB} {
		if n := strings.Count(l.String(), said); n != 1 {
			t.Errorf("worker %s said %d times that it leaves deliveries to another pepper, want once:\n%s", name, n, l.String())
		}
	}
}

// TestSecretsSealedBeforeKeyIDsAreLabelled: secrets sealed before their
// key had an id (migration 000024) are claimed by no one until a worker
// that opens them labels them with its key; then each is delivered, in one
// attempt, by the worker of its pepper, and the one of the other pepper
// labels none of them.
func TestSecretsSealedBeforeKeyIDsAreLabelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := sealerOf(t, "another-pepper-of-another-instance")
	rcA, rcB := newReceiver(t, ok), newReceiver(t, ok)
	ta, tb := e.tenant(), e.tenant()
	epA := e.endpoint(ta, rcA.srv.URL)
	epB := e.endpointSealed(other, tb, rcB.srv.URL)
	e.exec(`UPDATE webhook_endpoints SET secret_key_id = NULL`)
	e.emit(ta, 3)
	e.emit(tb, 3)
	retries := []time.Duration{time.Hour}
	e.run(webhooks.WorkerConfig{Sealer: other, Retries: retries, BacklogEvery: 20 * time.Millisecond})
	e.run(webhooks.WorkerConfig{Retries: retries, BacklogEvery: 20 * time.Millisecond})
	eventually.True(t, 10*time.Second, "every delivery delivered", func() bool { return e.statuses()["delivered"] == 6 })
	var attempts int
	if err := e.pool.QueryRow(context.Background(), `SELECT sum(attempts) FROM webhook_deliveries`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 6 {
		t.Errorf("%d attempts for 6 deliveries, want 6", attempts)
	}
	for _, c := range []struct {
		id     string
		sealer *webhooks.Sealer
	}{{epA.ID, e.sealer}, {epB.ID, other}} {
		var got []byte
		if err := e.pool.QueryRow(context.Background(), `SELECT secret_key_id FROM webhook_endpoints WHERE id = $1`, c.id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(c.sealer.KeyID()) {
			t.Errorf("endpoint %s labelled %x, want its key's id %x", c.id, got, c.sealer.KeyID())
		}
	}
}
