// Package redistest gives tests a real Redis: the server at REDIS_URL, or,
// when that is unset, a throwaway redis-server started from the machine's
// binary. Each test gets a key prefix of its own, deleted when it ends. It
// also starts throwaway Redis Clusters (NewCluster, StartCluster) from the
// machine's redis-server and redis-cli. A test that cannot get a Redis
// fails; it never skips.
//
// Only tests import redistest.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testkit/solo"
)

var (
	once    sync.Once
	baseURL string
	initErr error
	stop    func()
)

// Main runs a package's tests and then stops any server or shared cluster
// redistest started. Call it from TestMain.
func Main(m *testing.M) {
	release, err := solo.Hold()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	release()
	if stop != nil {
		stop()
	}
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}

func server() (string, error) {
	once.Do(func() {
		if u := os.Getenv("REDIS_URL"); u != "" {
			baseURL = u
			return
		}
		baseURL, stop, initErr = startThrowaway()
	})
	return baseURL, initErr
}

// StartServer starts a throwaway redis-server of this test's own, whatever
// REDIS_URL says, and returns its URL; it stops when the test ends.
func StartServer(t testing.TB) string {
	t.Helper()
	u, stop, err := startThrowaway()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(stop)
	return u
}

// Server is a throwaway redis-server of one test that the test stops and
// starts again on the same address, as an operator restarts a store. It
// keeps nothing across a restart: it starts empty.
type Server struct {
	// URL is the server's, the same across restarts.
	URL  string
	bin  string
	port int
	stop func()
}

// StartStoppable starts a throwaway redis-server of this test's own, as
// StartServer does, that Stop and Start stop and start again; it stops
// when the test ends.
func StartStoppable(t testing.TB) *Server {
	t.Helper()
	bin, err := findRedis()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	u, stop, err := startThrowaway()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	_, port, _ := strings.Cut(opt.Addr, ":")
	s := &Server{URL: u, bin: bin, stop: stop}
	s.port, _ = strconv.Atoi(port)
	t.Cleanup(func() {
		if s.stop != nil {
			s.stop()
		}
	})
	return s
}

// Stop stops the server and returns once it is gone.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.stop == nil {
		t.Fatal("redistest: Stop of a stopped server")
	}
	s.stop()
	s.stop = nil
}

// Start starts the stopped server again, empty, on its address, and
// returns once it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.stop != nil {
		t.Fatal("redistest: Start of a running server")
	}
	_, stop, err := startRedis(s.bin, s.port)
	if err != nil {
		t.Fatalf("redistest: start %s again: %v", s.URL, err)
	}
	s.stop = stop
}

// New returns the URL of the Redis tests use and a key prefix that belongs to
// this test alone; keys under the prefix are deleted when the test ends.
func New(t testing.TB) (url, prefix string) {
	t.Helper()
	u, err := server()
	if err != nil {
		t.Fatalf("redistest: no Redis for tests: %v", err)
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("redistest: REDIS_URL: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix = "tgtest:" + hex.EncodeToString(b) + ":"
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		t.Fatalf("redistest: ping %s: %v", opt.Addr, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return u, prefix
}
