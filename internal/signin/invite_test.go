package signin

import (
	"testing"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
)

// TestInvitationsPerTenant: a tenant sends perHour invitations an hour,
// then is refused (nothing counted, a wait given) while another tenant's,
// and another realm's, count apart.
func TestInvitationsPerTenant(t *testing.T) {
	t.Parallel()
	local := memory.New(memory.Config{})
	t.Cleanup(func() { local.Close() })
	limits := gate.NewLimiter("test", nil, local, nil)
	l := NewLimiter(limits, []byte("test pepper"), "console")
	for i := range 4 {
		ref, err := l.Invitation(t.Context(), "tenant-a", 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ref == nil, i < 3; got != want {
			t.Fatalf("invitation %d: admitted %t, want %t (%+v)", i+1, got, want, ref)
		}
		if ref != nil && (ref.By != "invite" || ref.RetryAfter <= 0 || ref.Message == "") {
			t.Fatalf("the refusal: %+v", ref)
		}
	}
	for name, other := range map[string]*Limiter{"another tenant": l, "another realm": NewLimiter(limits, []byte("test pepper"), "admin")} {
		tenantID := "tenant-b"
		if other != l {
			tenantID = "tenant-a"
		}
		if ref, err := other.Invitation(t.Context(), tenantID, 3); err != nil || ref != nil {
			t.Errorf("%s: %+v, %v; want admitted", name, ref, err)
		}
	}
}
