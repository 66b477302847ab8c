package blackbox

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// leaseAnswer is the answer of POST /v1/leases.
type leaseAnswer struct {
	Allowed      bool   `json:"allowed"`
	LeaseID      string `json:"lease_id"`
	ExpiresAt    string `json:"expires_at"`
	InFlight     int64  `json:"in_flight"`
	Limit        int64  `json:"limit"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Degraded     bool   `json:"degraded"`
}

// lease posts one lease request, which must be answered 200 and not
// degraded.
func (u apiUser) lease(policy, subject, ttl string) leaseAnswer {
	u.t.Helper()
	body := map[string]any{"policy": policy, "subject": subject}
	if ttl != "" {
		body["ttl"] = ttl
	}
	c := u.call("POST", "/v1/leases", body)
	if c.status != 200 {
		u.t.Fatalf("POST /v1/leases: %d %s", c.status, c.body)
	}
	var a leaseAnswer
	c.json(u.t, &a)
	if a.Degraded {
		u.t.Errorf("degraded lease answer: %s", c.body)
	}
	return a
}

// putLeasePolicy puts a concurrency policy of limit lim through u's
// instance and waits until each of others takes (and gives back) a lease of
// it for a subject of its own.
func (u apiUser) putLeasePolicy(name string, lim int, others ...*instance) {
	u.t.Helper()
	u.putPolicy(name, map[string]any{"limit": lim, "algorithm": "concurrency"})
	for _, in := range others {
		eventually.True(u.t, time.Second, "policy "+name+" applied on "+in.base, func() bool {
			c := u.on(in).call("POST", "/v1/leases", map[string]any{"policy": name, "subject": "probe", "ttl": "1s"})
			if c.status != 200 {
				return false
			}
			var a leaseAnswer
			c.json(u.t, &a)
			u.on(in).call("DELETE", "/v1/leases/"+a.LeaseID, nil)
			return true
		})
	}
}

// leaseStores are the counter stores the lease tests run on: the default
// (PostgreSQL), a Redis server and a Redis Cluster of the test's own.
func leaseStores(t *testing.T) map[string][]string {
	return map[string][]string{
		"postgres":      {patientStore},
		"redis":         {patientStore, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL=" + redistest.StartServer(t)},
		"redis-cluster": append(onCluster(redistest.StartCluster(t)), patientStore),
	}
}

// TestLeasesAcrossTwoInstances races acquirers of one subject's places
// through two instances, on each counter store: exactly the limit is
// taken; a release on either instance, a lease's expiry and a reset give
// places back; a renewal keeps one past its first expiry; test keys hold
// places of their own; a lease that is gone is 404 to renew and release.
func TestLeasesAcrossTwoInstances(t *testing.T) {
	// Parallel: most of its time is spent waiting for leases to expire.
	t.Parallel()
	for name, env := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			dsn := pgtest.New(t)
			a, b := start(t, dsn, env...), start(t, dsn, env...)
			nt := createTenant(t, dsn, "pro")
			u := apiUser{t: t, in: a, key: nt.LiveKey}
			u.putLeasePolicy("jobs", 5, b)

			var mu sync.Mutex
			var taken []string
			var refused atomic.Int64
			var wg sync.WaitGroup
			for i := range 60 {
				wg.Go(func() {
					c := u.on([]*instance{a, b}[i%2]).call("POST", "/v1/leases", map[string]any{"policy": "jobs", "subject": "s", "ttl": "1h"})
					var l leaseAnswer
					if err := json.Unmarshal(c.body, &l); c.status != 200 || err != nil || l.Degraded || l.InFlight > 5 || l.Limit != 5 {
						t.Errorf("acquire %d: %d %s", i, c.status, c.body)
						return
					}
					if l.Allowed {
						mu.Lock()
						taken = append(taken, l.LeaseID)
						mu.Unlock()
					} else if l.RetryAfterMS <= 0 || l.LeaseID != "" {
						t.Errorf("refused acquire %d: %s", i, c.body)
					} else {
						refused.Add(1)
					}
				})
			}
			wg.Wait()
			if len(taken) != 5 || refused.Load() != 55 {
				t.Fatalf("60 acquirers over two instances at a limit of 5: %d taken, %d refused", len(taken), refused.Load())
			}

			// A release on the other instance frees a place; a second is 404.
			for i, id := range taken[:2] {
				in := []*instance{b, a}[i]
				if c := u.on(in).call("DELETE", "/v1/leases/"+id, nil); c.status != 204 {
					t.Fatalf("release: %d %s", c.status, c.body)
				}
				if c := u.on(in).call("DELETE", "/v1/leases/"+id, nil); c.status != 404 {
					t.Fatalf("second release: %d %s", c.status, c.body)
				}
			}
			for i, want := range []bool{true, true, false} {
				if l := u.on([]*instance{a, b, a}[i]).lease("jobs", "s", "1h"); l.Allowed != want {
					t.Fatalf("acquire %d after two releases: %+v, want allowed %v", i+1, l, want)
				}
			}

			// Test keys have places of their own.
			if l := u.with(nt.TestKey).lease("jobs", "s", "1h"); !l.Allowed || l.InFlight != 1 {
				t.Fatalf("a test key's lease beside 5 live ones: %+v", l)
			}

			// A reset on one instance drops the subject's leases everywhere.
			if c := u.on(b).call("DELETE", "/v1/policies/jobs/subjects/s", nil); c.status != 204 {
				t.Fatalf("reset: %d %s", c.status, c.body)
			}
			if c := u.call("POST", "/v1/leases/"+taken[2]+"/renew", map[string]any{"ttl": "1m"}); c.status != 404 {
				t.Fatalf("renewing a lease a reset dropped: %d %s", c.status, c.body)
			}
			if l := u.lease("jobs", "s", "1h"); !l.Allowed || l.InFlight != 1 {
				t.Fatalf("after the reset: %+v", l)
			}

			// A lease that is neither renewed nor released frees its place at
			// its expiry, without any call.
			u.putLeasePolicy("short", 1, b)
			first := u.lease("short", "s", "1s")
			if !first.Allowed {
				t.Fatalf("first lease: %+v", first)
			}
			if l := u.on(b).lease("short", "s", "1s"); l.Allowed || l.RetryAfterMS > 1000 {
				t.Fatalf("second lease within the first's second: %+v", l)
			}
			eventually.True(t, 5*time.Second, "a place freed by an expiry", func() bool {
				return u.on(b).lease("short", "s", "1h").Allowed
			})
			if c := u.call("POST", "/v1/leases/"+first.LeaseID+"/renew", nil); c.status != 404 {
				t.Fatalf("renewing an expired lease: %d %s", c.status, c.body)
			}

			// A renewal keeps the place past the first expiry.
			u.putLeasePolicy("kept", 1, b)
			held := u.lease("kept", "s", "1s")
			c := u.on(b).call("POST", "/v1/leases/"+held.LeaseID+"/renew", map[string]any{"ttl": "1h"})
			if c.status != 200 {
				t.Fatalf("renew: %d %s", c.status, c.body)
			}
			firstExpiry, err := time.Parse(time.RFC3339, held.ExpiresAt)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(firstExpiry) + 200*time.Millisecond)
			if l := u.lease("kept", "s", "1s"); l.Allowed {
				t.Fatalf("past the first expiry of a renewed lease: %+v, want refused", l)
			}

			// Acquires are checks to the allotment, taken or refused by the
			// policy: the 60 of the race and the 3 after it at least; the
			// test key's is the sandbox's.
			u.waitUsage(5*time.Second, "acquires metered as checks", func(r usageReport) bool {
				return r.ChecksUsed >= 63 && r.SandboxUsed >= 1
			})
		})
	}
}

// TestResetAcrossInstances resets a subject's counter on one instance: the
// other counts it afresh, and the audit log names the key that did it.
func TestResetAcrossInstances(t *testing.T) {
	dsn := pgtest.New(t)
	a, b := start(t, dsn, patientStore), start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	u := apiUser{t: t, in: a, key: nt.LiveKey}
	u.putPolicyAll("login", map[string]any{"limit": 1, "window": "1h"}, b)
	item := map[string]any{"policy": "login", "subject": "alice@example.com"}
	if ans := checkOf(t, u.check("", item)); !ans.Allowed {
		t.Fatalf("first check: %+v", ans)
	}
	if ans := checkOf(t, u.on(b).check("", item)); ans.Allowed {
		t.Fatalf("second check at a limit of 1: %+v", ans)
	}
	if c := u.on(b).call("DELETE", "/v1/policies/login/subjects/alice@example.com", nil); c.status != 204 {
		t.Fatalf("reset: %d %s", c.status, c.body)
	}
	if ans := checkOf(t, u.check("", item)); !ans.Allowed || ans.Items[0].Remaining != 0 {
		t.Fatalf("after the reset: %+v, want allowed", ans)
	}
	if c := u.call("DELETE", "/v1/policies/nope/subjects/alice", nil); c.status != 404 {
		t.Errorf("reset of an unknown policy: %d %s", c.status, c.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var keyID, actor, detail string
	if err := conn.QueryRow(ctx, `SELECT id FROM api_keys WHERE tenant_id = $1 AND NOT test`, nt.TenantID).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	// Written by the next flush of the audit recorder.
	eventually.NoError(t, 10*time.Second, "the reset's audit entry", func() error {
		return conn.QueryRow(ctx, `SELECT actor, detail::text FROM audit WHERE tenant_id = $1 AND kind = 'counter_reset'`, nt.TenantID).Scan(&actor, &detail)
	})
	var d map[string]any
	if err := json.Unmarshal([]byte(detail), &d); err != nil || d["key_id"] != keyID || d["policy"] != "login" || d["sandbox"] != false {
		t.Errorf("audit entry by %s: %s, want key_id %s", actor, detail, keyID)
	}
	if d["subject_key"] == "" || strings.Contains(detail, "alice") {
		t.Errorf("audit entry holds the subject: %s", detail)
	}
}
