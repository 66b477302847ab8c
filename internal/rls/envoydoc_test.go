package rls_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// docBlock returns the fenced block under the marker <!-- test: name --> of
// docs/gateways.md.
func docBlock(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/gateways.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- test: "+name+" -->\n```")
	if !ok {
		t.Fatalf("docs/gateways.md has no block marked %q", name)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("docs/gateways.md: the block marked %q does not end", name)
	}
	return block
}

// TestEnvoyDocConfig: the Envoy configuration of docs/gateways.md, as it
// is written, is a valid Envoy bootstrap by Envoy's own generated types and
// validation rules; and the call its rate limit filter and route actions
// make (its domain, its metadata, the descriptor of generic_key and
// remote_address for one client) is answered by Tollgate as the doc says:
// the policy per-client, per client address. No Envoy binary runs here:
// what Envoy does with the configuration is taken from its documentation.
func TestEnvoyDocConfig(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "per-client", 2, time.Minute)

	src := strings.ReplaceAll(docBlock(t, "envoy"), "API_KEY", acme.Live)
	var tree any
	if err := yaml.Unmarshal([]byte(src), &tree); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("the doc's Envoy configuration is no bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("the doc's Envoy configuration breaks Envoy's validation rules: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := boot.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var filter ratelimitfilterv3.RateLimit
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&filter); err != nil {
		t.Fatal(err)
	}
	grpcSvc := filter.GetRateLimitService().GetGrpcService()
	if grpcSvc.GetEnvoyGrpc().GetClusterName() != "tollgate" {
		t.Fatalf("the filter calls %q", grpcSvc.GetEnvoyGrpc().GetClusterName())
	}
	// The call Envoy makes for a client at 198.51.100.7.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, m := range grpcSvc.GetInitialMetadata() {
		ctx = metadata.AppendToOutgoingContext(ctx, m.GetKey(), m.GetValue())
	}
	var d ratelimitv3.RateLimitDescriptor
	for _, a := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()[0].GetActions() {
		switch a := a.ActionSpecifier.(type) {
		case *routev3.RateLimit_Action_GenericKey_:
			key := a.GenericKey.GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: a.GenericKey.GetDescriptorValue()})
		case *routev3.RateLimit_Action_RemoteAddress_:
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: "198.51.100.7"})
		default:
			t.Fatalf("the doc's route uses action %T, which this test does not make", a)
		}
	}
	req := &rlsv3.RateLimitRequest{Domain: filter.GetDomain(), Descriptors: []*ratelimitv3.RateLimitDescriptor{&d}}
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		res, err := in.rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("the doc's call %d: %v", i+1, err)
		}
		if res.OverallCode != want || res.Statuses[0].CurrentLimit.GetName() != "per-client" {
			t.Errorf("the doc's call %d: %v, want %v of per-client", i+1, res, want)
		}
	}
}

// TestEnvoyDocStreamDone: the route of docs/gateways.md's budget counted
// after the response, as it is written, is a valid Envoy route by Envoy's
// own generated types and validation rules; and the two calls its rate
// limits make for one user (the request path's peek, the stream-done
// charge with the response's tokens as the descriptor's hits_addend) are
// answered as the doc says: the charge is counted past the limit, and the
// next request of that user is refused.
func TestEnvoyDocStreamDone(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "llm-tokens", 1000, time.Hour)

	var tree any
	if err := yaml.Unmarshal([]byte(docBlock(t, "envoy-stream-done")), &tree); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var route routev3.Route
	if err := protojson.Unmarshal(js, &route); err != nil {
		t.Fatalf("the doc's route is no Envoy route: %v", err)
	}
	if err := route.ValidateAll(); err != nil {
		t.Fatalf("the doc's route fails Envoy's validation: %v", err)
	}
	limits := route.GetRoute().GetRateLimits()
	if len(limits) != 2 || limits[0].GetApplyOnStreamDone() || !limits[1].GetApplyOnStreamDone() {
		t.Fatalf("the doc's route: %d rate limits, want a request-path one then a stream-done one", len(limits))
	}
	// The call Envoy makes for each rate limit, for user u1 whose response
	// used tokens.
	call := func(rl *routev3.RateLimit, tokens uint64) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			switch a := a.ActionSpecifier.(type) {
			case *routev3.RateLimit_Action_GenericKey_:
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: a.GenericKey.GetDescriptorKey(), Value: a.GenericKey.GetDescriptorValue()})
			case *routev3.RateLimit_Action_RequestHeaders_:
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: a.RequestHeaders.GetDescriptorKey(), Value: "u1"})
			default:
				t.Fatalf("the doc's route uses action %T, which this test does not make", a)
			}
		}
		switch h := rl.GetHitsAddend(); {
		case h.GetNumber() != nil:
			d.HitsAddend = h.GetNumber()
		case h.GetFormat() != "":
			d.HitsAddend = wrapperspb.UInt64(tokens)
		}
		ctx, cancel := context.WithTimeout(as(t.Context(), acme.Live), 10*time.Second)
		defer cancel()
		res, err := in.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("the doc's call: %v", err)
		}
		return res
	}
	// Two calls of 600 tokens each, admitted while anything was left: both
	// are counted, the second past the limit.
	for i := range 2 {
		if res := call(limits[0], 0); res.OverallCode != ok {
			t.Fatalf("request %d: %v, want OK", i+1, res)
		}
		call(limits[1], 600)
	}
	res := call(limits[0], 0)
	if res.OverallCode != over {
		t.Fatalf("after 1,200 tokens of 1,000: %v, want OVER_LIMIT", res)
	}
}
