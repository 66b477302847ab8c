package rls_test

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/rls"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestChargeOnStreamDone: a request whose descriptors carry the
// tollgate.charge entry (Envoy's apply_on_stream_done rate limit, its
// hits_addend the response's usage) is counted past the limit: the tokens
// a response used are never left uncounted because the budget ran out
// while it streamed, and the next request is refused until the overdraft
// rolls out. The entry is no part of the subject; a request charged in
// part is refused; in an uploaded configuration the entry is left out of
// the match.
func TestChargeOnStreamDone(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "tokens", 100, time.Hour)
	ask := func(hits uint64, ds ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(as(t.Context(), acme.Live), 10*time.Second)
		defer cancel()
		return in.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: uint32(hits), Descriptors: ds})
	}
	if res, err := ask(1, desc("policy", "tokens", "user", "a")); err != nil || res.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("the request's check: %v %v", res, err)
	}
	// The stream is done: 150 tokens, with 99 left.
	res, err := ask(150, desc("policy", "tokens", "user", "a", rls.ChargeKey, "true"))
	if err != nil || res.OverallCode != over || res.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("charge of 150 with 99 left: %v %v, want counted, OVER_LIMIT, 0 left", res, err)
	}
	if res, err := ask(1, desc("policy", "tokens", "user", "a")); err != nil || res.OverallCode != over {
		t.Fatalf("the next request on the overdrawn budget: %v %v, want OVER_LIMIT", res, err)
	}
	// Another subject's budget is its own: the marker names nothing.
	if res, err := ask(30, desc("policy", "tokens", "user", "b", rls.ChargeKey, "true")); err != nil || res.OverallCode != ok || res.Statuses[0].LimitRemaining != 70 {
		t.Fatalf("charge of 30 of user b: %v %v", res, err)
	}
	if res, err := ask(1, desc("policy", "tokens", "user", "b")); err != nil || res.Statuses[0].LimitRemaining != 69 {
		t.Fatalf("user b after its charge: %v %v, want 69 left", res, err)
	}
	// Charged in part: refused, nothing counted.
	_, err = ask(5, desc("policy", "tokens", "user", "b", rls.ChargeKey, "true"), desc("policy", "tokens", "user", "c"))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a request charged in part: %v, want InvalidArgument", err)
	}

	// An uploaded configuration: the entry is left out of the match.
	client := withDomains(t, in, edgeConfig)
	ctx, cancel := context.WithTimeout(as(t.Context(), acme.Live), 10*time.Second)
	defer cancel()
	for i, want := range []rlsv3.RateLimitResponse_Code{over, over} {
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.9.0.1", rls.ChargeKey, "true")}})
		if err != nil || res.OverallCode != want || res.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("charge %d of 3 at 2 a minute: %v %v, want counted past the limit", i+1, res, err)
		}
	}
}
