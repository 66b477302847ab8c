package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

// TestShortenKeyExpiry is what a console roll does to the old key: its
// expiry is brought forward to the end of the grace period (never pushed
// back), within its own tenant only, and the key works until then and not
// from then on (a Directory over the store, its clock injected).
func TestShortenKeyExpiry(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.CreateTenant(ctx, "Other", tenant.PlanPro)
	if err != nil {
		t.Fatal(err)
	}
	raw, k := newKey(t, false)
	k.TenantID = acme.ID
	if k, err = s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)

	if _, err := s.ShortenKeyExpiry(ctx, other.ID, k.ID, at); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("another tenant's key: %v, want ErrNotFound", err)
	}
	got, err := s.ShortenKeyExpiry(ctx, acme.ID, k.ID, at)
	if err != nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(at) {
		t.Fatalf("shortened: %+v %v, want expires %v", got.ExpiresAt, err, at)
	}
	if got, err := s.ShortenKeyExpiry(ctx, acme.ID, k.ID, at.Add(24*time.Hour)); err != nil || !got.ExpiresAt.Equal(at) {
		t.Fatalf("a later expiry moved it: %v %v, want %v", got.ExpiresAt, err, at)
	}

	now := at.Add(-time.Minute)
	d := tenant.NewDirectory(tenant.DirectoryConfig{Store: s, Now: func() time.Time { return now }})
	if _, _, err := d.Authenticate(ctx, raw); err != nil {
		t.Fatalf("a minute before its expiry: %v", err)
	}
	now = at
	var expired *tenant.ExpiredKeyError
	if _, _, err := d.Authenticate(ctx, raw); !errors.As(err, &expired) || !expired.ExpiredAt.Equal(at) {
		t.Fatalf("at its expiry: %v, want an ExpiredKeyError at %v", err, at)
	}

	if _, err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ShortenKeyExpiry(ctx, acme.ID, k.ID, at.Add(-time.Minute)); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("a revoked key: %v, want ErrNotFound", err)
	}
}
