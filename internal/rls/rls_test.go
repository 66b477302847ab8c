package rls_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

const (
	over = rlsv3.RateLimitResponse_OVER_LIMIT
	ok   = rlsv3.RateLimitResponse_OK
)

// TestNativePolicyPerClient: in a domain without a configuration, a
// descriptor ("policy", NAME) + the client's address checks the tenant's
// policy NAME per address; every field of the answer says so, and a
// refusal carries Retry-After.
func TestNativePolicyPerClient(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "per-client", 3, time.Minute)
	for i := range 4 {
		res := in.must(t, acme.Live, "edge", desc("policy", "per-client", "remote_address", "203.0.113.7"))
		want := ok
		if i == 3 {
			want = over
		}
		if res.OverallCode != want || len(res.Statuses) != 1 || res.Statuses[0].Code != want {
			t.Fatalf("call %d: %v, want overall and status %v", i+1, res, want)
		}
		st := res.Statuses[0]
		if st.CurrentLimit.GetName() != "per-client" || st.CurrentLimit.GetRequestsPerUnit() != 3 ||
			st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("call %d: current_limit %v, want per-client 3 a minute", i+1, st.CurrentLimit)
		}
		if left := max(0, 2-i); st.LimitRemaining != uint32(left) {
			t.Errorf("call %d: limit_remaining %d, want %d", i+1, st.LimitRemaining, left)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("call %d: duration_until_reset %s, want within the minute", i+1, d)
		}
		if p := header(res, "ratelimit-policy"); p != `"per-client";q=3;w=60` {
			t.Errorf("call %d: ratelimit-policy %q", i+1, p)
		}
		if h := header(res, "ratelimit"); !strings.HasPrefix(h, `"per-client";r=`) {
			t.Errorf("call %d: ratelimit %q", i+1, h)
		}
		if retry := header(res, "retry-after"); (retry != "") != (i == 3) {
			t.Errorf("call %d: retry-after %q", i+1, retry)
		}
	}
	// Another address has its own counter.
	if res := in.must(t, acme.Live, "edge", desc("policy", "per-client", "remote_address", "203.0.113.8")); res.OverallCode != ok {
		t.Errorf("another address: %v, want OK", res.OverallCode)
	}
}

// TestAllOrNothing: a request refused by one descriptor counts nothing
// for the others (envoyproxy/ratelimit counts them all).
func TestAllOrNothing(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "wide", 5, time.Minute)
	putPolicy(t, in.app, acme.Tenant.ID, "narrow", 1, time.Minute)
	both := []*ratelimitv3.RateLimitDescriptor{desc("policy", "wide", "user", "u1"), desc("policy", "narrow", "user", "u1")}
	if res := in.must(t, acme.Live, "edge", both...); res.OverallCode != ok {
		t.Fatalf("first: %v", res)
	}
	for range 3 {
		res := in.must(t, acme.Live, "edge", both...)
		if res.OverallCode != over || res.Statuses[1].Code != over {
			t.Fatalf("again: %v, want narrow over the limit", res)
		}
	}
	// A peek (hits_addend 0) of wide alone: one taken, not four.
	ctx := as(t.Context(), acme.Live)
	res, err := in.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: desc("policy", "wide", "user", "u1").Entries, HitsAddend: wrapperspb.UInt64(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Statuses[0].LimitRemaining; got != 4 {
		t.Errorf("wide after one admitted and three refused requests: %d left, want 4", got)
	}
}

// TestHitsAddend: the request's hits_addend is every descriptor's cost; a
// descriptor's own overrides it.
func TestHitsAddend(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "tokens", 100, time.Hour)
	ctx := as(t.Context(), acme.Live)
	res, err := in.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 30,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("policy", "tokens", "user", "a")}})
	if err != nil || res.Statuses[0].LimitRemaining != 70 {
		t.Fatalf("hits_addend 30: %v %v, want 70 left", res, err)
	}
	d := desc("policy", "tokens", "user", "a")
	d.HitsAddend = wrapperspb.UInt64(71)
	res, err = in.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil || res.OverallCode != over || res.Statuses[0].LimitRemaining != 70 {
		t.Fatalf("descriptor hits_addend 71 over 70 left: %v %v, want OVER_LIMIT, 70 still left", res, err)
	}
}

// TestUnmatchedIsOK: a descriptor that names no policy is answered OK and
// counts nothing, as envoyproxy/ratelimit answers one no rule matches.
func TestUnmatchedIsOK(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	res := in.must(t, acme.Live, "edge", desc("header_match", "bots"), desc("remote_address", "198.51.100.1"))
	if res.OverallCode != ok || len(res.Statuses) != 2 || res.Statuses[0].CurrentLimit != nil {
		t.Fatalf("%v, want OK with two statuses and no limit", res)
	}
}

// TestKeys: no key, a malformed one and an unknown one are UNAUTHENTICATED;
// a test key counts in the sandbox, apart from live traffic.
func TestKeys(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "once", 1, time.Hour)
	_, err := in.rls.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("policy", "once", "u", "1")}})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no key: %v, want Unauthenticated", err)
	}
	for _, key := range []string{"tg_live_nope", "", acme.Live + "x"} {
		if _, err := in.ask(t, key, "edge", desc("policy", "once", "u", "1")); status.Code(err) != codes.Unauthenticated {
			t.Errorf("key %q: %v, want Unauthenticated", key, err)
		}
	}
	if res := in.must(t, acme.Test, "edge", desc("policy", "once", "u", "1")); res.OverallCode != ok {
		t.Fatalf("test key: %v", res)
	}
	if res := in.must(t, acme.Live, "edge", desc("policy", "once", "u", "1")); res.OverallCode != ok {
		t.Errorf("live key after the test key used the sandbox's counter: %v, want OK", res.OverallCode)
	}
}

// TestMalformed: every malformed request is answered with a status, never
// a panic, and the service answers well-formed ones after.
func TestMalformed(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "p", 10, time.Minute)
	many := make([]*ratelimitv3.RateLimitDescriptor, 10_000)
	for i := range many {
		many[i] = desc("policy", "p", "u", "1")
	}
	cases := []struct {
		name   string
		domain string
		ds     []*ratelimitv3.RateLimitDescriptor
		want   codes.Code
	}{
		{"empty domain", "", []*ratelimitv3.RateLimitDescriptor{desc("policy", "p", "u", "1")}, codes.InvalidArgument},
		{"no descriptor", "edge", nil, codes.InvalidArgument},
		{"no entry", "edge", []*ratelimitv3.RateLimitDescriptor{{}}, codes.InvalidArgument},
		{"10,000 descriptors", "edge", many, codes.InvalidArgument},
		{"a 1 MB value", "edge", []*ratelimitv3.RateLimitDescriptor{desc("policy", "p", "u", strings.Repeat("v", 1<<20))}, codes.ResourceExhausted},
		{"a 300-byte value", "edge", []*ratelimitv3.RateLimitDescriptor{desc("policy", "p", "u", strings.Repeat("v", 300))}, codes.InvalidArgument},
		{"an unknown policy", "edge", []*ratelimitv3.RateLimitDescriptor{desc("policy", "nope", "u", "1")}, codes.InvalidArgument},
		{"no subject", "edge", []*ratelimitv3.RateLimitDescriptor{desc("header", "x"), desc("policy", "p")}, codes.InvalidArgument},
		{"an own limit", "edge", []*ratelimitv3.RateLimitDescriptor{{Entries: desc("policy", "p", "u", "1").Entries,
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}}}, codes.InvalidArgument},
	}
	for _, c := range cases {
		_, err := in.ask(t, acme.Live, c.domain, c.ds...)
		if status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if c.name == "no subject" && !strings.Contains(status.Convert(err).Message(), "descriptors[1]") {
			t.Errorf("%s: %q, want it to name descriptors[1]", c.name, status.Convert(err).Message())
		}
	}
	if res := in.must(t, acme.Live, "edge", desc("policy", "p", "u", "1")); res.OverallCode != ok {
		t.Errorf("after the malformed requests: %v", res.OverallCode)
	}
}

// TestHealthAndReflection: gRPC's standard health checking answers
// SERVING for the server and the service, and reflection lists it.
func TestHealthAndReflection(t *testing.T) {
	in := start(t, pgtest.New(t))
	h := healthpb.NewHealthClient(in.cc)
	for _, svc := range []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName} {
		res, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v, want SERVING", svc, res, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(in.cc).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), rlsv3.RateLimitService_ServiceDesc.ServiceName) {
		t.Errorf("reflection lists %v, want the rate limit service", names)
	}
}

// TestExactAcrossInstances: 1,000 concurrent calls over two instances on
// one store admit exactly the limit.
func TestExactAcrossInstances(t *testing.T) {
	dsn := pgtest.New(t)
	// A store deadline no load on the test machine reaches: a degraded
	// answer is decided by the fail mode, and exactness is the store's.
	patient := func(c *app.Config) { c.CounterTimeout = 10 * time.Second }
	a, b := start(t, dsn, patient), start(t, dsn, patient)
	acme := newTenant(t, a.app, "enterprise")
	putPolicy(t, a.app, acme.Tenant.ID, "shared", 300, time.Hour)
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 1000 {
		in := a
		if i%2 == 1 {
			in = b
		}
		wg.Go(func() {
			res, err := in.ask(t, acme.Live, "edge", desc("policy", "shared", "route", "/search"))
			switch {
			case err != nil:
				t.Errorf("call: %v", err)
			case header(res, "x-tollgate-degraded") != "":
				t.Errorf("call degraded: %v", res)
			case res.OverallCode == ok:
				allowed.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 300 || refused.Load() != 700 {
		t.Errorf("1,000 calls over two instances: %d allowed, %d refused; want 300 and 700", allowed.Load(), refused.Load())
	}
}

// TestSlowStoreFailMode: with the counter store stalled, the answer comes
// within the store's deadline, decided by the policy's fail mode, and says
// it was.
func TestSlowStoreFailMode(t *testing.T) {
	redis, proxy := withRedis(t)
	in := start(t, pgtest.New(t), redis)
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "open", 1, time.Minute)
	putPolicy(t, in.app, acme.Tenant.ID, "closed", 1, time.Minute, func(p *policy.Policy) { p.FailMode = policy.FailClosed })
	in.must(t, acme.Live, "edge", desc("policy", "open", "u", "warm"))
	proxy.Stall()
	defer proxy.Restore()
	for _, c := range []struct {
		name string
		want rlsv3.RateLimitResponse_Code
	}{{"open", ok}, {"closed", over}} {
		began := time.Now()
		res := in.must(t, acme.Live, "edge", desc("policy", c.name, "u", "1"))
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("%s: answered after %s", c.name, took)
		}
		if res.OverallCode != c.want || header(res, "x-tollgate-degraded") != "true" {
			t.Errorf("fail mode %s with the store stalled: %v, degraded %q; want %v and degraded", c.name, res.OverallCode, header(res, "x-tollgate-degraded"), c.want)
		}
	}
}
