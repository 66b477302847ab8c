package signin

import (
	"testing"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
)

// TestLimiterMailsAndAttempts: mails of one kind to one address are capped
// per hour, another address or kind has its own count; a network's
// attempts are the sign-in attempts' count, another network's apart.
func TestLimiterMailsAndAttempts(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	l := NewLimiter(gate.NewLimiter("test", store, nil, nil), []byte("test pepper"), "console")
	mail := func(kind, to string) *Refusal {
		t.Helper()
		ref, err := l.Mail(t.Context(), kind, to, 3)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	for i := range 3 {
		if ref := mail("reset", "a@example.com"); ref != nil {
			t.Fatalf("reset mail %d: refused %+v", i+1, ref)
		}
	}
	if ref := mail("reset", "a@example.com"); ref == nil || ref.By != "mail" || ref.RetryAfter <= 0 {
		t.Fatalf("a fourth reset mail to one address within the hour: %+v, want refused by mail", ref)
	}
	if ref := mail("reset", "b@example.com"); ref != nil {
		t.Fatalf("another address: refused %+v", ref)
	}
	if ref := mail("confirm", "a@example.com"); ref != nil {
		t.Fatalf("another kind of mail: refused %+v", ref)
	}

	attempt := func(ip string) *Refusal {
		t.Helper()
		ref, err := l.Attempt(t.Context(), ip)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	for i := range SignInsPerIP - 1 {
		if ref := attempt("198.51.100.9"); ref != nil {
			t.Fatalf("attempt %d: refused %+v", i+1, ref)
		}
	}
	if ref, err := l.Admit(t.Context(), "198.51.100.9", "a@example.com"); err != nil || ref != nil {
		t.Fatalf("a sign-in as the network's last attempt of the minute: %+v %v", ref, err)
	}
	if ref := attempt("198.51.100.9"); ref == nil || ref.By != "ip" {
		t.Fatalf("past %d attempts a minute from one network: %+v, want refused by ip", SignInsPerIP, ref)
	}
	if ref := attempt("198.51.100.10"); ref != nil {
		t.Fatalf("an attempt from another network: %+v", ref)
	}
}
