package admin

import (
	"errors"
	"strings"
	"testing"
)

// cheap keeps the tests fast; the format is the real one.
var cheap = Argon2Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

func TestPasswordHash(t *testing.T) {
	t.Parallel()
	h, err := HashPassword("correct horse battery", cheap)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string", h)
	}
	h2, _ := HashPassword("correct horse battery", cheap)
	if h == h2 {
		t.Fatal("two hashes of one password are equal: no salt")
	}
	for _, c := range []struct {
		name, password string
		ok             bool
	}{
		{"right", "correct horse battery", true},
		{"wrong", "correct horse batterY", false},
		{"prefix", "correct horse batter", false},
		{"empty", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ok, err := CheckPassword(h, c.password)
			if err != nil || ok != c.ok {
				t.Errorf("CheckPassword(%q) = %v, %v; want %v", c.password, ok, err, c.ok)
			}
		})
	}
	// The default parameters write themselves into the hash.
	d, _ := HashPassword("correct horse battery", DefaultArgon2)
	if !strings.HasPrefix(d, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("default hash %q", d)
	}
}

func TestCheckPasswordRefusesMalformedHashes(t *testing.T) {
	t.Parallel()
	for _, h := range []string{
		"", "plain", "$argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=18$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=4194304,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=64,t=1,p=1$!!$aGFzaGhhc2hoYXNoaGFzaA",
	} {
		if _, err := CheckPassword(h, "x"); err == nil {
			t.Errorf("CheckPassword accepted the hash %q", h)
		}
	}
}

func TestValidatePassword(t *testing.T) {
	t.Parallel()
	if _, err := HashPassword("short", cheap); !errors.Is(err, ErrInvalid) {
		t.Errorf("short password: %v", err)
	}
	if err := ValidatePassword(strings.Repeat("x", MaxPasswordLen+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("long password: %v", err)
	}
}

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"Ops@Example.com", "ops@example.com"},
		{"  a@b  ", "a@b"},
		{"", ""}, {"no-at", ""}, {"@example.com", ""}, {"a@", ""}, {"a@b@c", ""}, {"a b@c", ""},
		{strings.Repeat("a", 250) + "@b.cd", ""},
	} {
		got, err := NormalizeEmail(c.in)
		if got != c.want || (c.want == "") != errors.Is(err, ErrInvalid) {
			t.Errorf("NormalizeEmail(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	a, ha, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, hb, _ := NewToken()
	if a == b || len(a) != 43 || len(ha) != 32 || string(ha) == string(hb) || string(HashToken(a)) != string(ha) {
		t.Fatalf("tokens %q %q", a, b)
	}
}
