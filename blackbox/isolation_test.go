package blackbox

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestTestKeysLiveInTheSandbox: a test key drains a live policy's subject
// on counters of its own (the live key is still admitted), and cannot
// delete a policy or start a Checkout.
func TestTestKeysLiveInTheSandbox(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "login", map[string]any{"limit": 3, "window": "1h"})
	item := map[string]any{"policy": "login", "subject": "alice"}
	for range 5 {
		check(t, in, nt.TestKey, item)
	}
	var ans checkAnswer
	check(t, in, nt.LiveKey, item).json(t, &ans)
	if !ans.Allowed || ans.Items[0].Remaining != 2 {
		t.Errorf("the live key after a test key drained the subject: %+v", ans)
	}
	for _, c := range []call{
		do(t, "DELETE", in.base+"/v1/policies/login", nt.TestKey, nil),
		do(t, "PUT", in.base+"/v1/policies/login", nt.TestKey, map[string]any{"limit": 1000, "window": "1h"}),
		do(t, "POST", in.base+"/v1/billing/checkout", nt.TestKey, map[string]any{"plan": "enterprise", "success_url": "https://a.example/", "cancel_url": "https://a.example/"}),
	} {
		if c.status != 403 || !bytes.Contains(c.body, []byte("test-key-read-only")) {
			t.Errorf("a change with a test key: %d %s, want 403 test-key-read-only", c.status, c.body)
		}
	}
	if c := do(t, "GET", in.base+"/v1/policies/login", nt.LiveKey, nil); c.status != 200 || !bytes.Contains(c.body, []byte(`"limit":3`)) {
		t.Errorf("the policy after the test key's changes: %d %s", c.status, c.body)
	}
}

// TestClientAddressesCannotRotate: behind a trusted proxy, rotating IPv6
// addresses inside one /64, or sending a provider header the proxy could not
// have meant (garbage, empty, a list), buys no new per-IP bucket.
func TestClientAddressesCannotRotate(t *testing.T) {
	dsn := pgtest.New(t)
	xff := start(t, dsn, "TOLLGATE_TRUSTED_PROXIES=127.0.0.1/32")
	real := start(t, dsn, "TOLLGATE_TRUSTED_PROXIES=127.0.0.1/32", "TOLLGATE_CLIENT_IP_HEADER=x-real-ip")
	nt := createTenant(t, dsn, "pro")
	sql(t, dsn, "UPDATE tenants SET rate_limit_per_minute = 3 WHERE id = $1", nt.TenantID)
	putPolicy(t, xff, nt.LiveKey, "open", map[string]any{"limit": 1000, "window": "1h"})
	item := map[string]any{"policy": "open", "subject": "s"}

	admitted := func(in *instance, header string, values []string) int {
		n := 0
		for _, v := range values {
			c := do(t, "POST", in.base+"/v1/check", nt.LiveKey, map[string]any{"items": []any{item}}, header, v)
			switch c.status {
			case 200:
				n++
			case 429:
				if c.header.Get("X-RateLimit-Layer") != "ip" {
					t.Errorf("%s %q: refused by %s", header, v, c.header.Get("X-RateLimit-Layer"))
				}
			default:
				t.Errorf("%s %q: %d %s", header, v, c.status, c.body)
			}
		}
		return n
	}
	var sixty4 []string
	for i := range 6 {
		sixty4 = append(sixty4, fmt.Sprintf("2001:db8:aa:bb:%x::%x", i*4099, i+1))
	}
	if n := admitted(xff, "X-Forwarded-For", sixty4); n != 3 {
		t.Errorf("six addresses of one /64 at 3 a minute: %d admitted", n)
	}
	if n := admitted(xff, "X-Forwarded-For", []string{"2001:db8:aa:bc::1"}); n != 1 {
		t.Errorf("another /64: %d admitted, want 1", n)
	}
	bad := []string{"garbage", "", "198.51.100.1, 198.51.100.2", "not-an-ip", "::zz", "300.1.1.1"}
	if n := admitted(real, "X-Real-IP", bad); n != 3 {
		t.Errorf("six unusable X-Real-IP values at 3 a minute: %d admitted", n)
	}
}

// TestKeyGuessingIsBounded: random well-formed keys from one client are
// refused by the per-IP layer once they have failed 60 times in a minute,
// before any lookup, and a right key from that client is refused too until
// the window passes, which is what a guesser's address deserves.
func TestKeyGuessingIsBounded(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn)
	refusedAt := 0
	for i := range 80 {
		key := fmt.Sprintf("tg_live_%012d_%032d", i, i)
		c := check(t, in, key, map[string]any{"policy": "p", "subject": "s"})
		if c.status == 429 {
			if c.header.Get("X-RateLimit-Layer") != "ip" {
				t.Fatalf("guess %d refused by %q", i+1, c.header.Get("X-RateLimit-Layer"))
			}
			refusedAt = i + 1
			break
		}
		if c.status != 401 {
			t.Fatalf("guess %d: %d %s", i+1, c.status, c.body)
		}
	}
	if refusedAt != 61 {
		t.Errorf("first refusal at guess %d, want 61", refusedAt)
	}
}
