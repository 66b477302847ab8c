package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func client(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNew(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var url, first string
	t.Run("set and get", func(t *testing.T) {
		url, first = redistest.New(t)
		c := client(t, url)
		if err := c.Set(ctx, first+"k", "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		got, err := c.Get(ctx, first+"k").Result()
		if err != nil || got != "v" {
			t.Fatalf("GET = %q, %v; want \"v\", nil", got, err)
		}
	})

	_, second := redistest.New(t)
	if first == "" || first == second {
		t.Errorf("two New calls gave prefixes %q and %q, want two different", first, second)
	}
	n, err := client(t, url).Exists(ctx, first+"k").Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	if n != 0 {
		t.Errorf("key %sk still exists after its test ended", first)
	}
}

// TestStartCluster starts a cluster, writes through a cluster client, moves
// a slot with its keys, kills a master and sees its replica take over, then
// restarts the node: the cluster is whole again.
func TestStartCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	c := redistest.StartCluster(t)
	t.Logf("cluster up in %s: %s", time.Since(start).Round(time.Millisecond), c.URL())
	if !strings.HasPrefix(c.URL(), "redis+cluster://127.0.0.1:") || strings.Count(c.URL(), "addr=") != 5 {
		t.Errorf("URL %s: want redis+cluster:// naming six nodes", c.URL())
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("masters %v, want 3", masters)
	}
	cc := c.Client(t)
	for i := range 20 {
		if err := cc.Set(ctx, fmt.Sprintf("{t}:k%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	}
	slot := c.Slot(t, "{t}:k0")
	from := c.MasterOf(t, slot)
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	if n := c.MoveSlot(t, slot, to, 3, nil); n != 20 {
		t.Errorf("moved %d keys, want 20", n)
	}
	if got := c.MasterOf(t, slot); got != to {
		t.Errorf("slot %d on %s after the move, want %s", slot, got, to)
	}
	if v, err := cc.Get(ctx, "{t}:k7").Result(); err != nil || v != "7" {
		t.Errorf("GET after the move: %q, %v", v, err)
	}

	// Replication is asynchronous: wait until a replica holds the moved
	// keys, or the failover below would rightly lose them.
	nc := redis.NewClient(&redis.Options{Addr: to})
	defer nc.Close()
	if n, err := nc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT for a replica of %s: %d, %v", to, n, err)
	}
	c.Kill(t, to)
	took := eventually.True(t, 30*time.Second, "failover of "+to, func() bool { return c.MasterOf(t, slot) != to })
	t.Logf("replica promoted %s after the kill", took.Round(time.Millisecond))
	c.Restart(t, to)
	c.WaitHealthy(t)
	if v, err := cc.Get(ctx, "{t}:k7").Result(); err != nil || v != "7" {
		t.Errorf("GET after the failover: %q, %v", v, err)
	}
}
