package gate_test

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// setClock is a clock the test moves: two gates read the same instants
// however often each reads it.
type setClock struct{ now atomic.Pointer[time.Time] }

func (c *setClock) read() time.Time { return *c.now.Load() }
func (c *setClock) set(t time.Time) { c.now.Store(&t) }

// TestBatchTakesAreTheirChecksTakes: a batch passes the per-IP L1 and takes
// its ceilings' advance units once for all its checks when they can take
// them all; every verdict (allowed, refusal, items, the tightest quota) is
// what taking them check by check gives. (Without refills, which change
// what an advance holds, and so the tightest quota's remaining as this
// instance knows it: TestBatchRefillsAnswerAsChecksAlone.)
func TestBatchTakesAreTheirChecksTakes(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) { batchesBesideAlone(t, rt, false) })
}

// TestBatchRefillsAnswerAsChecksAlone: batches that refill the advances
// they run low (fixed-window ceilings: the quotas, the allotment) answer
// every check as checks taking alone do: allowed or not, refused by the
// same layer, the same items. The tightest quota is left out: a refill
// changes what the advance holds and so what this instance knows of a
// ceiling's remaining. The stream must have granted refills.
func TestBatchRefillsAnswerAsChecksAlone(t *testing.T) {
	t.Parallel()
	var refills int64
	rapid.Check(t, func(rt *rapid.T) { refills += batchesBesideAlone(t, rt, true) })
	if refills == 0 {
		t.Fatal("no batch refilled an advance: the test tried nothing")
	}
	t.Logf("%d refills granted", refills)
}

// batchesBesideAlone sends the same random stream of batches at the same
// instants to two gates with stores of their own, one taking alone
// (gate.TakeAlone), and holds each check's verdicts to each other's: whole,
// or without the tightest quota when the batches refill their advances
// (refills; without, neither gate refills). Per-IP limits and quotas small
// enough to refuse, traffic fast enough for advances of many units. It
// returns the refills the batch gate was granted.
func batchesBesideAlone(t *testing.T, rt *rapid.T, refills bool) int64 {
	ipLimit := rapid.Int64Range(1, 3000).Draw(rt, "ip")
	quotaMin := rapid.Int64Range(1, 5000).Draw(rt, "quotaMinute")
	quotaHour := rapid.Int64Range(1, 20000).Draw(rt, "quotaHour")
	plan := rapid.SampledFrom([]string{tenant.PlanStarter, tenant.PlanPro, tenant.PlanEnterprise}).Draw(rt, "plan")
	bearer := rapid.SampledFrom([]string{"t", "test:t"}).Draw(rt, "key")
	alg := rapid.SampledFrom([]string{"fixed_window", "sliding_window", "token_bucket"}).Draw(rt, "algorithm")
	polLimit := rapid.IntRange(1, 400).Draw(rt, "policyLimit")
	tn := tenant.Tenant{ID: "t", Plan: plan, RateLimitPerMinute: ipLimit, QuotaPerMinute: &quotaMin, QuotaPerHour: &quotaHour}
	dir := directory{tenants: map[string]tenant.Tenant{"t": tn}}
	pols := catalog{"t": policy.NewSet([]policy.Policy{
		mustPolicy(t, "p", fmt.Sprintf(`{"limit":%d,"window":"1m","algorithm":%q}`, polLimit, alg)),
		mustPolicy(t, "open", `{"limit":1000000000,"window":"1h"}`),
	}, nil)}
	clk := &setClock{}
	at := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC)
	clk.set(at)
	gates := [2]*gate.Gate{}
	for i := range gates {
		gates[i], _, _ = newTestGate(t, memory.New(memory.Config{Now: clk.read}), dir, pols, gate.Config{Now: clk.read})
		if !refills {
			gate.NoRefills(gates[i])
		}
	}
	gate.TakeAlone(gates[1])
	ctx := context.Background()
	// The stream stays within the first minute: the checks past every
	// ceiling, counted on both quotas, are never more than either allows.
	passed, diverged := int64(0), false
	for step := range rapid.IntRange(1, 120).Draw(rt, "steps") {
		at = at.Add(time.Duration(rapid.IntRange(0, 40_000).Draw(rt, "µs")) * time.Microsecond)
		clk.set(at)
		checks := make([]gate.Check, rapid.IntRange(1, 40).Draw(rt, "checks"))
		for i := range checks {
			c := &checks[i]
			c.Mode = counter.Consume
			if rapid.IntRange(0, 9).Draw(rt, "peek") == 0 {
				c.Mode = counter.Peek
			}
			c.Items = []gate.Item{{Policy: "p", Subject: fmt.Sprintf("s%d", rapid.IntRange(0, 5).Draw(rt, "subject")), Cost: rapid.Int64Range(1, 3).Draw(rt, "cost")}}
			if rapid.Bool().Draw(rt, "open") {
				c.Items = append(c.Items, gate.Item{Policy: "open", Subject: "all", Cost: 1})
			}
		}
		var bvs [2]gate.BatchVerdict
		for i, g := range gates {
			var err error
			if bvs[i], err = g.AdmitBatch(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: bearer}, checks); err != nil {
				rt.Fatalf("step %d: AdmitBatch: %v", step, err)
			}
		}
		if !reflect.DeepEqual(bvs[0].Verdict, bvs[1].Verdict) {
			rt.Fatalf("step %d: the batch's verdict %+v, taking alone %+v", step, bvs[0].Verdict, bvs[1].Verdict)
		}
		for i := range checks {
			got, want := bvs[0].Checks[i], bvs[1].Checks[i]
			if got.Refusal == nil {
				// Past every ceiling: counted on the quotas.
				passed++
			}
			if passed > min(quotaMin, quotaHour) {
				rt.Fatalf("step %d, check %d: %d checks past the quotas of %d a minute and %d an hour", step, i, passed, quotaMin, quotaHour)
			}
			if diverged {
				continue
			}
			if refills {
				got.Tightest, want.Tightest = gate.Quota{}, gate.Quota{}
				if (got.Refusal == nil) != (want.Refusal == nil) && refusedBy(got, want, admission.LayerQuota) {
					// Only ever this way: taking alone, a unit given back
					// (another ceiling refused its check) to an advance a
					// grant has replaced since lapses, and a quota refuses
					// early; a batch that refilled the advance beforehand
					// keeps the unit. From here the two count on different
					// counters.
					if got.Refusal != nil {
						rt.Fatalf("step %d, check %d: refused by the quota refilled, passed taking alone: %+v", step, i, got.Refusal)
					}
					diverged = true
					continue
				}
			}
			if !reflect.DeepEqual(got, want) {
				rt.Fatalf("step %d, check %d of %d:\n batch  %+v %+v\n alone  %+v %+v", step, i, len(checks), got, got.Refusal, want, want.Refusal)
			}
		}
	}
	return gate.Refills(gates[0])
}

// refusedBy reports whether exactly one of a and b was refused, by layer.
func refusedBy(a, b gate.Verdict, layer string) bool {
	r := a.Refusal
	if r == nil {
		r = b.Refusal
	}
	return r != nil && r.Layer == layer
}

// TestFullBatchesRefillWithinTheStoresBound sends batches of the most
// checks a batch holds while the tenant's quotas' advances run low: the
// refills the batch asks for beside its checks must not take the store call
// past counter.MaxBatch requests, which the store refuses whole (the check
// batch answered 500 at scripts/bench-scale.sh's fill, 1,000 checks a
// request). A full batch asks for no refill; a smaller one still does.
func TestFullBatchesRefillWithinTheStoresBound(t *testing.T) {
	t.Parallel()
	quotaMin, quotaHour := int64(1_000_000_000), int64(1_000_000_000)
	tn := tenant.Tenant{ID: "t", Plan: tenant.PlanEnterprise, RateLimitPerMinute: 1_000_000_000, QuotaPerMinute: &quotaMin, QuotaPerHour: &quotaHour}
	dir := directory{tenants: map[string]tenant.Tenant{"t": tn}}
	pols := catalog{"t": policy.NewSet([]policy.Policy{mustPolicy(t, "p", `{"limit":1000000000,"window":"1h"}`)}, nil)}
	clk := &setClock{}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk.set(at)
	g, _, _ := newTestGate(t, memory.New(memory.Config{Now: clk.read}), dir, pols, gate.Config{Now: clk.read})
	ctx := context.Background()
	subject := 0
	batch := func(n int) {
		t.Helper()
		checks := make([]gate.Check, n)
		for i := range checks {
			subject++
			checks[i] = gate.Check{Mode: counter.Consume, Items: []gate.Item{{Policy: "p", Subject: fmt.Sprintf("s%d", subject), Cost: 1}}}
		}
		bv, err := g.AdmitBatch(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: "t"}, checks)
		if err != nil {
			t.Fatalf("a batch of %d: %v", n, err)
		}
		if !bv.Allowed || len(bv.Checks) != n {
			t.Fatalf("a batch of %d: %+v, %d verdicts", n, bv.Verdict, len(bv.Checks))
		}
		for i, v := range bv.Checks {
			if !v.Allowed || v.Degraded {
				t.Fatalf("a batch of %d: check %d: %+v", n, i, v)
			}
		}
	}
	before := gate.Refills(g)
	for range 10 {
		at = at.Add(10 * time.Millisecond)
		clk.set(at)
		batch(gate.MaxBatchChecks)
		batch(gate.MaxBatchChecks - 1)
		at = at.Add(10 * time.Millisecond)
		clk.set(at)
		batch(16)
	}
	if gate.Refills(g) == before {
		t.Error("no batch refilled an advance: the test tried nothing")
	}
}
