package rls_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const pepper = "rls test pepper 0123456789abcdef"

// instance is one running Tollgate with its rate limit service.
type instance struct {
	app *app.App
	rls rlsv3.RateLimitServiceClient
	cc  *grpc.ClientConn
}

// start runs an instance on dsn (counters in store) and dials its rate
// limit service.
func start(t *testing.T, dsn string, edit ...func(*app.Config)) *instance {
	t.Helper()
	cfg := app.Config{Addr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", CounterStore: "postgres", Pepper: []byte(pepper),
		ShutdownTimeout: 5 * time.Second, CounterTimeout: 200 * time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	a, err := app.New(t.Context(), cfg, app.Deps{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &instance{app: a, rls: rlsv3.NewRateLimitServiceClient(cc), cc: cc}
}

// withRedis serves counters from Redis behind a proxy the test can stall.
func withRedis(t *testing.T) (func(*app.Config), *faultnet.Proxy) {
	u, _ := redistest.New(t)
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultnet.New(t, parsed.Host)
	parsed.Host = proxy.Addr()
	return func(c *app.Config) { c.CounterStore, c.RedisURL = "redis", parsed.String() }, proxy
}

// newTenant makes a tenant on plan with its keys.
func newTenant(t *testing.T, a *app.App, plan string) tenant.Created {
	t.Helper()
	c, err := tenant.Create(t.Context(), pgstore.NewTenants(a.Pool), "acme", plan)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// putPolicy stores a fixed-window policy of limit per window.
func putPolicy(t *testing.T, a *app.App, tenantID, name string, lim int64, window time.Duration, edit ...func(*policy.Policy)) {
	t.Helper()
	p := policy.Default(name)
	p.Limit, p.Window = lim, limit.Every(window)
	for _, e := range edit {
		e(&p)
	}
	if _, err := pgstore.NewPolicies(a.Pool).PutPolicy(t.Context(), tenantID, p); err != nil {
		t.Fatal(err)
	}
	a.Parts.Catalog.Invalidate(tenantID)
}

// as is ctx with key as the call's API key.
func as(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask calls ShouldRateLimit.
func (in *instance) ask(t *testing.T, key, domain string, ds ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(as(t.Context(), key), 10*time.Second)
	defer cancel()
	return in.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
}

// must is ask that fails the test on an error.
func (in *instance) must(t *testing.T, key, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	res, err := in.ask(t, key, domain, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return res
}

// header returns the value of response header name, or "".
func header(res *rlsv3.RateLimitResponse, name string) string {
	for _, h := range res.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}
