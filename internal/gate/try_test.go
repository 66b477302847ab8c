package gate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestTry peeks one policy of a tenant without counting: a subject used 2
// of 3 is answered remaining 1 however often it is tried, with the
// RateLimit fields a check would get; the sandbox's counter is apart; its
// faults name the form's fields, not a check's items[0].
func TestTry(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{
		mustPolicy(t, "api", `{"limit":3,"window":"1h"}`),
		mustPolicy(t, "jobs", `{"limit":1,"algorithm":"concurrency"}`),
	}, nil)}
	g, _, _, _ := leaseGate(t, dir, pols)
	ctx := context.Background()
	api := gate.Item{Policy: "api", Subject: "alice"}
	for range 2 {
		if v := mustAdmit(t, g, checkReq("t1", client, api)); !v.Allowed {
			t.Fatal("a check refused")
		}
	}
	for i := range 3 {
		v, err := g.Try(ctx, "t1", false, "api", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		if it := v.Items[0]; !v.Allowed || !it.Allowed || it.Remaining != 1 || it.Limit != 3 {
			t.Fatalf("try %d: allowed %v, item %+v; want allowed, remaining 1 of 3", i+1, v.Allowed, it)
		}
		if rl := v.RateLimit(); rl.Policy != `"api";q=3;w=3600` || !strings.HasPrefix(rl.Fields, `"api";r=1;t=`) || rl.RetryAfter != 0 {
			t.Fatalf("try %d: RateLimit %+v", i+1, rl)
		}
	}
	if v, err := g.Try(ctx, "t1", false, "api", "alice", 2); err != nil || v.Allowed || v.RateLimit().RetryAfter < 1 {
		t.Fatalf("a try at cost 2 with 1 left: %+v, %v; want refused with a Retry-After", v, err)
	}
	if v, err := g.Try(ctx, "t1", true, "api", "alice", 1); err != nil || v.Items[0].Remaining != 3 {
		t.Fatalf("the sandbox's counter: %+v, %v", v, err)
	}
	if v := mustAdmit(t, g, checkReq("t1", client, api)); !v.Allowed {
		t.Fatal("the third check, after the tries, refused: a try counted")
	}
	for _, c := range []struct {
		name, policy, subject string
		cost                  int64
		field                 string
	}{
		{"no subject", "api", "", 1, "subject"},
		{"a cost below 1", "api", "alice", -1, "cost"},
		{"a concurrency policy", "jobs", "alice", 1, "policy"},
		{"no such policy", "nope", "alice", 1, "policy"},
	} {
		_, err := g.Try(ctx, "t1", false, c.policy, c.subject, c.cost)
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want a field error of %s", c.name, err, c.field)
		}
	}
}
