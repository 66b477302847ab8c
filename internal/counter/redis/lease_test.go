package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
)

// TestLeaseKeys checks the keys a group's leases live in: three, under the
// group's hash tag and apart from its counters ("!" after the tag, where
// counters have ":"), expiring a second after the group's latest lease,
// and a second after a release of the last one.
func TestLeaseKeys(t *testing.T) {
	t.Parallel()
	s, raw, prefix := newStore(t, 5*time.Second)
	ctx := context.Background()
	if _, err := s.Acquire(ctx, counter.Acquire{Group: "t1", Key: "k", Tally: "p", ID: "a", Limit: 2, TTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	keys, err := raw.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{prefix + "{t1}!lx": true, prefix + "{t1}!ids": true, prefix + "{t1}!exp": true}
	if len(keys) != len(want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	for _, k := range keys {
		if !want[k] {
			t.Fatalf("key %s, want only %v", k, want)
		}
		ttl, err := raw.PTTL(ctx, k).Result()
		if err != nil || ttl <= 3*time.Second || ttl > 4*time.Second+100*time.Millisecond {
			t.Errorf("%s expires in %s (%v), want the lease's 3 s and a second", k, ttl, err)
		}
	}
	if err := s.Release(ctx, counter.LeaseRef{Group: "t1", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if ttl, err := raw.PTTL(ctx, k).Result(); err != nil || ttl > time.Second {
			// The ids hash and the sets may be gone already: empty, Redis
			// deletes them (PTTL -2).
			t.Errorf("%s after the last release expires in %s (%v), want at most a second", k, ttl, err)
		}
	}
}
