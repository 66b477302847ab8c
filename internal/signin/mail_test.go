package signin

import (
	"testing"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
)

// TestLimiterMails: mails of one kind to one address are capped per hour
// whatever the network asking, another address or kind has its own count,
// and every request counts against the network's sign-in attempts.
func TestLimiterMails(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	l := NewLimiter(gate.NewLimiter("test", store, nil, nil), []byte("test pepper"), "console")
	ask := func(ip, kind, to string) *Refusal {
		t.Helper()
		ref, err := l.Mail(t.Context(), ip, kind, to, 3)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	for i, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		if ref := ask(ip, "reset", "a@example.com"); ref != nil {
			t.Fatalf("reset mail %d: refused %+v", i+1, ref)
		}
	}
	ref := ask("192.0.2.4", "reset", "a@example.com")
	if ref == nil || ref.By != "mail" || ref.RetryAfter <= 0 {
		t.Fatalf("a fourth reset mail to one address within the hour: %+v, want refused by mail", ref)
	}
	if ref := ask("192.0.2.4", "reset", "b@example.com"); ref != nil {
		t.Fatalf("another address: refused %+v", ref)
	}
	if ref := ask("192.0.2.4", "confirm", "a@example.com"); ref != nil {
		t.Fatalf("another kind of mail: refused %+v", ref)
	}
	for i := range SignInsPerIP + 1 {
		ref = ask("198.51.100.9", "reset", "c"+string(rune('a'+i))+"@example.com")
	}
	if ref == nil || ref.By != "ip" {
		t.Fatalf("past %d requests a minute from one network: %+v, want refused by ip", SignInsPerIP, ref)
	}
	if ref, err := l.Attempt(t.Context(), "198.51.100.9"); err != nil || ref == nil || ref.By != "ip" {
		t.Fatalf("an attempt from the network past its limit: %+v %v, want refused by ip", ref, err)
	}
	if ref, err := l.Attempt(t.Context(), "198.51.100.10"); err != nil || ref != nil {
		t.Fatalf("an attempt from another network: %+v %v", ref, err)
	}
}
