package blackbox

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestChangeJustBeforeAnOutage (issue 23, item 3): a tenant's policies
// change just before the instance loses PostgreSQL, and the change's
// notification reaches the instance after its last check read them. During
// the outage the tenant is still served from the configuration last read,
// each policy by its fail mode, never 503; a tenant the instance has never
// seen gets 503 unavailable. After the outage the answers are exact again,
// and a change made while the instance could not hear of it is read within
// seconds (the change listener reconnects and refreshes everything).
func TestChangeJustBeforeAnOutage(t *testing.T) {
	dsn := pgtest.New(t)
	u, _ := url.Parse(dsn)
	proxy := faultnet.New(t, u.Host)
	u.Host = proxy.Addr()
	in := start(t, u.String())
	nt := createTenant(t, dsn, "pro")
	// marker's policy tells when the instance has had a notification, and
	// newcomer is never seen by the instance before the outage.
	marker := createTenant(t, dsn, "pro")
	newcomer := createTenant(t, dsn, "pro")
	lenient := map[string]any{"policy": "lenient", "subject": "s"}
	strict := map[string]any{"policy": "strict", "subject": "s"}
	mark := map[string]any{"policy": "mark", "subject": "s"}
	markLimit := func() int64 {
		c := check(t, in, marker.LiveKey, mark)
		var ans checkAnswer
		c.json(t, &ans)
		if c.status != 200 || len(ans.Items) != 1 {
			t.Fatalf("marker's check: %d %s", c.status, c.body)
		}
		return ans.Items[0].Limit
	}
	putPolicy(t, in, marker.LiveKey, "mark", map[string]any{"limit": 1000, "window": "1h"})
	if n := markLimit(); n != 1000 {
		t.Fatalf("marker's limit %d, want 1000", n)
	}

	putPolicy(t, in, nt.LiveKey, "lenient", map[string]any{"limit": 1000, "window": "1h", "fail_mode": "open"})
	putPolicy(t, in, nt.LiveKey, "strict", map[string]any{"limit": 1000, "window": "1h", "fail_mode": "closed"})
	c := check(t, in, nt.LiveKey, lenient, strict)
	var ans checkAnswer
	c.json(t, &ans)
	if c.status != 200 || !ans.Allowed {
		t.Fatalf("before the outage: %d %s", c.status, c.body)
	}
	// Another instance (here: SQL by hand) changes the tenant's policies
	// just after that check. Notifications arrive in order: once the
	// instance has read the marker's change, it has had this one.
	sql(t, dsn, `UPDATE policies SET "limit" = 900 WHERE tenant_id = $1 AND name = 'strict'`, nt.TenantID)
	sql(t, dsn, `UPDATE policies SET "limit" = 999 WHERE tenant_id = $1 AND name = 'mark'`, marker.TenantID)
	eventually.True(t, 10*time.Second, "the marker's change read by the instance", func() bool { return markLimit() == 999 })

	proxy.Cut()
	for i := range 20 {
		for _, item := range []map[string]any{lenient, strict} {
			began := time.Now()
			c := check(t, in, nt.LiveKey, item)
			if took := time.Since(began); took > time.Second {
				t.Errorf("check %d of %s during the outage took %s", i, item["policy"], took)
			}
			var ans checkAnswer
			c.json(t, &ans)
			wantAllowed := item["policy"] == "lenient"
			if c.status != 200 || ans.Allowed != wantAllowed || !ans.Degraded || c.header.Get("X-RateLimit-Degraded") != "true" {
				t.Fatalf("check %d of %s (fail mode %s) during the outage: %d %s, want 200, allowed %v, degraded",
					i, item["policy"], map[bool]string{true: "open", false: "closed"}[wantAllowed], c.status, c.body, wantAllowed)
			}
		}
	}
	// A tenant this instance has never seen: its key cannot be verified.
	c = check(t, in, newcomer.LiveKey, lenient)
	if p := problemOf(t, c, 503); !strings.HasSuffix(p["type"].(string), "/unavailable") || c.header.Get("Retry-After") != "1" {
		t.Errorf("a tenant never seen, during the outage: %s, Retry-After %q; want type …/unavailable, Retry-After 1", c.body, c.header.Get("Retry-After"))
	}
	// A change the instance cannot hear of while it is cut off; the marker's
	// Set, read just before the outage, is still within its TTL.
	sql(t, dsn, `UPDATE policies SET "limit" = 5 WHERE tenant_id = $1 AND name = 'mark'`, marker.TenantID)

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	took := eventually.True(t, 10*time.Second, "exact answers again", func() bool {
		c := check(t, in, nt.LiveKey, strict)
		var ans checkAnswer
		c.json(t, &ans)
		return c.status == 200 && ans.Allowed && !ans.Degraded && len(ans.Items) == 1 && ans.Items[0].Limit == 900
	})
	t.Logf("exact answers %s after the outage", took)
	took = eventually.True(t, 10*time.Second, "the change made during the outage read", func() bool { return markLimit() == 5 })
	t.Logf("the change made during the outage read %s after it", took)
	if c := do(t, "GET", in.base+"/v1/usage", newcomer.LiveKey, nil); c.status != 200 {
		t.Errorf("the newcomer after the outage: %d %s", c.status, c.body)
	}
}
