package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// benchCheck posts body to /v1/check through the whole in-process pipeline
// (Echo, the gate, a real Directory and Catalog, the in-memory counter
// store) b.N times, from parallel goroutines.
func benchCheck(b *testing.B, a *tenantAPI, key string, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			postCheck(b, a, "/v1/check", key, body)
		}
	})
}

// postCheck posts body to path (/v1/check or /v1/check/batch) with key
// through a's Echo, in process, and fails tb unless it is answered 200.
func postCheck(tb testing.TB, a *tenantAPI, path, key string, body []byte) {
	tb.Helper()
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
	}
}

// newBenchAPI is the API with one enterprise tenant whose ceilings no
// benchmark reaches, and its live key.
func newBenchAPI(b testing.TB) (*tenantAPI, string) {
	a := newTenantAPI(b, pgtest.New(b), nil)
	live, _ := a.tenant(tenant.PlanEnterprise,
		`UPDATE tenants SET rate_limit_per_minute = 1000000000, quota_per_minute = 1000000000, quota_per_hour = 1000000000 WHERE id = $1`)
	return a, live
}

// BenchmarkCheck is one light check: one item of a sliding-window policy,
// a subject among 10,000.
func BenchmarkCheck(b *testing.B) {
	a, key := newBenchAPI(b)
	if r := a.do(key, "PUT", "/v1/policies/bench", `{"limit":1000000000,"window":"1h","algorithm":"sliding_window"}`); r.status != 200 {
		b.Fatalf("put policy: %d %s", r.status, r.body)
	}
	benchCheck(b, a, key, []byte(`{"items":[{"policy":"bench","subject":"user-4242"}]}`))
}

// maxCheckAllocs bounds the heap allocations of BenchmarkCheck's check
// through the whole in-process pipeline, httptest's request and recorder
// included (33 when it was set; 114 before the work on a check's cost).
const maxCheckAllocs = 38

// TestCheckAllocations holds BenchmarkCheck's check to maxCheckAllocs
// allocations: an allocation a check that comes back (a map, a closure, a
// formatted string on the hot path) fails it. An allocation count is the
// same on any machine, unlike a time.
func TestCheckAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts mean nothing under the race detector, whose sync.Pool drops what it holds")
	}
	a, key := newBenchAPI(t)
	if r := a.do(key, "PUT", "/v1/policies/bench", `{"limit":1000000000,"window":"1h","algorithm":"sliding_window"}`); r.status != 200 {
		t.Fatalf("put policy: %d %s", r.status, r.body)
	}
	body := []byte(`{"items":[{"policy":"bench","subject":"user-4242"}]}`)
	check := func() { postCheck(t, a, "/v1/check", key, body) }
	for range 100 {
		check() // caches, pools and the counter's first write
	}
	if n := testing.AllocsPerRun(1000, check); n > maxCheckAllocs {
		t.Errorf("a check allocates %.1f times, want at most %d", n, maxCheckAllocs)
	} else {
		t.Logf("a check allocates %.1f times", n)
	}
}

// BenchmarkCheckHeaviest is the heaviest check the API allows: 32 items of
// the longest subjects against a policy with as many wildcard overrides as
// it may hold, each shaped to fail at its end.
func BenchmarkCheckHeaviest(b *testing.B) {
	a, key := newBenchAPI(b)
	if r := a.do(key, "PUT", "/v1/policies/wild", `{"limit":1000000000,"window":"1h"}`); r.status != 200 {
		b.Fatalf("put policy: %d %s", r.status, r.body)
	}
	run := strings.Repeat("a", 60)
	for i := 0; ; i++ {
		pattern := fmt.Sprintf("*%s*%s*%s%05d*", run, run, run[:55], i)
		r := a.do(key, "PUT", "/v1/policies/wild/overrides/"+url.PathEscape(pattern), `{"limit":5}`)
		if r.status == http.StatusBadRequest {
			break
		}
		if r.status != 200 {
			b.Fatalf("override %d: %d %s", i, r.status, r.body)
		}
	}
	items := make([]map[string]any, 32)
	for i := range items {
		items[i] = map[string]any{"policy": "wild", "subject": strings.Repeat("a", 500) + fmt.Sprintf("z%011d", i)}
	}
	body, _ := json.Marshal(map[string]any{"items": items})
	benchCheck(b, a, key, body)
}
