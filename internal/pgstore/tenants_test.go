package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore returns a tenant store on a database of the test's own, and the
// database's URL.
func newStore(t *testing.T) (*pgstore.Tenants, string) {
	t.Helper()
	dsn := pgtest.New(t)
	return pgstore.NewTenants(pgtest.PoolAt(t, dsn)), dsn
}

func newKey(t *testing.T, test bool) (string, tenant.Key) {
	t.Helper()
	raw, k, err := tenant.NewKey(test)
	if err != nil {
		t.Fatal(err)
	}
	return raw, k
}

func ptr(v int64) *int64 { return &v }

func TestTenantRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	_, live := newKey(t, false)
	_, test := newKey(t, true)
	created, err := s.CreateTenant(ctx, "Acme, Inc.", tenant.PlanPro, live, test)
	if err != nil {
		t.Fatal(err)
	}
	if created.ID == "" || created.Name != "Acme, Inc." || created.Plan != tenant.PlanPro ||
		created.BillingStatus != tenant.StatusActive || created.CreatedAt.IsZero() ||
		created.RateLimitPerMinute != 0 || created.QuotaPerMinute != nil || created.QuotaPerHour != nil {
		t.Fatalf("created %+v", created)
	}
	got, err := s.Tenant(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != created.ID || got.Name != created.Name || !got.CreatedAt.Equal(created.CreatedAt) {
		t.Fatalf("read back %+v, want %+v", got, created)
	}
	keys, err := s.Keys(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("the tenant has %d keys, want the 2 created with it", len(keys))
	}
	for _, k := range keys {
		if k.TenantID != created.ID {
			t.Errorf("key %s belongs to %s, want %s", k.ID, k.TenantID, created.ID)
		}
	}

	other, err := s.CreateTenant(ctx, "Other", tenant.PlanStarter)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != created.ID || all[1].ID != other.ID {
		t.Fatalf("Tenants: %+v, want %s then %s", all, created.ID, other.ID)
	}

	limited, err := s.SetTenantLimits(ctx, created.ID, tenant.TenantLimits{RateLimitPerMinute: 120, QuotaPerMinute: ptr(1000), QuotaPerHour: ptr(20000)})
	if err != nil {
		t.Fatal(err)
	}
	if limited.RateLimitPerMinute != 120 || *limited.QuotaPerMinute != 1000 || *limited.QuotaPerHour != 20000 {
		t.Fatalf("limits set: %+v", limited)
	}
	cleared, err := s.SetTenantLimits(ctx, created.ID, tenant.TenantLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if cleared.RateLimitPerMinute != 0 || cleared.QuotaPerMinute != nil || cleared.QuotaPerHour != nil {
		t.Fatalf("limits cleared: %+v", cleared)
	}
}

func TestTenantErrors(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanStarter)
	if err != nil {
		t.Fatal(err)
	}
	_, taken := newKey(t, false)
	taken.TenantID = acme.ID
	if _, err := s.CreateKey(ctx, taken); err != nil {
		t.Fatal(err)
	}
	_, dup := newKey(t, false)
	dup.Prefix = taken.Prefix

	const missing = "00000000-0000-0000-0000-000000000000"
	cases := []struct {
		name      string
		call      func() error
		want      error
		wantField string
	}{
		{"empty name", func() error { _, err := s.CreateTenant(ctx, "", tenant.PlanStarter); return err }, tenant.ErrInvalid, "name"},
		{"long name", func() error { _, err := s.CreateTenant(ctx, strings.Repeat("x", 201), tenant.PlanStarter); return err }, tenant.ErrInvalid, "name"},
		{"unknown plan", func() error { _, err := s.CreateTenant(ctx, "Acme", "platinum"); return err }, tenant.ErrInvalid, "plan"},
		{"key prefix taken", func() error { _, err := s.CreateTenant(ctx, "Dup", tenant.PlanStarter, dup); return err }, tenant.ErrConflict, ""},
		{"unknown tenant", func() error { _, err := s.Tenant(ctx, missing); return err }, tenant.ErrNotFound, ""},
		{"tenant ID not a UUID", func() error { _, err := s.Tenant(ctx, "acme'; --"); return err }, tenant.ErrNotFound, ""},
		{"limits of unknown tenant", func() error { _, err := s.SetTenantLimits(ctx, missing, tenant.TenantLimits{}); return err }, tenant.ErrNotFound, ""},
		{"negative rate limit", func() error {
			_, err := s.SetTenantLimits(ctx, acme.ID, tenant.TenantLimits{RateLimitPerMinute: -1})
			return err
		}, tenant.ErrInvalid, "rate_limit_per_minute"},
		{"zero quota", func() error {
			_, err := s.SetTenantLimits(ctx, acme.ID, tenant.TenantLimits{QuotaPerHour: ptr(0)})
			return err
		}, tenant.ErrInvalid, "quota_per_hour"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			var fe *tenant.FieldError
			if c.wantField != "" && (!errors.As(err, &fe) || fe.Field != c.wantField) {
				t.Fatalf("got %v, want a field error on %s", err, c.wantField)
			}
		})
	}
	// Nothing half-made: the failed creations left no tenant behind.
	all, err := s.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("%d tenants after failed creations, want 1", len(all))
	}
}

// TestInstantsReadBackInUTC: every instant a store reads back is in UTC,
// whatever the process's zone: the tenant's, its keys', an override's
// expiry, an admin's.
func TestInstantsReadBackInUTC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, dsn := newStore(t)
	_, k := newKey(t, false)
	tn, err := s.CreateTenant(ctx, "Acme", tenant.PlanStarter, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TouchKeys(ctx, map[string]time.Time{k.ID: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.PoolAt(t, dsn)
	if _, err := pool.Exec(ctx, "UPDATE tenants SET billing_updated_at = now() WHERE id = $1", tn.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.Tenant(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys(ctx, tn.ID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	policies := pgstore.NewPolicies(pool)
	p, err := policy.Parse("p", []byte(`{"limit":5,"window":"1m"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policies.PutPolicy(ctx, tn.ID, p); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	o, err := policies.PutOverride(ctx, tn.ID, "p", policy.Override{Pattern: "u", Limit: 2, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	a, err := pgstore.NewAdmins(pool).CreateAdmin(ctx, "ops@example.com", "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA")
	if err != nil {
		t.Fatal(err)
	}
	for what, at := range map[string]time.Time{
		"tenant created": got.CreatedAt, "tenant billing updated": *got.BillingUpdatedAt,
		"key created": keys[0].CreatedAt, "key last used": *keys[0].LastUsedAt, "key revoked": *keys[0].RevokedAt,
		"override expiry": *o.ExpiresAt, "admin created": a.CreatedAt,
	} {
		if at.Location() != time.UTC {
			t.Errorf("%s: %v, in %v; want UTC", what, at, at.Location())
		}
	}
}
