package blackbox

import (
	"context"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// onCluster is the environment of an instance whose counters are on c.
func onCluster(c *redistest.Cluster) []string {
	return []string{"TOLLGATE_COUNTER_STORE=redis", "REDIS_URL=" + c.URL()}
}

// TestClusterExactAcrossThreeInstances races checks at one subject through
// three instances whose counters are on one Redis Cluster: the policy admits
// exactly its limit, and the counters are in the cluster.
func TestClusterExactAcrossThreeInstances(t *testing.T) {
	dsn := pgtest.New(t)
	c := redistest.StartCluster(t)
	env := append(onCluster(c), patientStore)
	exactOverInstances(t, dsn, start(t, dsn, env...), start(t, dsn, env...), start(t, dsn, env...))
	keys := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range c.Masters(t) {
		mc := goredis.NewClient(&goredis.Options{Addr: m})
		size, err := mc.DBSize(ctx).Result()
		mc.Close()
		if err != nil {
			t.Fatal(err)
		}
		keys += int(size)
	}
	if keys == 0 {
		t.Fatalf("no key in the cluster after 200 checks")
	}
}

// TestRedisURLOfTheWrongModeStopsStartUp points REDIS_URL at a server of
// the other mode: serve stops at once with an error that says so.
func TestRedisURLOfTheWrongModeStopsStartUp(t *testing.T) {
	dsn := pgtest.New(t)
	single := strings.TrimSuffix(strings.TrimPrefix(redistest.StartServer(t), "redis://"), "/0")
	c := redistest.StartCluster(t)
	node := c.Masters(t)[0]
	for name, tc := range map[string]struct{ url, want string }{
		"a cluster URL at one server": {"redis+cluster://" + single,
			"REDIS_URL: the URL names a cluster (redis+cluster://) but " + single + " is not in cluster mode"},
		"a one-server URL at a cluster node": {"redis://" + node + "/0",
			"REDIS_URL: the URL names one server (redis://) but " + node + " is a Redis Cluster node"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "serve")
			cmd.Env = environ(dsn, "TOLLGATE_ADDR="+bintest.FreePort(t), "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL="+tc.url)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("serve still running after 30 s:\n%s", tail(string(out), 2000))
			}
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve: %v, output:\n%s\nwant an error containing %q", err, tail(string(out), 2000), tc.want)
			}
		})
	}
}

// TestClusterMasterDownDegradesOnlyItsTenants kills the master serving one
// tenant's slot under an instance on a Redis Cluster: that tenant's answers
// are degraded and follow each policy's fail mode until the master's replica
// is promoted, then are exact again without a restart; a tenant on another
// shard gets exact answers throughout.
func TestClusterMasterDownDegradesOnlyItsTenants(t *testing.T) {
	dsn := pgtest.New(t)
	c := redistest.StartCluster(t)
	in := start(t, dsn, append(onCluster(c), "TOLLGATE_COUNTER_TIMEOUT=500ms")...)
	// Two tenants on different shards; tenant ids are the hash tags.
	masterOf := func(nt newTenant) string { return c.MasterOf(t, c.Slot(t, "{"+nt.TenantID+"}")) }
	hit := createTenant(t, dsn, "pro")
	var spared newTenant
	for range 20 {
		if nt := createTenant(t, dsn, "pro"); masterOf(nt) != masterOf(hit) {
			spared = nt
			break
		}
	}
	if spared.TenantID == "" {
		t.Fatalf("20 tenants, all on the master of %s", hit.TenantID)
	}
	putPolicy(t, in, hit.LiveKey, "lenient", map[string]any{"limit": 1000, "window": "1h", "fail_mode": "open"})
	putPolicy(t, in, hit.LiveKey, "strict", map[string]any{"limit": 1000, "window": "1h", "fail_mode": "closed"})
	putPolicy(t, in, spared.LiveKey, "strict", map[string]any{"limit": 100000, "window": "1h", "fail_mode": "closed"})
	spare := func() checkAnswer {
		return checkOf(t, check(t, in, spared.LiveKey, map[string]any{"policy": "strict", "subject": "s"}))
	}
	checkOf(t, check(t, in, hit.LiveKey, map[string]any{"policy": "strict", "subject": "s"}))
	spared1 := spare()

	c.Kill(t, masterOf(hit))
	killed := time.Now()
	degraded, spares := 0, 1
	for {
		var lenient, strict checkAnswer
		l := check(t, in, hit.LiveKey, map[string]any{"policy": "lenient", "subject": "s"})
		l.json(t, &lenient)
		s := check(t, in, hit.LiveKey, map[string]any{"policy": "strict", "subject": "s"})
		s.json(t, &strict)
		if l.status != 200 || s.status != 200 {
			t.Fatalf("answers during the failover: %d %s; %d %s", l.status, l.body, s.status, s.body)
		}
		// Each answer on its own: a degraded one follows its policy's fail
		// mode, one that is not is exact. The promotion (or the breaker's
		// probe) may land between the two checks of a pair.
		if lenient.Degraded && (!lenient.Allowed || l.header.Get("X-RateLimit-Degraded") != "true") {
			t.Fatalf("fail-open policy while its shard fails over: %s", l.body)
		}
		if strict.Degraded && strict.Allowed {
			t.Fatalf("fail-closed policy while its shard fails over: %s", s.body)
		}
		for _, a := range []checkAnswer{lenient, strict} {
			if !a.Degraded && (!a.Allowed || len(a.Items) != 1) {
				t.Fatalf("an answer not degraded during the failover is not exact: %+v", a)
			}
		}
		if strict.Degraded || lenient.Degraded {
			degraded++
		} else if degraded > 0 {
			break
		}
		// The spared tenant: exact, one less remaining each time.
		if a := spare(); !a.Allowed || a.Items[0].Remaining != spared1.Items[0].Remaining-int64(spares) {
			t.Fatalf("tenant on another shard: %+v after %d checks", a, spares)
		}
		spares++
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("answers of %s still degraded 30 s after its master was killed (%d degraded)", hit.TenantID, degraded)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d degraded answer pairs for the tenant on the killed master; exact again %s after the kill; %d exact answers for the tenant on another shard meanwhile",
		degraded, time.Since(killed).Round(time.Millisecond), spares)
	// The log reaches us through a pipe, read by a goroutine of its own: the
	// line may land a moment after the answer it was written before.
	eventually.True(t, 5*time.Second, "an L2_DEGRADED line in the log", func() bool {
		return strings.Contains(in.logs.String(), "L2_DEGRADED")
	})
}

// TestClusterSeedsAfterCommas names the cluster's seeds as many tools write
// several hosts, redis+cluster://h1:p1,h2:p2,h3:p3: the instance counts in
// the cluster, exact (20 checks at a limit of 5 admit 5, none degraded),
// where it once started on an address no dial could reach and failed open
// for ever.
func TestClusterSeedsAfterCommas(t *testing.T) {
	dsn := pgtest.New(t)
	c := redistest.StartCluster(t)
	commas := strings.NewReplacer("?addr=", ",", "&addr=", ",").Replace(c.URL())
	in := start(t, dsn, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL="+commas, patientStore)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "five", map[string]any{"limit": 5, "window": "1h", "fail_mode": "open"})
	admitted := 0
	for range 20 {
		var a checkAnswer
		r := check(t, in, nt.LiveKey, map[string]any{"policy": "five", "subject": "s"})
		r.json(t, &a)
		if r.status != 200 || a.Degraded {
			t.Fatalf("check on %s: %d %s", commas, r.status, r.body)
		}
		if a.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("20 checks at a limit of 5 on %s: %d admitted", commas, admitted)
	}
}

// TestRedisURLThatCanNeverConnectStopsStartUp: a REDIS_URL no dial can
// reach (names for ports, several hosts for one server, a port out of
// range) stops serve at once with an error naming REDIS_URL, instead of an
// instance whose every check is degraded.
func TestRedisURLThatCanNeverConnectStopsStartUp(t *testing.T) {
	dsn := pgtest.New(t)
	for _, u := range []string{
		"redis+cluster://h1:p1,h2:p2,h3:p3",
		"redis://127.0.0.1:7000,127.0.0.1:7001/0",
		"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:70000",
		"redis+sentinel://127.0.0.1:26379",
	} {
		t.Run(u, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "serve")
			cmd.Env = environ(dsn, "TOLLGATE_ADDR="+bintest.FreePort(t), "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL="+u)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("serve still running after 30 s:\n%s", tail(string(out), 2000))
			}
			if err == nil || !strings.Contains(string(out), "REDIS_URL") {
				t.Fatalf("serve: %v, output:\n%s\nwant an error naming REDIS_URL", err, tail(string(out), 2000))
			}
		})
	}
}

// TestReadyzWaitsForRedisAtStart starts an instance whose Redis is cut off:
// it serves (/healthz 200) but /readyz is 503, so that no orchestrator
// routes checks to an instance that can only fail open; once Redis answers
// it is ready, and stays ready when Redis fails again (degraded mode
// answers that), until it is restarted.
func TestReadyzWaitsForRedisAtStart(t *testing.T) {
	dsn := pgtest.New(t)
	u, err := url.Parse(redistest.StartServer(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultnet.New(t, u.Host)
	proxy.Cut()
	u.Host = proxy.Addr()
	base := bintest.Spawn(t, binary, environ(dsn, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL="+u.String())).URL
	status := func(path string) int {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually.True(t, 30*time.Second, "/healthz 200 with Redis cut off", func() bool { return status("/healthz") == http.StatusOK })
	for range 5 {
		if got := status("/readyz"); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz while Redis has never answered: %d, want 503", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "/readyz 200 once Redis answers", func() bool { return status("/readyz") == http.StatusOK })
	proxy.Cut()
	for range 5 {
		if got := status("/readyz"); got != http.StatusOK {
			t.Fatalf("/readyz when Redis fails after answering once: %d, want 200 (degraded mode answers)", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
