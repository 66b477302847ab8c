package gate_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestEventsNamePolicies checks admission.Event.Policies, what usage
// counts per policy from: the tenant's policies a check's items named, in
// item order, a single check's, a batch's checks' and a lease's; an Envoy
// rule's name left out; a name that is not a policy answered with an
// error and never observed.
func TestEventsNamePolicies(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro}}}
	pols := []policy.Policy{
		mustPolicy(t, "login", `{"limit":2,"window":"1h"}`),
		mustPolicy(t, "search", `{"limit":100,"window":"1h"}`),
		mustPolicy(t, "workers", `{"limit":2,"algorithm":"concurrency"}`),
	}
	g, _, obs := newTestGate(t, nil, dir, catalog{"tenant-1": policy.NewSet(pols, nil)}, gate.Config{})
	ctx := context.Background()
	rule := mustPolicy(t, "envoy_rule", `{"limit":5,"window":"1m"}`)

	last := func() []string {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.es) == 0 {
			return nil
		}
		return obs.es[len(obs.es)-1].Policies
	}
	seen := func() int {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.es)
	}

	tests := []struct {
		name  string
		items []gate.Item
		want  []string
	}{
		{"one item", []gate.Item{{Policy: "login", Subject: "a"}}, []string{"login"}},
		{"two policies, one twice", []gate.Item{{Policy: "search", Subject: "a"}, {Policy: "login", Subject: "b"}, {Policy: "search", Subject: "c"}}, []string{"search", "login", "search"}},
		{"an Envoy rule left out", []gate.Item{{Policy: rule.Name, Subject: "a", Rule: &rule}, {Policy: "login", Subject: "c"}}, []string{"login"}},
		{"only an Envoy rule", []gate.Item{{Policy: rule.Name, Subject: "a", Rule: &rule}}, nil},
	}
	for _, tt := range tests {
		if _, err := g.Admit(ctx, checkReq("tenant-1", client, tt.items...)); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := last(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Policies %q, want %q", tt.name, got, tt.want)
		}
	}

	before := seen()
	if _, err := g.Admit(ctx, checkReq("tenant-1", client, gate.Item{Policy: "nope", Subject: "a"})); err == nil {
		t.Fatal("a check of a name that is not a policy: no error")
	}
	if n := seen(); n != before {
		t.Errorf("a check of a name that is not a policy was observed (%d events, want %d)", n, before)
	}

	bv, err := g.AdmitBatch(ctx, gate.Request{Route: "check_batch", ClientIP: client, Bearer: "tenant-1"}, []gate.Check{
		{Mode: counter.Consume, Items: []gate.Item{{Policy: "login", Subject: "z"}}},
		{Mode: counter.Consume, Items: []gate.Item{{Policy: "search", Subject: "z"}, {Policy: "login", Subject: "y"}}},
	})
	if err != nil || len(bv.Checks) != 2 {
		t.Fatalf("a batch: %+v, %v", bv, err)
	}
	obs.mu.Lock()
	es := obs.es[len(obs.es)-2:]
	obs.mu.Unlock()
	if !slices.Equal(es[0].Policies, []string{"login"}) || !slices.Equal(es[1].Policies, []string{"search", "login"}) {
		t.Errorf("a batch's events: Policies %q and %q, want [login] and [search login]", es[0].Policies, es[1].Policies)
	}

	if _, err := g.Acquire(ctx, gate.Request{Route: "leases", ClientIP: client, Bearer: "tenant-1"}, gate.Lease{Policy: "workers", Subject: "a", TTL: gate.MinLeaseTTL}); err != nil {
		t.Fatalf("a lease: %v", err)
	}
	if got := last(); !slices.Equal(got, []string{"workers"}) {
		t.Errorf("a lease: Policies %q, want [workers]", got)
	}
}
