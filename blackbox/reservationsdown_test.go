package blackbox

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// TestReservationsWhileTheStoreIsDown holds the store-down answers of
// docs/api.md ("Reservations", "Store down") on a counter store that is
// really stopped: the instance's redis-server is shut down and started
// again. While it is down a fail-open policy answers allowed and degraded,
// under a reservation id no store knows, and a fail-closed one refuses for
// a second; settling is a 503 with Retry-After: 1. Once it is back, the
// degraded id is a 404 and reservations are held and settled again.
// (The restarted server starts empty; a reservation held across an outage
// is the fault suite's reservations phases, whose stores keep their data.)
func TestReservationsWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	srv := redistest.StartStoppable(t)
	in := start(t, dsn, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL="+srv.URL)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "open", map[string]any{"limit": 1000, "window": "30d", "fail_mode": "open"})
	putPolicy(t, in, nt.LiveKey, "closed", map[string]any{"limit": 1000, "window": "30d", "fail_mode": "closed"})
	reserve := func(policy string) (call, map[string]any) {
		t.Helper()
		c := do(t, "POST", in.base+"/v1/reservations", nt.LiveKey, map[string]any{"policy": policy, "subject": "s", "amount": 10, "ttl": "1h"})
		var a map[string]any
		if c.status != 200 || json.Unmarshal(c.body, &a) != nil {
			t.Fatalf("reserve of %s: %d %s, want 200", policy, c.status, c.body)
		}
		return c, a
	}
	settle := func(id string) call {
		return do(t, "POST", in.base+"/v1/reservations/"+id+"/settle", nt.LiveKey, map[string]any{"used": 3})
	}
	if _, a := reserve("open"); a["allowed"] != true || a["degraded"] != false {
		t.Fatalf("before the outage: %v", a)
	}

	srv.Stop(t)
	c, a := reserve("open")
	id, _ := a["reservation_id"].(string)
	if a["allowed"] != true || a["degraded"] != true || len(id) != 35 || a["expires_at"] == nil || c.header.Get("X-RateLimit-Degraded") != "true" {
		t.Fatalf("fail-open reservation with the store down: %s %v, want allowed, degraded, an id and its expiry", c.body, c.header)
	}
	if _, a := reserve("closed"); a["allowed"] != false || a["degraded"] != true || a["retry_after_ms"] != 1000.0 {
		t.Fatalf("fail-closed reservation with the store down: %v, want refused for a second, degraded", a)
	}
	if c := settle(id); c.status != 503 || c.header.Get("Retry-After") != "1" {
		t.Fatalf("settle with the store down: %d %s, Retry-After %q; want 503, Retry-After 1", c.status, c.body, c.header.Get("Retry-After"))
	}

	srv.Start(t)
	// The instance's circuit breaker lets a probe through within a second
	// or so; until then a settlement is still the 503 above.
	eventually.True(t, 10*time.Second, "the degraded reservation's settlement a 404", func() bool {
		c := settle(id)
		if c.status != 503 && c.status != 404 {
			t.Fatalf("settle the degraded reservation after the outage: %d %s, want 404", c.status, c.body)
		}
		return c.status == 404
	})
	_, a = reserve("open")
	held, _ := a["reservation_id"].(string)
	if a["allowed"] != true || a["degraded"] != false || a["remaining"] != 990.0 {
		t.Fatalf("reservation after the outage: %v, want held, 990 left of the restarted store's budget", a)
	}
	if c := settle(held); c.status != 200 {
		t.Fatalf("settle after the outage: %d %s", c.status, c.body)
	}
}
