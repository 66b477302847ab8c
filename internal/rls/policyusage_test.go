package rls_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestNativeDescriptorsCountPerPolicy: a native ("policy", NAME)
// descriptor's checks and refusals count per policy and hour, as a
// /v1/check's do; a name that is not a policy counts nowhere.
func TestNativeDescriptorsCountPerPolicy(t *testing.T) {
	in := start(t, pgtest.New(t))
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "per-client", 3, time.Hour)
	for range 5 {
		in.must(t, acme.Live, "edge", desc("policy", "per-client", "remote_address", "203.0.113.7"))
	}
	in.ask(t, acme.Live, "edge", desc("policy", "ghost", "remote_address", "203.0.113.7")) //nolint:errcheck // refused either way
	rec := in.app.Parts.PolicyUsage
	if err := rec.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	got, err := rec.PolicyHours(t.Context(), acme.Tenant.ID, now.Add(-2*time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The checks may straddle an hour's end: their hours sum.
	var sum usage.PolicyHour
	for _, h := range got {
		if h.Policy != "per-client" {
			t.Errorf("an hour of %q", h.Policy)
		}
		sum.Checks, sum.Refusals = sum.Checks+h.Checks, sum.Refusals+h.Refusals
	}
	if sum.Checks != 5 || sum.Refusals != 2 {
		t.Errorf("per-client: %d checks, %d refused (hours %+v), want 5 and 2", sum.Checks, sum.Refusals, got)
	}
}
