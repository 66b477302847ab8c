package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/console"
)

// TestSetMemberDisabled: disabling a member ends its sessions at once and
// keeps them from opening the console; enabling it again does not revive
// them; another tenant's id disables nothing.
func TestSetMemberDisabled(t *testing.T) {
	t.Parallel()
	s, _, c := newMembers(t)
	ctx := context.Background()
	a, _, _ := signUp(t, s, "a@example.com")
	b, _, _ := signUp(t, s, "b@example.com")
	raw, err := s.CreateSession(ctx, a.TenantID, a.ID, c.now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetMemberDisabled(ctx, b.TenantID, a.ID, true); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("disable a's member through b's tenant: %v, want ErrNotFound", err)
	}
	if _, _, err := s.SessionMember(ctx, raw); err != nil {
		t.Fatalf("a's session after the failed disable: %v", err)
	}
	m, err := s.SetMemberDisabled(ctx, a.TenantID, a.ID, true)
	if err != nil || m.DisabledAt == nil {
		t.Fatalf("disable: %+v, %v", m, err)
	}
	if _, _, err := s.SessionMember(ctx, raw); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("a disabled member's session: %v, want ErrNotFound", err)
	}
	m, err = s.SetMemberDisabled(ctx, a.TenantID, a.ID, false)
	if err != nil || m.DisabledAt != nil {
		t.Fatalf("enable: %+v, %v", m, err)
	}
	if _, _, err := s.SessionMember(ctx, raw); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("a session ended by the disable, after the enable: %v, want ErrNotFound", err)
	}
}
