package webhooks_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// TestEventsPastTheBoundAreNotQueued: an endpoint whose receiver hangs
// holds at most 1,000 deliveries waiting; the events past them are kept
// in its log as dropped, settled, with the reason, and never tried. The
// worker counts them (the metric) and says so in its log once, naming the
// tenant.
func TestEventsPastTheBoundAreNotQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hang, _, stop := hangingReceiver(t)
	defer stop()
	tn := e.tenant()
	ep := e.endpoint(tn, hang.srv.URL)
	logs := &logbuf.Buffer{}
	w := e.run(webhooks.WorkerConfig{Client: webhooks.NewClient(true, time.Hour), BacklogEvery: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	e.emit(tn, webhooks.MaxPending)
	// Counted full: the drops that follow are this instance's to say.
	eventually.True(t, 10*time.Second, "the outbox counted", func() bool { return w.Backlog() == webhooks.MaxPending })
	e.emit(tn, 5)
	s := e.statuses()
	if waiting := s["pending"] + s["sending"]; waiting != webhooks.MaxPending || s["dropped"] != 5 {
		t.Fatalf("deliveries by status %v, want 1000 waiting and 5 dropped", s)
	}
	ds, err := e.svc.Deliveries(context.Background(), tn, ep.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := ds[0]; d.Status != "dropped" || d.NextAttemptAt != nil || d.Attempts != 0 || !strings.Contains(d.LastError, "1,000 deliveries") {
		t.Errorf("the last delivery %+v, want dropped, settled, untried, with the reason", d)
	}
	eventually.True(t, 10*time.Second, "the drops counted and said", func() bool {
		return w.Dropped() == 5 && strings.Contains(logs.String(), "webhook deliveries dropped")
	})
	if n := strings.Count(logs.String(), "webhook deliveries dropped"); n != 1 || !strings.Contains(logs.String(), tn) {
		t.Errorf("the drops said %d times, want once naming tenant %s:\n%s", n, tn, logs.String())
	}
}
