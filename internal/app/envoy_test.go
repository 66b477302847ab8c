package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestEnvoyDomainsReachEveryInstance: a file uploaded to one instance's API
// is in that instance's EnvoyDomains at once, and in another instance's on
// the same database within the change notification's delay; so is its
// deletion.
func TestEnvoyDomainsReachEveryInstance(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.New(t)
	var apps [2]*app.App
	for i := range apps {
		a, err := app.New(t.Context(), config(), app.Deps{DSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Shutdown() })
		apps[i] = a
	}
	live, key, err := tenant.NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := pgstore.NewTenants(apps[0].Pool).CreateTenant(ctx, "Acme", tenant.PlanPro, key)
	if err != nil {
		t.Fatal(err)
	}
	// The second instance knows the tenant has no file before the upload.
	for _, a := range apps {
		if ds, err := a.EnvoyDomains().For(ctx, tn.ID); err != nil || ds.Len() != 0 {
			t.Fatalf("before the upload: %d domains, %v", ds.Len(), err)
		}
	}
	send := func(method, body string) {
		t.Helper()
		req := httptest.NewRequest(method, "/v1/envoy/domains/edge", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+live)
		req.Header.Set("Content-Type", "application/yaml")
		rec := httptest.NewRecorder()
		apps[0].Echo.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			t.Fatalf("%s: %d %s", method, rec.Code, rec.Body)
		}
	}
	has := func(a *app.App) bool {
		ds, err := a.EnvoyDomains().For(ctx, tn.ID)
		_, ok := ds.Lookup("edge")
		return err == nil && ok
	}
	send(http.MethodPut, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	if !has(apps[0]) {
		t.Error("the instance that took the upload does not serve it at once")
	}
	took := eventually.True(t, 10*time.Second, "the upload on the other instance", func() bool { return has(apps[1]) })
	t.Logf("the upload reached the other instance in %s", took)
	send(http.MethodDelete, "")
	if has(apps[0]) {
		t.Error("the instance that took the deletion still serves the file")
	}
	eventually.True(t, 10*time.Second, "the deletion on the other instance", func() bool { return !has(apps[1]) })
}

// TestUploadedFileDecidesTheRateLimitService: once a tenant uploads a file
// for a domain, Envoy's requests for that domain are matched by it (README
// Example 1's deny rule refuses 50.0.0.5, others count at 10 a second);
// another domain stays native.
func TestUploadedFileDecidesTheRateLimitService(t *testing.T) {
	cfg := config()
	cfg.GRPCAddr = "127.0.0.1:0"
	a, err := app.New(t.Context(), cfg, app.Deps{DSN: pgtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	live, key, err := tenant.NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.NewTenants(a.Pool).CreateTenant(context.Background(), "Acme", tenant.PlanPro, key); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPut, "/v1/envoy/domains/edge", strings.NewReader(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`))
	req.Header.Set("Authorization", "Bearer "+live)
	req.Header.Set("Content-Type", "application/yaml")
	rec := httptest.NewRecorder()
	a.Echo.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}

	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+live)
	ask := func(domain, address string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: address}}},
		}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s, %s): %v", domain, address, err)
		}
		return resp
	}
	if r := ask("edge", "50.0.0.5"); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("edge, the denied address: %v, want OVER_LIMIT", r.GetOverallCode())
	}
	r := ask("edge", "203.0.113.7")
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Errorf("edge, another address: %v, want OK within 10 a second", r)
	}
	// No file for this domain: native, where this descriptor names no policy.
	if r := ask("other", "50.0.0.5"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("a domain without a file: %v, want OK, unlimited", r)
	}
}
