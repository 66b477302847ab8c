package gate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// CheckBatch records the batch's requests and counts it as one call.
func (r *recorder) CheckBatch(ctx context.Context, reqs []counter.Request) ([]counter.Result, []error) {
	r.calls.Add(1)
	r.mu.Lock()
	r.reqs = append(r.reqs, reqs...)
	r.mu.Unlock()
	return r.Store.CheckBatch(ctx, reqs)
}

// batchSetup is a tenant on the starter plan with a quota of 6 checks a
// minute and two policies, on a gate with a stopped clock.
func batchSetup(t *testing.T) (*gate.Gate, *recorder) {
	t.Helper()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	six := int64(6)
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-b": {ID: "tenant-b", Plan: tenant.PlanPro, QuotaPerMinute: &six}}}
	pols := catalog{"tenant-b": policy.NewSet([]policy.Policy{
		mustPolicy(t, "login", `{"limit":2,"window":"1m"}`),
		mustPolicy(t, "api", `{"limit":100,"window":"1h"}`),
	}, nil)}
	g, rec, _ := newTestGate(t, memory.New(memory.Config{Now: now}), dir, pols, gate.Config{Now: now})
	return g, rec
}

// batchChecks are eight checks: "login" for three subjects, "api" beside
// some, a peek among them.
func batchChecks() []gate.Check {
	var cs []gate.Check
	for i := range 8 {
		c := gate.Check{Mode: counter.Consume, Items: []gate.Item{{Policy: "login", Subject: fmt.Sprintf("user-%d", i%3), Cost: 1}}}
		if i%2 == 1 {
			c.Items = append(c.Items, gate.Item{Policy: "api", Subject: "app", Cost: 10})
		}
		if i == 5 {
			c.Mode = counter.Peek
		}
		cs = append(cs, c)
	}
	return cs
}

// TestAdmitBatchIsItsChecksOneByOne: a batch's verdicts are those of its
// checks sent one after the other, the quota counting each check (six
// allowed a minute, so the last two are the quota's), in one store call.
func TestAdmitBatchIsItsChecksOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batched, rec := batchSetup(t)
	alone, _ := batchSetup(t)
	checks := batchChecks()
	bv, err := batched.AdmitBatch(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: "tenant-b"}, checks)
	if err != nil || bv.Refusal != nil {
		t.Fatalf("AdmitBatch: %+v, %v", bv, err)
	}
	if got := rec.calls.Load(); got != 1 {
		t.Errorf("%d store calls for a batch of %d checks, want 1", got, len(checks))
	}
	quotaRefused := 0
	for i := range checks {
		want, err := alone.Admit(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: "tenant-b", Check: &checks[i]})
		if err != nil {
			t.Fatal(err)
		}
		got := bv.Checks[i]
		if got.Allowed != want.Allowed || (got.Refusal == nil) != (want.Refusal == nil) {
			t.Fatalf("check %d: allowed %v refusal %+v, one by one %v %+v", i, got.Allowed, got.Refusal, want.Allowed, want.Refusal)
		}
		if got.Refusal != nil {
			if *got.Refusal != *want.Refusal {
				t.Errorf("check %d: refusal %+v, one by one %+v", i, *got.Refusal, *want.Refusal)
			}
			if got.Refusal.Layer == admission.LayerQuota {
				quotaRefused++
			}
			continue
		}
		if len(got.Items) != len(want.Items) {
			t.Fatalf("check %d: %d items, want %d", i, len(got.Items), len(want.Items))
		}
		for j := range got.Items {
			if got.Items[j] != want.Items[j] {
				t.Errorf("check %d item %d: %+v, one by one %+v", i, j, got.Items[j], want.Items[j])
			}
		}
	}
	// The peek counts against the quota as any check does.
	if quotaRefused != 2 {
		t.Errorf("%d checks refused by the quota of 6, want 2", quotaRefused)
	}
}

// TestAdmitBatchNamesTheMalformedCheck: an unknown policy in the third
// check refuses the batch whole, naming the check and the field, and
// counts none of its checks.
func TestAdmitBatchNamesTheMalformedCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, rec := batchSetup(t)
	checks := batchChecks()
	checks[2].Items = append(checks[2].Items, gate.Item{Policy: "nope", Subject: "x", Cost: 1})
	_, err := g.AdmitBatch(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: "tenant-b"}, checks)
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "checks[2].items[1].policy" {
		t.Fatalf("AdmitBatch: %v, want a field error on checks[2].items[1].policy", err)
	}
	if got := rec.calls.Load(); got != 0 {
		t.Errorf("a malformed batch made %d store calls", got)
	}
	for _, tc := range []struct {
		checks []gate.Check
		field  string
	}{
		{nil, "checks"},
		{make([]gate.Check, gate.MaxBatchChecks+1), "checks"},
		{[]gate.Check{{Items: make([]gate.Item, 30)}, {Items: make([]gate.Item, gate.MaxBatchItems)}}, "checks[1].items"},
	} {
		_, err := g.AdmitBatch(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: "tenant-b"}, tc.checks)
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%d checks: %v, want a field error on %s", len(tc.checks), err, tc.field)
		}
	}
	if _, err := g.AdmitBatch(ctx, gate.Request{Route: "check", ClientIP: client, Bearer: "nobody"}, batchChecks()); !errors.Is(err, tenant.ErrUnauthorized) {
		t.Errorf("an unknown key: %v, want ErrUnauthorized", err)
	}
}

// TestBatchesKeepTheirAdvances: a tenant's batches of 16 checks, one every
// 100 ms (160 checks a second: an advance of 200 ms is two batches), on an
// enterprise plan far from its ceilings: the ceilings' advances pay most
// batches, and the store sees a fraction of a ceiling item a check (the
// quotas' advances refilled, the per-IP one renewed when it runs out). Before, each batch that found an
// advance short renewed it check by check at the batch's instant, and each
// of those grants, measuring no time, halved the advance's rate: the
// advances shrank to a unit, and every check sent its three ceilings.
func TestBatchesKeepTheirAdvances(t *testing.T) {
	t.Parallel()
	clk := &setClock{}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clk.set(at)
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-b": {ID: "tenant-b", Plan: tenant.PlanEnterprise}}}
	pols := catalog{"tenant-b": policy.NewSet([]policy.Policy{mustPolicy(t, "api", `{"limit":1000000000,"window":"1h"}`)}, nil)}
	g, rec, _ := newTestGate(t, memory.New(memory.Config{Now: clk.read}), dir, pols, gate.Config{Now: clk.read})
	checks := make([]gate.Check, 16)
	const batches = 400
	for n := range batches {
		for i := range checks {
			checks[i] = gate.Check{Mode: counter.Consume, Items: []gate.Item{{Policy: "api", Subject: fmt.Sprintf("s%d", n*16+i), Cost: 1}}}
		}
		bv, err := g.AdmitBatch(context.Background(), gate.Request{Route: "check", ClientIP: client, Bearer: "tenant-b"}, checks)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range bv.Checks {
			if !v.Allowed {
				t.Fatalf("batch %d check %d refused: %+v", n, i, v.Refusal)
			}
		}
		at = at.Add(100 * time.Millisecond)
		clk.set(at)
	}
	rec.mu.Lock()
	items := 0
	byKey := map[string]int{}
	for _, r := range rec.reqs {
		items += r.Ceilings
		for _, it := range r.Items[:r.Ceilings] {
			byKey[it.Key]++
		}
	}
	rec.mu.Unlock()
	t.Logf("ceiling items by key: %v", byKey)
	perCheck := float64(items) / (batches * 16)
	if perCheck > 0.5 {
		t.Errorf("%.2f ceiling items a check sent to the store (three ceilings: 3 without advances)", perCheck)
	}
	t.Logf("%.3f ceiling items a check", perCheck)
}
