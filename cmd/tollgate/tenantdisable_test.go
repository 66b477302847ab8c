package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

type tenantState struct {
	TenantID   string  `json:"tenant_id"`
	DisabledAt *string `json:"disabled_at"`
	Reason     string  `json:"reason"`
}

// TestTenantDisableCommands: `tenants disable` refuses every key of the
// tenant (tenant.ErrDisabled, seen by a fresh Directory as another instance
// would), leaves other tenants alone, shows in `tenants list`, is audited
// with the CLI's actor, and `tenants enable` gives the keys back; bad
// command lines are usage errors and an unknown tenant is named.
func TestTenantDisableCommands(t *testing.T) {
	dsn := pgtest.New(t)
	ctx := context.Background()
	var acme, basic created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme")
	cliJSON(t, dsn, &basic, "tenants", "create", "--name", "Basic")

	var st tenantState
	cliJSON(t, dsn, &st, "tenants", "disable", acme.TenantID, "--reason", "chargeback under review")
	if st.TenantID != acme.TenantID || st.DisabledAt == nil || st.Reason != "chargeback under review" {
		t.Fatalf("tenants disable printed %+v", st)
	}
	for _, raw := range []string{acme.LiveKey, acme.TestKey} {
		if _, _, err := directory(t, dsn).Authenticate(ctx, raw); !errors.Is(err, tenant.ErrDisabled) {
			t.Fatalf("a key of the disabled tenant: %v, want ErrDisabled", err)
		}
	}
	if _, tn, err := directory(t, dsn).Authenticate(ctx, basic.LiveKey); err != nil || tn.ID != basic.TenantID {
		t.Fatalf("the other tenant's key: %v", err)
	}
	out, err := cli(t, dsn, "tenants", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^`+acme.TenantID+`\s.*\s`+regexp.QuoteMeta((*st.DisabledAt)[:19])+`Z$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+basic.TenantID+`\s.*\s-$`).MatchString(out) {
		t.Errorf("tenants list does not show Acme disabled and Basic not:\n%s", out)
	}

	// Disabling again keeps the first instant.
	var again tenantState
	cliJSON(t, dsn, &again, "tenants", "disable", acme.TenantID)
	if again.DisabledAt == nil || *again.DisabledAt != *st.DisabledAt || again.Reason != "" {
		t.Fatalf("disabling twice: %+v, want disabled_at %s and no reason", again, *st.DisabledAt)
	}

	var on tenantState
	cliJSON(t, dsn, &on, "tenants", "enable", acme.TenantID)
	if on.DisabledAt != nil || on.Reason != "" {
		t.Fatalf("tenants enable printed %+v", on)
	}
	if _, tn, err := directory(t, dsn).Authenticate(ctx, acme.LiveKey); err != nil || tn.ID != acme.TenantID {
		t.Fatalf("the enabled tenant's key: %v", err)
	}

	es, err := audit.NewLog(pgstore.NewAudit(pgtest.PoolAt(t, dsn))).List(ctx, audit.Filter{TenantID: acme.TenantID})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range es {
		if !strings.HasPrefix(e.Actor, "cli:") {
			t.Errorf("entry %s by %q, want cli:<user>", e.Kind, e.Actor)
		}
		kinds = append(kinds, e.Kind)
	}
	if got := strings.Join(kinds, ","); got != "tenant_enabled,tenant_disabled,tenant_disabled" {
		t.Errorf("audit kinds, newest first: %s", got)
	}

	for _, c := range []struct {
		args      []string
		wantUsage bool
		want      string
	}{
		{[]string{"tenants", "disable"}, true, "want one TENANT_ID"},
		{[]string{"tenants", "enable", acme.TenantID, basic.TenantID}, true, "want one TENANT_ID"},
		{[]string{"tenants", "enable", acme.TenantID, "--reason", "x"}, true, "reason"},
		{[]string{"tenants", "disable", acme.TenantID, "--reason", strings.Repeat("x", 201)}, true, "reason: must be 1 to 200 characters"},
		{[]string{"tenants", "disable", acme.TenantID, "--reason", "a\x07b"}, true, "control characters"},
		{[]string{"tenants", "disable", "00000000-0000-0000-0000-000000000000"}, false, "no tenant 00000000-0000-0000-0000-000000000000"},
		{[]string{"tenants", "enable", "not-a-uuid"}, false, "no tenant not-a-uuid"},
	} {
		_, err := cli(t, dsn, c.args...)
		if err == nil || errors.Is(err, errUsage) != c.wantUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tollgate %s: %v (usage %t), want an error saying %q (usage %t)", strings.Join(c.args, " "), err, errors.Is(err, errUsage), c.want, c.wantUsage)
		}
	}
	if _, _, err := directory(t, dsn).Authenticate(ctx, acme.LiveKey); err != nil {
		t.Fatalf("a refused command changed the tenant: %v", err)
	}
}
