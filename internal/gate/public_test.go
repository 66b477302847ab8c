package gate_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
)

// TestPublicPages: each client IP has its own bucket per route, and the
// instance ceiling holds across clients; a client refused by its own bucket
// does not spend the ceiling the others share.
func TestPublicPages(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	local := memory.New(memory.Config{Now: func() time.Time { return now }})
	t.Cleanup(func() { local.Close() })
	g, err := gate.New(gate.Config{Store: store, Local: local, Pepper: []byte("public pages pepper"), InstanceCeiling: 10, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")

	for i := range 3 {
		if v := g.Public(ctx, "home", a, 3); v.Refusal != nil || !v.Allowed {
			t.Fatalf("request %d of 3: refused by %s", i+1, v.Refusal.Layer)
		}
	}
	v := g.Public(ctx, "home", a, 3)
	if v.Refusal == nil || v.Refusal.Layer != admission.LayerIP || v.Refusal.Limit != 3 || v.Refusal.RetryAfter <= 0 || v.Allowed {
		t.Fatalf("fourth request: %+v, want an ip refusal with a retry", v.Refusal)
	}
	// Another route, another bucket; another address, another bucket.
	if v := g.Public(ctx, "admin", a, 3); v.Refusal != nil {
		t.Fatalf("another route: refused by %s", v.Refusal.Layer)
	}
	// The refused floods spent nothing of the instance ceiling: of its 10
	// this second, a and the admin route took 4, so b has 6.
	for range 20 {
		g.Public(ctx, "home", a, 3)
	}
	for i := range 6 {
		if v := g.Public(ctx, "home", b, 100); v.Refusal != nil {
			t.Fatalf("request %d from another address: refused by %s", i+1, v.Refusal.Layer)
		}
	}
	v = g.Public(ctx, "home", b, 100)
	if v.Refusal == nil || v.Refusal.Layer != admission.LayerInstance || v.Refusal.Limit != 10 {
		t.Fatalf("past the instance ceiling: %+v, want an instance refusal", v.Refusal)
	}
}
