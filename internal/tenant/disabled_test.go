package tenant_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

// TestAuthenticateDisabledTenant: once its tenant is disabled (and the
// Directory told, as the change notification tells it), a valid key is
// exactly ErrDisabled, for live and test keys alike; a key that is not
// valid (unknown, wrong secret, revoked) is still ErrUnauthorized, so that
// only a holder of a valid key learns the tenant is disabled; another
// tenant's key is untouched; enabling gives the keys back.
func TestAuthenticateDisabledTenant(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	d := newTestDirectory(db, clk, tenant.DirectoryConfig{})
	live, _ := db.addKey(t, db.acme.ID, false)
	test, _ := db.addKey(t, db.acme.ID, true)
	revoked, revokedKey := db.addKey(t, db.acme.ID, false)
	if _, err := db.direct.RevokeKey(ctx, revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	other, err := db.direct.CreateTenant(ctx, "Other", tenant.PlanStarter)
	if err != nil {
		t.Fatal(err)
	}
	otherLive, _ := db.addKey(t, other.ID, false)
	stranger, _ := newRawKey(t)
	wrongSecret := live[:strings.LastIndexByte(live, '_')] + stranger[strings.LastIndexByte(stranger, '_'):]
	// Cached before the change, as on a serving instance.
	for _, raw := range []string{live, test, otherLive} {
		if _, _, err := d.Authenticate(ctx, raw); err != nil {
			t.Fatalf("before disabling: %v", err)
		}
	}

	dt, err := db.direct.SetTenantDisabled(ctx, db.acme.ID, true, "chargeback")
	if err != nil {
		t.Fatal(err)
	}
	if dt.DisabledAt == nil || dt.DisabledReason != "chargeback" || !dt.Disabled() {
		t.Fatalf("SetTenantDisabled returned %+v", dt)
	}
	d.Invalidate("tenant", db.acme.ID)

	for name, c := range map[string]struct {
		bearer string
		want   error
	}{
		"live key":     {live, tenant.ErrDisabled},
		"test key":     {test, tenant.ErrDisabled},
		"revoked key":  {revoked, tenant.ErrUnauthorized},
		"wrong secret": {wrongSecret, tenant.ErrUnauthorized},
		"unknown key":  {stranger, tenant.ErrUnauthorized},
		"malformed":    {"tg_live_nope", tenant.ErrUnauthorized},
	} {
		k, tn, err := d.Authenticate(ctx, c.bearer)
		if err != c.want {
			t.Errorf("%s: got %v, want exactly %v", name, err, c.want)
		}
		if k.ID != "" || tn.ID != "" {
			t.Errorf("%s: refused, yet got key %q of tenant %q", name, k.ID, tn.ID)
		}
	}
	if _, tn, err := d.Authenticate(ctx, otherLive); err != nil || tn.ID != other.ID {
		t.Errorf("another tenant's key: %v", err)
	}

	// Disabling again keeps the first instant; enabling clears both.
	clk.Advance(time.Minute)
	again, err := db.direct.SetTenantDisabled(ctx, db.acme.ID, true, "")
	if err != nil || !again.DisabledAt.Equal(*dt.DisabledAt) || again.DisabledReason != "" {
		t.Fatalf("disabling twice: %+v, %v; want disabled_at %s kept, no reason", again, err, dt.DisabledAt)
	}
	en, err := db.direct.SetTenantDisabled(ctx, db.acme.ID, false, "ignored")
	if err != nil || en.DisabledAt != nil || en.DisabledReason != "" {
		t.Fatalf("enabling: %+v, %v", en, err)
	}
	d.Invalidate("tenant", db.acme.ID)
	for _, raw := range []string{live, test} {
		if _, tn, err := d.Authenticate(ctx, raw); err != nil || tn.ID != db.acme.ID {
			t.Fatalf("after enabling: %v", err)
		}
	}
	if _, _, err := d.Authenticate(ctx, revoked); err != tenant.ErrUnauthorized {
		t.Fatalf("the revoked key after enabling: %v", err)
	}
}

// TestSetTenantDisabledRefusals: an unknown tenant is ErrNotFound, a reason
// the schema would refuse a *FieldError, and neither changes anything.
func TestSetTenantDisabledRefusals(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		id, reason string
		want       error
	}{
		"unknown tenant":  {"00000000-0000-0000-0000-000000000000", "", tenant.ErrNotFound},
		"not a UUID":      {"acme'; --", "", tenant.ErrNotFound},
		"reason too long": {db.acme.ID, strings.Repeat("é", tenant.MaxDisabledReasonLen+1), tenant.ErrInvalid},
		"control chars":   {db.acme.ID, "a\nb", tenant.ErrInvalid},
		"blank reason":    {db.acme.ID, "   ", tenant.ErrInvalid},
	} {
		if _, err := db.direct.SetTenantDisabled(ctx, c.id, true, c.reason); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	if tn, err := db.direct.Tenant(ctx, db.acme.ID); err != nil || tn.Disabled() {
		t.Fatalf("a refused change disabled the tenant: %+v, %v", tn, err)
	}
	long := strings.Repeat("é", tenant.MaxDisabledReasonLen)
	if tn, err := db.direct.SetTenantDisabled(ctx, db.acme.ID, true, long); err != nil || tn.DisabledReason != long {
		t.Fatalf("a reason of %d characters: %v", tenant.MaxDisabledReasonLen, err)
	}
}
