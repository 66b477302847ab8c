package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/counter"
	tgredis "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

func TestClusterConformance(t *testing.T) {
	countertest.Run(t, countertest.Backend{Shared: clusterShared, Breakable: clusterBreakable, Patient: true})
}

// clusterShared gives each call its own key prefix on the package's shared
// cluster.
func clusterShared(t *testing.T) func() counter.Store {
	u, prefix := redistest.NewCluster(t)
	return func() counter.Store {
		return open(t, tgredis.Config{URL: u, Prefix: prefix, Timeout: sharedTimeout})
	}
}

// clusterBreakable opens a store on the shared cluster whose connections to
// one master, the one serving requests without a Group (the suite's), pass
// through a faultnet proxy.
func clusterBreakable(t *testing.T, link func(upstream string) *faultnet.Proxy) counter.Store {
	u, prefix := redistest.NewCluster(t)
	master := masterForKey(t, u, "{~}")
	p := link(master)
	var d net.Dialer
	s, err := tgredis.NewWithDialer(tgredis.Config{URL: u, Prefix: prefix}, func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == master {
			addr = p.Addr()
		}
		return d.DialContext(ctx, network, addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clusterClient is a plain go-redis cluster client on a redis+cluster:// URL.
func clusterClient(t *testing.T, u string) *goredis.ClusterClient {
	t.Helper()
	opt, err := goredis.ParseClusterURL(strings.Replace(u, "redis+cluster://", "redis://", 1))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClusterClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// masterForKey is the address of the master serving key.
func masterForKey(t *testing.T, u, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := clusterClient(t, u).MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// TestClusterURL checks the URL forms New accepts and refuses.
func TestClusterURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, url, prefix string
		ok                bool
	}{
		{"one server", "redis://127.0.0.1:6379/0", "", true},
		{"cluster, one seed", "redis+cluster://127.0.0.1:7000", "", true},
		{"cluster, three seeds", "redis+cluster://u:p@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", "", true},
		{"cluster with TLS", "rediss+cluster://10.0.0.1:7000/0", "", true},
		{"cluster, database 1", "redis+cluster://127.0.0.1:7000/1", "", false},
		{"cluster, seed without port", "redis+cluster://127.0.0.1:7000?addr=10.0.0.2", "", false},
		{"cluster, unknown option", "redis+cluster://127.0.0.1:7000?shards=3", "", false},
		{"unknown scheme", "cluster://127.0.0.1:7000", "", false},
		// Several hosts as many tools write them: seeds like addr's.
		{"cluster, seeds after commas", "redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000", "", true},
		{"cluster, seeds after commas and in addr", "redis+cluster://10.0.0.1:7000,10.0.0.2:7000?addr=10.0.0.3:7000", "", true},
		{"cluster, IPv6 seeds after commas", "redis+cluster://u:p@[::1]:7000,[::1]:7001/0", "", true},
		{"cluster, a password with a comma", "redis+cluster://u:p,q@10.0.0.1:7000,10.0.0.2:7000", "", true},
		// Configurations that can never connect.
		{"one server, several hosts", "redis://u:p@10.0.0.1:7000,10.0.0.2:7000/0", "", false},
		{"cluster, names for ports", "redis+cluster://h1:p1,h2:p2,h3:p3", "", false},
		{"cluster, an empty seed", "redis+cluster://10.0.0.1:7000,,10.0.0.2:7000", "", false},
		{"cluster, a seed without port after a comma", "redis+cluster://10.0.0.1:7000,10.0.0.2", "", false},
		{"cluster, port out of range", "redis+cluster://10.0.0.1:70000", "", false},
		{"cluster, port 0", "redis+cluster://10.0.0.1:0", "", false},
		{"cluster, addr with a name for a port", "redis+cluster://10.0.0.1:7000?addr=h2:p2", "", false},
		{"one server, port out of range", "redis://10.0.0.1:65536/0", "", false},
		{"one server, no host", "redis://:p@/0", "", false},
		{"brace in the prefix", "redis+cluster://127.0.0.1:7000", "tg{x}:", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := tgredis.New(tgredis.Config{URL: c.url, Prefix: c.prefix})
			if (err == nil) != c.ok {
				t.Fatalf("New(%q): error %v, want ok=%v", c.url, err, c.ok)
			}
			if err == nil {
				s.Close()
			} else if strings.Contains(err.Error(), ":p@") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// TestVerifyMode points each kind of URL at each kind of server: a mismatch
// is ErrWrongMode naming the server, nobody answering is ErrUnavailable.
func TestVerifyMode(t *testing.T) {
	t.Parallel()
	single, _ := redistest.New(t)
	cluster, _ := redistest.NewCluster(t)
	singleAddr := redisAddr(t, single)
	clusterSeed := strings.SplitN(strings.TrimPrefix(cluster, "redis+cluster://"), "?", 2)[0]
	dead := bintest.FreePort(t)
	for _, c := range []struct {
		name, url string
		want      error
		names     string
	}{
		{"one server at one server", single, nil, ""},
		{"cluster at a cluster", cluster, nil, ""},
		{"cluster at a cluster, seeds after commas", strings.NewReplacer("?addr=", ",", "&addr=", ",").Replace(cluster), nil, ""},
		{"cluster at one server", "redis+cluster://" + singleAddr, tgredis.ErrWrongMode, singleAddr},
		{"one server at a cluster node", "redis://" + clusterSeed + "/0", tgredis.ErrWrongMode, clusterSeed},
		{"cluster, a dead seed then one server", "redis+cluster://" + dead + "?addr=" + singleAddr, tgredis.ErrWrongMode, singleAddr},
		{"nobody answers", "redis+cluster://" + dead, counter.ErrUnavailable, dead},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, tgredis.Config{URL: c.url})
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := s.Verify(ctx)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.names) {
				t.Fatalf("Verify: %v; want %v naming %s", err, c.want, c.names)
			}
		})
	}
}

// TestClusterOneSlotPerCheck checks where the keys go: every key of a
// request, with a Group or without, is in one hash slot, and the checks of
// many tenants spread over every master.
func TestClusterOneSlotPerCheck(t *testing.T) {
	t.Parallel()
	u, prefix := redistest.NewCluster(t)
	s := open(t, tgredis.Config{URL: u, Prefix: prefix, Timeout: sharedTimeout, Logger: testLogger(t)})
	defer s.Close()
	raw := clusterClient(t, u)
	ctx := context.Background()
	hour := limit.Every(time.Hour)
	items := []counter.Item{
		{Key: "ip:abc", Algorithm: limit.SlidingWindow, Limit: 100, Window: hour, Cost: 1},
		{Key: "quota:minute", Algorithm: limit.FixedWindow, Limit: 100, Window: limit.Every(time.Minute), Cost: 1},
		{Key: "policy:sign-in", Algorithm: limit.TokenBucket, Limit: 100, Window: hour, Cost: 1},
	}
	masters := map[string]bool{}
	for i := range 31 {
		group := fmt.Sprint("tenant-", i)
		if i == 30 {
			group = ""
		}
		if _, err := s.Check(ctx, counter.Request{Group: group, Ceilings: 2, Items: items}); err != nil {
			t.Fatalf("check of %q: %v", group, err)
		}
		tag := group
		if tag == "" {
			tag = "~"
		}
		slots := map[int64]bool{}
		for _, it := range items {
			key := prefix + "{" + tag + "}:" + it.Key
			if n, err := raw.Exists(ctx, key).Result(); err != nil || n != 1 {
				t.Fatalf("key %s: exists %d, %v", key, n, err)
			}
			slot, err := raw.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
		}
		if len(slots) != 1 {
			t.Errorf("group %q: keys in slots %v, want one", group, slots)
		}
		m, err := raw.MasterForKey(ctx, prefix+"{"+tag+"}:x")
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Errorf("31 tenants on masters %v, want all 3", masters)
	}
}

// storedCount reads the count of a fixed-window counter from the cluster.
func storedCount(t *testing.T, raw *goredis.ClusterClient, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := raw.Get(ctx, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return int64(unpackFloat(v, 1))
}

// TestResendPauseStaysBounded: a script a migrating slot keeps refusing is
// sent again after a pause of a millisecond or more and 8 at most, however
// long it has been refused (its deadline, not the pause, ends the tries): a
// pause that reached zero or below would send it again at once, in a loop.
func TestResendPauseStaysBounded(t *testing.T) {
	t.Parallel()
	last := time.Duration(0)
	for n := range 10_000 {
		p := tgredis.ResendPause(n)
		if p < time.Millisecond || p > 8*time.Millisecond || p < last {
			t.Fatalf("pause before resend %d: %v (the one before: %v), want 1 to 8 ms, never shorter than the one before", n, p, last)
		}
		last = p
	}
}

// TestClusterReshardExact moves a busy tenant's slot from master to master
// and back, key by key as redis-cli --cluster reshard does, while sixteen
// goroutines check its counters (two-key checks, which the moving slot
// refuses with TRYAGAIN while their keys are split between the nodes, and
// one-key checks at a tight limit): no check fails, every answer is exact,
// and every stored count equals the admissions answered, so nothing was
// lost or counted twice.
func TestClusterReshardExact(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	const prefix = "reshard:"
	s := open(t, tgredis.Config{URL: c.URL(), Prefix: prefix, Timeout: 5 * time.Second, Logger: testLogger(t)})
	defer s.Close()
	raw := c.Client(t)
	ctx := context.Background()
	const group, subjects, tightLimit = "hot", 200, 100
	slot := c.Slot(t, "{"+group+"}")
	home := c.MasterOf(t, slot)
	var away string
	for _, m := range c.Masters(t) {
		if m != home {
			away = m
			break
		}
	}

	now := time.Now()
	hour := limit.Every(time.Hour)
	quota := counter.Item{Key: "quota", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: hour, Cost: 1}
	tight := counter.Item{Key: "tight", Algorithm: limit.FixedWindow, Limit: tightLimit, Window: hour, Cost: 1}
	subject := func(i int) counter.Item {
		return counter.Item{Key: fmt.Sprint("subject:", i), Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: hour, Cost: 1}
	}
	var quotaAdmitted, tightAdmitted, tightTried, failed atomic.Int64
	subjectAdmitted := make([]atomic.Int64, subjects)
	checkSubject := func(i int) {
		res, err := s.Check(ctx, counter.Request{Group: group, Ceilings: 1, Items: []counter.Item{quota, subject(i)}, Now: now})
		if err != nil {
			failed.Add(1)
			t.Errorf("check of subject %d: %v", i, err)
			return
		}
		if !res.Allowed {
			t.Errorf("subject %d refused under a limit never reached: %+v", i, res)
			return
		}
		quotaAdmitted.Add(1)
		subjectAdmitted[i].Add(1)
	}
	// Every key exists before the moves, so that they have keys to move.
	for i := range subjects {
		checkSubject(i)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 11))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if n%4 != 3 {
					checkSubject(r.IntN(subjects))
					continue
				}
				tightTried.Add(1)
				res, err := s.Check(ctx, counter.Request{Group: group, Items: []counter.Item{tight}, Now: now})
				if err != nil {
					failed.Add(1)
					t.Errorf("tight check: %v", err)
					continue
				}
				if res.Allowed {
					tightAdmitted.Add(1)
				}
			}
		})
	}
	// Back and forth, at least twice, until the tight counter has seen more
	// checks than its limit.
	moved, moves := 0, 0
	for ; moves < 4 || tightTried.Load() <= 2*tightLimit; moves++ {
		if moves == 40 {
			t.Fatalf("%d checks of the tight counter in %d moves: too slow to reach its limit", tightTried.Load(), moves)
		}
		to := away
		if moves%2 == 1 {
			to = home
		}
		moved += c.MoveSlot(t, slot, to, 1, func() { time.Sleep(time.Millisecond) })
	}
	close(stop)
	wg.Wait()

	if tightTried.Load() <= tightLimit {
		t.Fatalf("only %d checks of the tight counter: the test did not reach its limit of %d", tightTried.Load(), tightLimit)
	}
	if got := tightAdmitted.Load(); got != tightLimit {
		t.Errorf("tight counter: %d admitted of %d, want exactly %d", got, tightTried.Load(), tightLimit)
	}
	if got := storedCount(t, raw, prefix+"{hot}:tight"); got != tightLimit {
		t.Errorf("tight counter stored %d, want %d", got, tightLimit)
	}
	if got, want := storedCount(t, raw, prefix+"{hot}:quota"), quotaAdmitted.Load(); got != want {
		t.Errorf("quota stored %d, admitted %d", got, want)
	}
	for i := range subjects {
		if got, want := storedCount(t, raw, fmt.Sprint(prefix, "{hot}:subject:", i)), subjectAdmitted[i].Load(); got != want {
			t.Errorf("subject %d stored %d, admitted %d", i, got, want)
		}
	}
	if s.Resent() == 0 {
		t.Errorf("no script was refused and sent again: the moves did not meet the traffic")
	}
	t.Logf("%d checks during %d moves of slot %d (%d keys migrated): %d failed, %d sent again after TRYAGAIN/ASK/MOVED",
		quotaAdmitted.Load()+tightTried.Load(), moves, slot, moved, failed.Load(), s.Resent())
}

// TestClusterMasterDown takes a master away mid-traffic, killed or paused:
// the checks of the tenant whose slot it served fail with ErrUnavailable
// within two deadlines until its replica is promoted, then are exact again
// without a restart; the tenants on the other shards never fail and stay
// exact throughout.
func TestClusterMasterDown(t *testing.T) {
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			masterDown(t, how)
		})
	}
}

func masterDown(t *testing.T, how string) {
	c := redistest.StartCluster(t)
	// Deadlines a loaded test machine does not miss on a healthy shard.
	const timeout = 500 * time.Millisecond
	const slack = 300 * time.Millisecond
	const prefix = "down:"
	s := open(t, tgredis.Config{URL: c.URL(), Prefix: prefix, Timeout: timeout, Logger: testLogger(t)})
	defer s.Close()
	raw := c.Client(t)

	// One tenant per master.
	masters := c.Masters(t)
	tenantOf := map[string]string{}
	for i := 0; len(tenantOf) < len(masters); i++ {
		group := fmt.Sprint("tenant-", i)
		if m := c.MasterOf(t, c.Slot(t, "{"+group+"}")); tenantOf[m] == "" {
			tenantOf[m] = group
		}
	}
	victim := masters[0]
	down := tenantOf[victim]

	type tally struct {
		admitted, failed atomic.Int64
		lastFail         atomic.Int64 // UnixNano
	}
	tallies := map[string]*tally{}
	for _, g := range tenantOf {
		tallies[g] = &tally{}
	}
	now := time.Now()
	hour := limit.Every(time.Hour)
	quota := counter.Item{Key: "quota", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: hour, Cost: 1}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, group := range tenantOf {
		tl := tallies[group]
		for w := range 3 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 3))
				for {
					select {
					case <-stop:
						return
					default:
					}
					subject := counter.Item{Key: fmt.Sprint("subject:", r.IntN(20)), Algorithm: limit.TokenBucket, Limit: limit.MaxLimit, Window: hour, Cost: 1}
					start := time.Now()
					res, err := s.Check(context.Background(), counter.Request{Group: group, Ceilings: 1, Items: []counter.Item{quota, subject}, Now: now})
					took := time.Since(start)
					switch {
					case err == nil && res.Allowed:
						tl.admitted.Add(1)
					case err == nil:
						t.Errorf("%s: refused under a limit never reached: %+v", group, res)
					case group != down:
						t.Errorf("%s, on a healthy shard, failed: %v", group, err)
					case !errors.Is(err, counter.ErrUnavailable):
						t.Errorf("%s: got %v, want ErrUnavailable", group, err)
					case took > 2*timeout+slack:
						// A silent master is given up on after two
						// deadlines (late): one may be a starved CPU.
						t.Errorf("%s: failed after %s, want within %s", group, took, 2*timeout+slack)
					default:
						tl.failed.Add(1)
						tl.lastFail.Store(time.Now().UnixNano())
					}
					if err != nil {
						// A failing tenant's callers back off a little, as
						// the gate's breaker makes them.
						time.Sleep(5 * time.Millisecond)
					}
				}
			})
		}
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	eventually.True(t, 10*time.Second, "traffic on every tenant", func() bool {
		for _, tl := range tallies {
			if tl.admitted.Load() < 100 {
				return false
			}
		}
		return true
	})

	at := time.Now()
	switch how {
	case "killed":
		c.Kill(t, victim)
	case "paused":
		c.Pause(t, victim)
		defer c.Resume(t, victim)
	}
	dt := tallies[down]
	// Recovered: the tenant's checks failed, then a second passed without a
	// failure while they were admitted again.
	var mark int64
	eventually.True(t, 30*time.Second, "checks of "+down+" answered again", func() bool {
		last := dt.lastFail.Load()
		if last == 0 {
			return false
		}
		if time.Since(time.Unix(0, last)) < time.Second {
			mark = dt.admitted.Load()
			return false
		}
		return dt.admitted.Load() > mark
	})
	close(stop)
	wg.Wait()
	recovery := time.Unix(0, dt.lastFail.Load()).Sub(at)
	t.Logf("master %s: %d checks of %s failed (ErrUnavailable, each within %s); answered again %s after the master was %s",
		how, dt.failed.Load(), down, timeout+slack, recovery.Round(time.Millisecond), how)

	for group, tl := range tallies {
		stored := storedCount(t, raw, prefix+"{"+group+"}:quota")
		if group == down {
			// Replication is asynchronous: the promoted replica may miss the
			// last writes the old master acknowledged, and a check that
			// failed may have been applied.
			t.Logf("%s (failed over): %d admitted, %d stored", group, tl.admitted.Load(), stored)
			continue
		}
		if tl.failed.Load() != 0 {
			t.Errorf("%s on a healthy shard: %d failed", group, tl.failed.Load())
		}
		if stored != tl.admitted.Load() {
			t.Errorf("%s on a healthy shard: %d admitted, %d stored", group, tl.admitted.Load(), stored)
		}
	}

	// Exact again on the promoted replica: 200 checks at a limit of 50.
	after := counter.Item{Key: "after", Algorithm: limit.FixedWindow, Limit: 50, Window: hour, Cost: 1}
	var admitted atomic.Int64
	var after200 sync.WaitGroup
	for range 200 {
		after200.Go(func() {
			res, err := s.Check(context.Background(), counter.Request{Group: down, Items: []counter.Item{after}, Now: now})
			if err != nil {
				t.Errorf("after the failover: %v", err)
				return
			}
			if res.Allowed {
				admitted.Add(1)
			}
		})
	}
	after200.Wait()
	if got := admitted.Load(); got != 50 {
		t.Errorf("after the failover, 200 checks at a limit of 50: %d admitted", got)
	}
	if got := storedCount(t, raw, prefix+"{"+down+"}:after"); got != 50 {
		t.Errorf("after the failover: stored %d, want 50", got)
	}
}

// TestClusterDownSlot unassigns a tenant's slot: Redis refuses its checks
// with CLUSTERDOWN, which the store returns as ErrUnavailable at once rather
// than waiting out its deadline; once the slot is served again, its checks
// are answered without a restart.
func TestClusterDownSlot(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	const timeout = 2 * time.Second
	s := open(t, tgredis.Config{URL: c.URL(), Prefix: "down-slot:", Timeout: timeout, Logger: testLogger(t)})
	defer s.Close()
	ctx := context.Background()
	it := counter.Item{Key: "k", Algorithm: limit.FixedWindow, Limit: limit.MaxLimit, Window: limit.Every(time.Hour), Cost: 1}
	req := counter.Request{Group: "unserved", Items: []counter.Item{it}}
	if _, err := s.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	slot := c.Slot(t, "{unserved}")
	owner := c.MasterOf(t, slot)
	masters := c.Masters(t)
	for _, m := range masters {
		mc := goredis.NewClient(&goredis.Options{Addr: m})
		err := mc.ClusterDelSlots(ctx, slot).Err()
		mc.Close()
		if err != nil && m == owner {
			t.Fatalf("CLUSTER DELSLOTS %d on %s: %v", slot, m, err)
		}
	}
	for i := range 5 {
		start := time.Now()
		_, err := s.Check(ctx, req)
		if took := time.Since(start); !errors.Is(err, counter.ErrUnavailable) || !strings.Contains(err.Error(), "CLUSTERDOWN") || took > timeout/4 {
			t.Fatalf("check %d of an unserved slot: %v after %s; want CLUSTERDOWN as ErrUnavailable at once", i, err, took)
		}
	}
	oc := goredis.NewClient(&goredis.Options{Addr: owner})
	defer oc.Close()
	if err := oc.ClusterAddSlots(ctx, slot).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTS: %v", err)
	}
	eventually.True(t, 10*time.Second, "checks answered once the slot is served again", func() bool {
		_, err := s.Check(ctx, req)
		return err == nil
	})
}
