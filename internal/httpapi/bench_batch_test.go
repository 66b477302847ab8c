package httpapi

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/benchcost"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// batchBenchChecks is the checks of a benchmark's batch: the TypeScript
// client's default batch size. (The Go client's batches of 16 pay the
// batch's own slices, its verdicts and counter requests, over fewer checks:
// 2,100–2,300 ns of CPU and 3.2 allocations a check in this benchmark, against
// 1,300–1,400 and 1.4 at 100, on 2026-12-06.)
const batchBenchChecks = 100

// batchBodies returns n bodies of /v1/check/batch as client.WithBatching
// sends them: batchBenchChecks checks, each one consuming item of the
// policy "bench" for a random subject among 100,000.
func batchBodies(n int) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	bodies := make([][]byte, n)
	for i := range bodies {
		var b strings.Builder
		b.WriteString(`{"checks":[`)
		for j := range batchBenchChecks {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"mode":"consume","items":[{"policy":"bench","subject":"user-%d"}]}`, r.IntN(100_000))
		}
		b.WriteString(`]}`)
		bodies[i] = []byte(b.String())
	}
	return bodies
}

// newBatchBenchAPI is newBenchAPI with the fixed-window policy "bench"
// that scripts/bench-batch.sh checks, on a memory store that holds as many
// counters as serve's (TOLLGATE_MEMORY_MAX_KEYS), so that the benchmark's
// 100,000 subjects are not evicted.
func newBatchBenchAPI(tb testing.TB) (*tenantAPI, string) {
	a := newTenantAPIWith(tb, pgtest.New(tb), apiOptions{store: memory.New(memory.Config{MaxKeys: 1_000_000}), storeName: "memory"})
	key, _ := a.tenant(tenant.PlanEnterprise,
		`UPDATE tenants SET rate_limit_per_minute = 1000000000, quota_per_minute = 1000000000, quota_per_hour = 1000000000 WHERE id = $1`)
	if r := a.do(key, "PUT", "/v1/policies/bench", `{"limit":1000000000,"window":"1h","algorithm":"fixed_window"}`); r.status != 200 {
		tb.Fatalf("put policy: %d %s", r.status, r.body)
	}
	return a, key
}

// BenchmarkCheckBatch posts batches of batchBenchChecks checks through the
// whole in-process pipeline and the in-memory counter store, one at a time
// (a tenant's batch of 100 checks takes all its work in progress, so its
// batches are decided one after the other anyway), and reports the cost a
// check (benchcost).
func BenchmarkCheckBatch(b *testing.B) {
	a, key := newBatchBenchAPI(b)
	bodies := batchBodies(1000)
	for _, body := range bodies[:10] {
		postCheck(b, a, "/v1/check/batch", key, body)
	}
	b.ReportAllocs()
	m := benchcost.Start()
	for i := 0; b.Loop(); i++ {
		postCheck(b, a, "/v1/check/batch", key, bodies[i%len(bodies)])
	}
	m.Report(b, batchBenchChecks, "check")
}

// maxBatchAllocsPerCheck bounds the heap allocations a check of
// BenchmarkCheckBatch's batches costs through the whole in-process
// pipeline, the batch's request and recorder included (1.4 when it was
// set: the counter key of its policy item, and the batch's own share;
// 10.6 before the batch path's allocations were pooled and shared).
const maxBatchAllocsPerCheck = 2

// TestCheckBatchAllocations holds a batch of batchBenchChecks checks to
// maxBatchAllocsPerCheck allocations a check: an allocation a check that
// comes back fails it.
func TestCheckBatchAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts mean nothing under the race detector, whose sync.Pool drops what it holds")
	}
	a, key := newBatchBenchAPI(t)
	bodies := batchBodies(100)
	i := 0
	batch := func() {
		postCheck(t, a, "/v1/check/batch", key, bodies[i%len(bodies)])
		i++
	}
	for range 20 {
		batch() // caches, pools and the counters' first writes
	}
	if n := testing.AllocsPerRun(200, batch) / batchBenchChecks; n > maxBatchAllocsPerCheck {
		t.Errorf("a check of a batch allocates %.2f times, want at most %d", n, maxBatchAllocsPerCheck)
	} else {
		t.Logf("a check of a batch allocates %.2f times", n)
	}
}
