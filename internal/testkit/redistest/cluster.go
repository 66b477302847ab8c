package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a throwaway Redis Cluster of three masters with one replica
// each, every node a redis-server of the machine's on loopback ports of its
// own, in a directory of its own, made into a cluster with redis-cli
// --cluster create. Nodes run with cluster-require-full-coverage no, so the
// shards whose master is up keep serving while another fails over, and with
// cluster-replica-validity-factor 0, so a replica always may take over.
// Its methods are safe for concurrent use.
type Cluster struct {
	dir         string
	nodeTimeout time.Duration
	nodes       []*node
}

// node is one redis-server of a Cluster.
type node struct {
	addr string
	bus  int
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *tailBuffer
}

// ClusterNodeTimeout is the cluster-node-timeout of the clusters
// StartCluster makes: a master silent this long is failed over, in about
// twice this time in all.
const ClusterNodeTimeout = time.Second

// sharedNodeTimeout is the shared cluster's: nothing fails it over on
// purpose, and a loaded machine must not either.
const sharedNodeTimeout = 5 * time.Second

var (
	clusterOnce sync.Once
	shared      *Cluster
	clusterErr  error
)

// NewCluster returns the cluster URL (redis+cluster://…) of a cluster that
// the tests of one package share, started at its first use and stopped by
// Main, and a key prefix of this test's own. Keys are left in place: the
// cluster goes when the package's tests end. Tests that break nodes use
// StartCluster instead. A test that cannot get a cluster fails.
func NewCluster(t testing.TB) (url, prefix string) {
	t.Helper()
	clusterOnce.Do(func() {
		shared, clusterErr = startCluster(sharedNodeTimeout)
	})
	if clusterErr != nil {
		t.Fatalf("redistest: no Redis Cluster for tests: %v", clusterErr)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return shared.URL(), "tgtest:" + hex.EncodeToString(b) + ":"
}

// StartCluster starts a cluster of this test's own, which it may break, and
// stops it and removes its directories when the test ends. It fails the test
// when the cluster does not come up.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster(ClusterNodeTimeout)
	if err != nil {
		t.Fatalf("redistest: start a Redis Cluster: %v", err)
	}
	t.Cleanup(c.stop)
	return c
}

func startCluster(nodeTimeout time.Duration) (*Cluster, error) {
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, errors.New("cluster: no redis-cli on PATH; install it (Debian/Ubuntu: apt-get install redis-tools, which redis-server brings)")
	}
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{dir: dir, nodeTimeout: nodeTimeout}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()
	for i := range 6 {
		n := &node{dir: filepath.Join(dir, strconv.Itoa(i))}
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		// A free port can be taken between choosing and binding it: try again.
		for attempt := 1; ; attempt++ {
			if n.addr, n.bus, err = freePorts(); err == nil {
				err = c.run(bin, n)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, errPortTaken) || attempt == 3 {
				return nil, err
			}
		}
		c.nodes = append(c.nodes, n)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cluster: redis-cli --cluster create: %v\n%s", err, tail(out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// freePorts returns a free loopback address and a free port for its cluster
// bus.
func freePorts() (string, int, error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", 0, fmt.Errorf("cluster: find a free port: %w", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), ports[1], nil
}

// run starts n's redis-server (again, after Kill: nodes.conf in its
// directory keeps its identity) and waits until it answers PING.
func (c *Cluster) run(bin string, n *node) error {
	_, port, _ := net.SplitHostPort(n.addr)
	args := []string{bin, "--port", port, "--bind", "127.0.0.1", "--dir", n.dir,
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-port", strconv.Itoa(n.bus),
		"--cluster-node-timeout", strconv.FormatInt(c.nodeTimeout.Milliseconds(), 10),
		"--cluster-require-full-coverage", "no",
		"--cluster-replica-validity-factor", "0",
		// A replica syncs at once, not after the default 5 s wait for others.
		"--repl-diskless-sync-delay", "0",
		"--save", "", "--appendonly", "no", "--daemonize", "no"}
	if deathSignal() {
		args = append([]string{"setpriv", "--pdeathsig", "KILL", "--"}, args...)
	}
	out := &tailBuffer{}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.out = cmd, exited, out
	n.mu.Unlock()
	deadline := time.After(15 * time.Second)
	for !ping(n.addr) {
		select {
		case <-exited:
			if strings.Contains(out.String(), "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("cluster: redis-server %s exited during start-up\n%s", n.addr, out.String())
		case <-deadline:
			n.kill()
			return fmt.Errorf("cluster: redis-server %s not answering PING after 15s\n%s", n.addr, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// kill stops n's process at once and waits for it to go.
func (n *node) kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// stop kills every node and removes the cluster's directories.
func (c *Cluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			n.mu.Lock()
			cmd := n.cmd
			n.mu.Unlock()
			if cmd != nil {
				// A paused node would not die of SIGKILL until continued.
				_ = cmd.Process.Signal(syscall.SIGCONT)
			}
			n.kill()
		})
	}
	wg.Wait()
	if err := os.RemoveAll(c.dir); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: remove cluster directory: %v\n", err)
	}
}

// URL is the cluster's URL for Tollgate: redis+cluster://node?addr=node…,
// naming every node as a seed.
func (c *Cluster) URL() string {
	var q []string
	for _, n := range c.nodes[1:] {
		q = append(q, "addr="+n.addr)
	}
	return "redis+cluster://" + c.nodes[0].addr + "?" + strings.Join(q, "&")
}

// Client returns a go-redis cluster client on c, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// nodeClient is a plain client on one node.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1})
}

// Slot is the hash slot of key.
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		nc := nodeClient(n.addr)
		slot, err := nc.ClusterKeySlot(context.Background(), key).Result()
		nc.Close()
		if err == nil {
			return int(slot)
		}
	}
	t.Fatalf("redistest: CLUSTER KEYSLOT %q: no node answers", key)
	return 0
}

// MasterOf is the address of the master that serves slot, as the first node
// that answers sees it.
func (c *Cluster) MasterOf(t testing.TB, slot int) string {
	t.Helper()
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		nc := nodeClient(n.addr)
		slots, err := nc.ClusterSlots(context.Background()).Result()
		nc.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
				return s.Nodes[0].Addr
			}
		}
	}
	t.Fatalf("redistest: no node knows the master of slot %d", slot)
	return ""
}

// Masters are the addresses of the masters, as the first node that answers
// sees them, ordered by the first slot each serves.
func (c *Cluster) Masters(t testing.TB) []string {
	t.Helper()
	var masters []string
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		nc := nodeClient(n.addr)
		slots, err := nc.ClusterSlots(context.Background()).Result()
		nc.Close()
		if err != nil {
			continue
		}
		slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
		for _, s := range slots {
			if len(s.Nodes) > 0 && !slices.Contains(masters, s.Nodes[0].Addr) {
				masters = append(masters, s.Nodes[0].Addr)
			}
		}
		return masters
	}
	t.Fatalf("redistest: no node answers CLUSTER SLOTS")
	return nil
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (c *Cluster) node(t testing.TB, addr string) *node {
	t.Helper()
	for _, n := range c.nodes {
		if n.addr == addr {
			return n
		}
	}
	t.Fatalf("redistest: no node %s in the cluster", addr)
	return nil
}

// Kill stops the node at addr at once (SIGKILL), as a crashed server.
func (c *Cluster) Kill(t testing.TB, addr string) {
	t.Helper()
	c.node(t, addr).kill()
}

// Pause stops the node at addr (SIGSTOP) without closing its connections:
// a server that hangs, or a network that drops its packets. Resume undoes
// it; the cluster's cleanup resumes paused nodes.
func (c *Cluster) Pause(t testing.TB, addr string) {
	t.Helper()
	c.node(t, addr).signal(t, syscall.SIGSTOP)
}

// Resume continues a paused node (SIGCONT).
func (c *Cluster) Resume(t testing.TB, addr string) {
	t.Helper()
	c.node(t, addr).signal(t, syscall.SIGCONT)
}

func (n *node) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		t.Fatalf("redistest: node %s never ran", n.addr)
	}
	// The pid is redis-server's: setpriv execs it.
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: signal %s: %v", n.addr, err)
	}
}

// Restart starts the node at addr again, after Kill, on its address and
// with its identity; it rejoins the cluster (as a replica of whichever node
// took its slots over).
func (c *Cluster) Restart(t testing.TB, addr string) {
	t.Helper()
	bin, err := findRedis()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.run(bin, c.node(t, addr)); err != nil {
		t.Fatalf("redistest: restart %s: %v", addr, err)
	}
}

// WaitHealthy waits until every running node reports cluster_state:ok, all
// agree on which master serves every slot, and every replica is in sync:
// the state StartCluster hands over, after Restart for instance.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) waitHealthy(ctx context.Context) error {
	var why string
	for {
		if why = c.unhealthy(ctx); why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %s", why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unhealthy says what keeps the cluster from being healthy, or "".
func (c *Cluster) unhealthy(ctx context.Context) string {
	var view string
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		nc := nodeClient(n.addr)
		info, err := nc.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = errors.New("cluster_state is not ok")
		}
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = nc.ClusterSlots(ctx).Result()
		}
		var repl string
		if err == nil {
			repl, err = nc.Info(ctx, "replication").Result()
		}
		nc.Close()
		if err != nil {
			return fmt.Sprintf("%s: %v", n.addr, err)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return n.addr + ": replica not in sync"
		}
		slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
		covered := 0
		var v strings.Builder
		for _, s := range slots {
			covered += s.End - s.Start + 1
			fmt.Fprintf(&v, "%d-%d:%s:%d ", s.Start, s.End, s.Nodes[0].Addr, len(s.Nodes))
		}
		if covered != 16384 {
			return fmt.Sprintf("%s: %d slots served", n.addr, covered)
		}
		if view == "" {
			view = v.String()
		} else if view != v.String() {
			return fmt.Sprintf("nodes disagree on the slots: %s vs %s", view, v.String())
		}
	}
	if view == "" {
		return "no node runs"
	}
	return ""
}

// MoveSlot migrates slot to the master at to while traffic may run, as
// redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on the
// source, then MIGRATE of perMigrate keys at a time (between is called after
// each), then SETSLOT NODE on both and on every other master. It returns the
// number of keys moved.
func (c *Cluster) MoveSlot(t testing.TB, slot int, to string, perMigrate int, between func()) int {
	t.Helper()
	ctx := context.Background()
	from := c.MasterOf(t, slot)
	if from == to {
		t.Fatalf("redistest: slot %d is already on %s", slot, to)
	}
	src, dst := nodeClient(from), nodeClient(to)
	defer src.Close()
	defer dst.Close()
	srcID, err := src.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("redistest: move slot %d from %s to %s: %s: %v", slot, from, to, what, err)
		}
	}
	must("SETSLOT IMPORTING", dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
	must("SETSLOT MIGRATING", src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
	host, port, _ := net.SplitHostPort(to)
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, perMigrate).Result()
		must("GETKEYSINSLOT", err)
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("MIGRATE", src.Do(ctx, args...).Err())
		moved += len(keys)
		if between != nil {
			between()
		}
	}
	// The target first, so that it serves the slot before the source stops.
	must("SETSLOT NODE on the target", dst.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	must("SETSLOT NODE on the source", src.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	for _, m := range c.Masters(t) {
		if m == from || m == to {
			continue
		}
		mc := nodeClient(m)
		err := mc.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err()
		mc.Close()
		must("SETSLOT NODE on "+m, err)
	}
	return moved
}

// tail is the last 4 KiB of b.
func tail(b []byte) string {
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
