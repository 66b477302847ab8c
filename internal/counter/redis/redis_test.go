package redis_test

import (
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	tgredis "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestConformance(t *testing.T) {
	countertest.Run(t, countertest.Backend{Shared: shared, Breakable: breakable, Patient: true})
}

// shared gives each call its own key prefix and opens stores with
// connections of their own on it. Their deadline is generous: these cases
// test answers under contention, and a loaded test machine (-race, two
// cores, other packages' tests) misses 50 ms now and then. Breakable stores
// keep the default deadline.
func shared(t *testing.T) func() counter.Store {
	u, prefix := redistest.New(t)
	return func() counter.Store {
		return open(t, tgredis.Config{URL: u, Prefix: prefix, Timeout: sharedTimeout})
	}
}

const sharedTimeout = 5 * time.Second

// breakable opens a store with the default deadline whose connections pass
// through a faultnet proxy.
func breakable(t *testing.T, link func(upstream string) *faultnet.Proxy) counter.Store {
	u, prefix := redistest.New(t)
	p := link(redisAddr(t, u))
	return open(t, tgredis.Config{URL: viaProxy(t, u, p), Prefix: prefix})
}

func open(t testing.TB, cfg tgredis.Config) *tgredis.Store {
	t.Helper()
	s, err := tgredis.New(cfg)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

// redisAddr returns the host:port of a redis:// URL.
func redisAddr(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	if u.Scheme != "redis" {
		t.Fatalf("redis url: scheme %q: only redis:// can go through a proxy", u.Scheme)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "6379")
	}
	return u.Host
}

// viaProxy returns raw with its address replaced by the proxy's.
func viaProxy(t testing.TB, raw string, p *faultnet.Proxy) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	u.Host = p.Addr()
	return u.String()
}
