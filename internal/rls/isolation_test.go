package rls_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestDescriptorFloodIsolation: while one tenant floods the service with
// requests of 32 descriptors each, every one a new subject, another
// tenant's answers stay exact, never degraded and never an error.
func TestDescriptorFloodIsolation(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	hostile, bystander := newTenant(t, in.app, "enterprise"), newTenant(t, in.app, "pro")
	putPolicy(t, in.app, hostile.Tenant.ID, "wide", 1_000_000, time.Hour)
	putPolicy(t, in.app, bystander.Tenant.ID, "api", 50, time.Hour)

	ctx, stop := context.WithCancel(t.Context())
	var flood sync.WaitGroup
	var sent, failed atomic.Int64
	for w := range 32 {
		flood.Go(func() {
			hctx := as(ctx, hostile.Live)
			for n := 0; ctx.Err() == nil; n++ {
				ds := make([]*ratelimitv3.RateLimitDescriptor, 32)
				for i := range ds {
					ds[i] = desc("policy", "wide", "user", fmt.Sprintf("%d-%d-%d", w, n, i))
				}
				if _, err := in.rls.ShouldRateLimit(hctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds}); err != nil {
					failed.Add(1)
				}
				sent.Add(1)
			}
		})
	}
	defer func() {
		stop()
		flood.Wait()
	}()
	time.Sleep(500 * time.Millisecond) // the flood under way
	var allowed, refused int
	var slowest time.Duration
	for i := range 100 {
		began := time.Now()
		res, err := in.ask(t, bystander.Live, "edge", desc("policy", "api", "user", "alice"))
		slowest = max(slowest, time.Since(began))
		if err != nil {
			t.Fatalf("bystander call %d during the flood: %v", i+1, err)
		}
		if header(res, "x-tollgate-degraded") != "" {
			t.Errorf("bystander call %d degraded during the flood", i+1)
		}
		if res.OverallCode == ok {
			allowed++
		} else {
			refused++
		}
	}
	stop()
	flood.Wait()
	if sent.Load() < 50 {
		t.Fatalf("the flood sent only %d requests: no flood", sent.Load())
	}
	if allowed != 50 || refused != 50 {
		t.Errorf("bystander during the flood: %d allowed, %d refused; want exactly 50 and 50", allowed, refused)
	}
	t.Logf("flood: %d requests of 32 descriptors (%d answered with an error); bystander's slowest answer %s", sent.Load(), failed.Load(), slowest.Round(time.Millisecond))
}
