package rls_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/rls"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

const edgeConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit:
          unit: hour
          requests_per_unit: 1
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: free
    rate_limit:
      unlimited: true
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

// withDomains serves in's gate through a rate limit service whose tenants
// have the configurations in confs (by domain), as uploaded ones are.
func withDomains(t *testing.T, in *instance, confs ...string) rlsv3.RateLimitServiceClient {
	t.Helper()
	byDomain := map[string]*envoyconf.Config{}
	for _, src := range confs {
		c, err := envoyconf.Parse("edge", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		byDomain[c.Domain] = c
	}
	return withDomainsFunc(t, in, func(_ context.Context, _ string, domain string) (*envoyconf.Config, error) {
		return byDomain[domain], nil
	})
}

// withDomainsFunc serves in's gate through a rate limit service whose
// tenants' configurations domains returns.
func withDomainsFunc(t *testing.T, in *instance, domains rls.Domains) rlsv3.RateLimitServiceClient {
	t.Helper()
	svc := rls.New(rls.Config{Gate: in.app.Parts.Gate, Domains: domains})
	srv := rls.NewServer(svc, rls.ServerConfig{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// TestConfiguredDomain: a domain with an uploaded configuration is matched
// as envoyproxy/ratelimit matches it: a key without value counts each
// value apart, nested descriptors, requests_per_unit 0 refuses (and,
// Tollgate's promise, counts nothing else of the request), unlimited is OK
// with MaxUint32 left, shadow mode answers OK past the limit.
func TestConfiguredDomain(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	client := withDomains(t, in, edgeConfig)
	ask := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(as(t.Context(), acme.Live), 10*time.Second)
		defer cancel()
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	codes := func(res *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
		var cs []rlsv3.RateLimitResponse_Code
		for _, s := range res.Statuses {
			cs = append(cs, s.Code)
		}
		return cs
	}
	// Each address apart: 2 a minute.
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		if res := ask(desc("remote_address", "10.0.0.1")); res.OverallCode != want {
			t.Errorf("10.0.0.1 call %d: %v, want %v", i+1, res.OverallCode, want)
		}
	}
	if res := ask(desc("remote_address", "10.0.0.2")); res.OverallCode != ok {
		t.Errorf("10.0.0.2: %v, want its own counter", res.OverallCode)
	}
	// Nested: /login per address, 1 an hour.
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
		res := ask(desc("path", "/login", "remote_address", "10.0.0.3"))
		if res.OverallCode != want {
			t.Errorf("/login call %d: %v, want %v", i+1, res.OverallCode, want)
		}
		if u := res.Statuses[0].CurrentLimit.GetUnit(); u != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("/login: unit %v, want HOUR", u)
		}
	}
	// A deny rule refuses the request, and the address beside it is not
	// counted.
	res := ask(desc("remote_address", "10.0.0.4"), desc("blocked", "yes"))
	if res.OverallCode != over || codes(res)[1] != over {
		t.Errorf("blocked: %v", codes(res))
	}
	for i := range 2 {
		if res := ask(desc("remote_address", "10.0.0.4")); res.OverallCode != ok {
			t.Errorf("10.0.0.4 call %d after a request the deny rule refused: %v, want OK (nothing counted)", i+1, res.OverallCode)
		}
	}
	// Unlimited.
	if res := ask(desc("free", "x")); res.OverallCode != ok || res.Statuses[0].LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited: %v", res)
	}
	// Shadow: past its limit, still OK.
	for i := range 3 {
		if res := ask(desc("trial", "t")); res.OverallCode != ok {
			t.Errorf("shadow call %d: %v, want OK", i+1, res.OverallCode)
		}
	}
	// No rule: OK, nothing counted.
	if res := ask(desc("unknown", "k")); res.OverallCode != ok || res.Statuses[0].CurrentLimit != nil {
		t.Errorf("unmatched: %v", res)
	}
}

// TestDomainsUnreadable: a tenant's files that cannot be read (the
// database down before they were ever loaded) answer UNAVAILABLE, which
// Envoy's failure_mode_deny decides, never INTERNAL.
func TestDomainsUnreadable(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	client := withDomainsFunc(t, in, func(context.Context, string, string) (*envoyconf.Config, error) {
		return nil, fmt.Errorf("load envoy domains of tenant: %w", policy.ErrUnavailable)
	})
	ctx, cancel := context.WithTimeout(as(t.Context(), acme.Live), 10*time.Second)
	defer cancel()
	_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("files unreadable: %v, want Unavailable", err)
	}
}
