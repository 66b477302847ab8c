package main

import (
	"context"
	"errors"
	"os/user"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

type policyPrinted struct {
	Name       string  `json:"name"`
	Limit      int64   `json:"limit"`
	Window     *string `json:"window"`
	Algorithm  string  `json:"algorithm"`
	Scope      string  `json:"scope"`
	FailMode   string  `json:"fail_mode"`
	Shadow     bool    `json:"shadow"`
	AlertAfter int64   `json:"alert_after"`
	Unit       string  `json:"unit"`
	OnExpiry   string  `json:"on_expiry"`
	CreatedAt  string  `json:"created_at"`
	UpdatedAt  string  `json:"updated_at"`
}

type overridePrinted struct {
	Pattern   string  `json:"pattern"`
	Limit     int64   `json:"limit"`
	ExpiresAt *string `json:"expires_at"`
}

// TestPoliciesAndOverridesCommands: an operator lists, creates, replaces and
// deletes a tenant's policies and overrides from the command line; what
// the API would refuse is refused in its words, naming the flag, before the
// database is touched; every change is in the store and audited as
// cli:<os user>.
func TestPoliciesAndOverridesCommands(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	var acme created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme")
	tn := acme.TenantID

	// Mistakes, in the API's words.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"policies", "put", "sign-in", "--tenant", tn, "--limit", "10", "--window", "1 minute"}, `policies put: --window: must be a duration`},
		{[]string{"policies", "put", "sign-in", "--tenant", tn, "--window", "1m"}, `policies put: --limit: `},
		{[]string{"policies", "put", "Sign In", "--tenant", tn, "--limit", "1", "--window", "1m"}, `policies put: name: must be 1 to 64 characters`},
		{[]string{"policies", "put", "jobs", "--tenant", tn, "--limit", "3", "--algorithm", "concurrency", "--shadow"}, `policies put: --shadow: a policy of algorithm "concurrency" cannot be shadow`},
		{[]string{"policies", "delete", "nope", "--tenant", tn}, `policies delete: policy "nope" not found`},
		{[]string{"policies", "list", "--tenant", "00000000-0000-0000-0000-000000000000"}, `policies list: no tenant 00000000-0000-0000-0000-000000000000`},
		{[]string{"overrides", "put", "vip-**", "--tenant", tn, "--policy", "sign-in", "--limit", "5"}, `overrides put: pattern: "**" matches what "*" matches`},
		{[]string{"overrides", "put", "vip-*", "--tenant", tn, "--policy", "sign-in", "--limit", "5", "--expires-at", "2001-01-01T00:00:00Z"}, `overrides put: --expires-at: must be in the future`},
	} {
		_, err := cli(t, dsn, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tollgate %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"policies", "put", "sign-in", "--limit", "1"},
		{"policies", "list", "--tenant", tn, "extra"},
		{"overrides", "list", "--tenant", tn},
		{"policies", "rename", "a", "b"},
	} {
		if _, err := cli(t, dsn, args...); !errors.Is(err, errUsage) {
			t.Errorf("tollgate %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}

	// Create, replace, list.
	var p policyPrinted
	cliJSON(t, dsn, &p, "policies", "put", "sign-in", "--tenant", tn, "--limit", "10", "--window", "1m")
	if p.Name != "sign-in" || p.Limit != 10 || p.Window == nil || *p.Window != "1m" || p.Algorithm != "fixed_window" || p.FailMode != "open" {
		t.Errorf("put printed %+v", p)
	}
	cliJSON(t, dsn, &p, "policies", "put", "sign-in", "--tenant", tn, "--limit", "25", "--window", "15m", "--algorithm", "sliding_window", "--fail-mode", "closed", "--alert-after", "5", "--shadow")
	if p.Limit != 25 || *p.Window != "15m" || p.Algorithm != "sliding_window" || p.FailMode != "closed" || p.AlertAfter != 5 || !p.Shadow {
		t.Errorf("replace printed %+v", p)
	}
	out, err := cli(t, dsn, "policies", "list", "--tenant", tn)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "sign-in 25 15m sliding_window subject closed true 5" {
		t.Errorf("policies list printed:\n%s", out)
	}

	// Overrides.
	exp := time.Now().UTC().Add(72 * time.Hour).Truncate(time.Second).Format(time.RFC3339)
	var o overridePrinted
	cliJSON(t, dsn, &o, "overrides", "put", "vip-*", "--tenant", tn, "--policy", "sign-in", "--limit", "100", "--expires-at", exp)
	if o.Pattern != "vip-*" || o.Limit != 100 || o.ExpiresAt == nil || *o.ExpiresAt != exp {
		t.Errorf("override put printed %+v, want vip-* 100 until %s", o, exp)
	}
	out, err = cli(t, dsn, "overrides", "list", "--tenant", tn, "--policy", "sign-in")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "vip-*") || !strings.Contains(out, exp) {
		t.Errorf("overrides list printed:\n%s", out)
	}
	var deleted struct {
		Deleted string `json:"deleted"`
	}
	cliJSON(t, dsn, &deleted, "overrides", "delete", "vip-*", "--tenant", tn, "--policy", "sign-in")
	cliJSON(t, dsn, &deleted, "policies", "delete", "sign-in", "--tenant", tn)
	if deleted.Deleted != "sign-in" {
		t.Errorf("delete printed %+v", deleted)
	}

	// In the store, and audited with the operator.
	pool := pgtest.PoolAt(t, dsn)
	if ps, err := pgstore.NewPolicies(pool).ListPolicies(context.Background(), tn); err != nil || len(ps) != 0 {
		t.Errorf("after delete: %v, %v", ps, err)
	}
	es, err := audit.NewLog(pgstore.NewAudit(pool)).List(context.Background(), audit.Filter{TenantID: tn})
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range es {
		if e.Actor != "cli:"+u.Username {
			t.Errorf("%s audited by %q, want cli:%s", e.Kind, e.Actor, u.Username)
		}
		kinds = append(kinds, e.Kind)
	}
	want := []string{policy.KindPolicyDeleted, policy.KindOverrideDeleted, policy.KindOverridePut, policy.KindPolicyPut, policy.KindPolicyPut}
	if !slices.Equal(kinds, want) {
		t.Errorf("audited %v, want %v", kinds, want)
	}
}
