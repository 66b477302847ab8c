package gate_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// untilCancelled is a store whose calls, for one group, wait until their
// caller gives up and then fail as the real stores do: a client hanging up
// in the middle of its check.
type untilCancelled struct {
	counter.Store
	group   string
	entered chan struct{}
}

func (u *untilCancelled) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	if req.Group == u.group {
		u.entered <- struct{}{}
		<-ctx.Done()
		return counter.Result{}, counter.ErrUnavailable
	}
	return u.Store.Check(ctx, req)
}

// TestClientsHangingUpDoNotOpenTheBreaker: checks whose clients go away
// while the store works are no failure of the store. Before, a load
// generator closing its connections at the end of a run opened its
// tenant's circuit, and the next second of checks was answered degraded.
func TestClientsHangingUpDoNotOpenTheBreaker(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	store := &untilCancelled{Store: memory.New(memory.Config{}), group: "tenant-1", entered: make(chan struct{})}
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro}}}
	cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000,"window":"1h"}`)}, nil)}
	g, _, _ := newTestGate(t, store, dir, cat, gate.Config{Metrics: m, BreakerFailures: 3})
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			g.Admit(ctx, checkReq("tenant-1", client, gate.Item{Policy: "open", Subject: "s"}))
			close(done)
		}()
		select {
		case <-store.entered:
		case <-done:
			t.Fatal("a check did not reach the store: the circuit opened")
		}
		cancel()
		<-done
	}
	if got := metric(t, m, `tollgate_counter_breaker_open{store="unknown"}`); got != "0" {
		t.Errorf("tollgate_counter_breaker_open %s after ten callers hung up, want 0", got)
	}
	// Nor are they counted as the store's errors: they are calls canceled.
	if got := metric(t, m, `tollgate_counter_store_seconds_count{operation="check",outcome="canceled",store="unknown"}`); got != "10" {
		t.Errorf("calls canceled: %q, want 10", got)
	}
	if got := metric(t, m, `tollgate_counter_store_errors_total{operation="check",store="unknown"}`); got != "0" {
		t.Errorf("store errors: %q after ten callers hung up, want 0", got)
	}
	// The next check still goes to the store.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Admit(ctx, checkReq("tenant-1", client, gate.Item{Policy: "open", Subject: "s"}))
	select {
	case <-store.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the next check did not reach the store: the circuit opened")
	}
}
