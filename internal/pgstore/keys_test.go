package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
)

func TestKeyRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro)
	if err != nil {
		t.Fatal(err)
	}
	raw, k := newKey(t, true)
	k.TenantID = acme.ID
	created, err := s.CreateKey(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if created.ID != k.ID || created.Prefix != k.Prefix || !created.Test || !bytes.Equal(created.Hash, k.Hash) ||
		created.CreatedAt.IsZero() || created.RevokedAt != nil || created.LastUsedAt != nil {
		t.Fatalf("created %+v from %+v", created, k)
	}
	got, err := s.KeyByPrefix(ctx, k.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || got.TenantID != acme.ID || !bytes.Equal(got.Hash, k.Hash) {
		t.Fatalf("by prefix: %+v", got)
	}
	if bytes.Contains([]byte(got.Prefix), []byte(raw[len(raw)-8:])) {
		t.Fatalf("the stored prefix holds part of the secret")
	}

	revoked, err := s.RevokeKey(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if revoked.RevokedAt == nil {
		t.Fatalf("revoked key has no revoked_at")
	}
	again, err := s.RevokeKey(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again.RevokedAt == nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Fatalf("revoking twice moved revoked_at from %v to %v", revoked.RevokedAt, again.RevokedAt)
	}
	if got, _ := s.KeyByPrefix(ctx, k.Prefix); got.RevokedAt == nil {
		t.Fatalf("KeyByPrefix lost the revocation")
	}

	for name, call := range map[string]func() error{
		"unknown prefix": func() error { _, err := s.KeyByPrefix(ctx, "NoSuchPrefix"); return err },
		"revoke unknown": func() error { _, err := s.RevokeKey(ctx, "key_nope"); return err },
		"unknown tenant": func() error {
			_, k := newKey(t, false)
			k.TenantID = "00000000-0000-0000-0000-000000000000"
			_, err := s.CreateKey(ctx, k)
			return err
		},
		"tenant not a UUID": func() error {
			_, k := newKey(t, false)
			k.TenantID = "acme"
			_, err := s.CreateKey(ctx, k)
			return err
		},
	} {
		if err := call(); !errors.Is(err, tenant.ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound", name, err)
		}
	}
	_, dup := newKey(t, false)
	dup.TenantID, dup.Prefix = acme.ID, k.Prefix
	if _, err := s.CreateKey(ctx, dup); !errors.Is(err, tenant.ErrConflict) {
		t.Errorf("duplicate prefix: got %v, want ErrConflict", err)
	}
}

func TestTouchKeys(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	_, a := newKey(t, false)
	_, b := newKey(t, false)
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro, a, b)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	if err := s.TouchKeys(ctx, map[string]time.Time{a.ID: t0, b.ID: t0.Add(time.Second), "key_unknown": t0}); err != nil {
		t.Fatal(err)
	}
	// Never backwards: an instance whose flush is older loses.
	if err := s.TouchKeys(ctx, map[string]time.Time{a.ID: t0.Add(-time.Hour), b.ID: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{a.ID: t0, b.ID: t0.Add(2 * time.Second)}
	for _, k := range keys {
		if k.LastUsedAt == nil || !k.LastUsedAt.Equal(want[k.ID]) {
			t.Errorf("key %s last used %v, want %v", k.ID, k.LastUsedAt, want[k.ID])
		}
	}
}

// countingStore counts the Directory's writes of last use.
type countingStore struct {
	tenant.Store
	mu      sync.Mutex
	touches []int
}

func (s *countingStore) TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	s.mu.Lock()
	s.touches = append(s.touches, len(lastUsed))
	s.mu.Unlock()
	return s.Store.TouchKeys(ctx, lastUsed)
}

func TestDirectoryWritesLastUseInOneStatement(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	var raws []string
	var keys []tenant.Key
	for range 5 {
		raw, k := newKey(t, false)
		raws, keys = append(raws, raw), append(keys, k)
	}
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro, keys...)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: s}
	d := tenant.NewDirectory(tenant.DirectoryConfig{Store: cs, FlushEvery: time.Hour})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	before := time.Now()
	for range 200 {
		for _, raw := range raws {
			if _, _, err := d.Authenticate(ctx, raw); err != nil {
				t.Fatal(err)
			}
		}
	}
	after := time.Now()
	stored, err := s.Keys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range stored {
		if k.LastUsedAt != nil {
			t.Fatalf("last_used_at written before the flush: a write per request?")
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(cs.touches) != 1 || cs.touches[0] != len(raws) {
		t.Fatalf("1,000 uses of %d keys: writes of %v keys, want one write of %d", len(raws), cs.touches, len(raws))
	}
	stored, err = s.Keys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range stored {
		// PostgreSQL keeps microseconds.
		if k.LastUsedAt == nil || k.LastUsedAt.Before(before.Truncate(time.Microsecond)) || k.LastUsedAt.After(after) {
			t.Errorf("key %s last used %v, want between %v and %v", k.ID, k.LastUsedAt, before, after)
		}
	}
}

// Uses racing with flushes every millisecond: each key's written last use is
// its latest, none lost to a flush that removed the key's entry as a
// request noted a use in it.
func TestDirectoryLastUseRaceWithFlushes(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	var raws []string
	var keys []tenant.Key
	for range 3 {
		raw, k := newKey(t, false)
		raws, keys = append(raws, raw), append(keys, k)
	}
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro, keys...)
	if err != nil {
		t.Fatal(err)
	}
	d := tenant.NewDirectory(tenant.DirectoryConfig{Store: s, FlushEvery: time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	var mu sync.Mutex
	latest := map[string]time.Time{} // key ID -> just before its last use
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 {
				raw := raws[(g+i)%len(raws)]
				before := time.Now()
				k, _, err := d.Authenticate(ctx, raw)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if before.After(latest[k.ID]) {
					latest[k.ID] = before
				}
				mu.Unlock()
				if i%50 == 0 {
					time.Sleep(time.Millisecond) // let a flush find the entries idle
				}
			}
		}()
	}
	wg.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stored, err := s.Keys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range stored {
		if k.LastUsedAt == nil || k.LastUsedAt.Before(latest[k.ID].Truncate(time.Microsecond)) {
			t.Errorf("key %s last used %v, but it was used after %v", k.ID, k.LastUsedAt, latest[k.ID])
		}
	}
}

// TestKeyNameAndExpiry: a key keeps its name and expiry; a name that is no
// name is refused as invalid input.
func TestKeyNameAndExpiry(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	_, live := newKey(t, false)
	live.Name = "first live key"
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro, live)
	if err != nil {
		t.Fatal(err)
	}
	_, k := newKey(t, false)
	expiry := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	k.TenantID, k.Name, k.ExpiresAt = acme.ID, "checkout service", &expiry
	if _, err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Name != "first live key" || keys[0].ExpiresAt != nil ||
		keys[1].Name != "checkout service" || keys[1].ExpiresAt == nil || !keys[1].ExpiresAt.Equal(expiry) {
		t.Fatalf("keys = %+v", keys)
	}
	for _, name := range []string{"   ", "tab\there", strings.Repeat("n", tenant.MaxKeyNameLen+1), "\xff"} {
		_, bad := newKey(t, false)
		bad.TenantID, bad.Name = acme.ID, name
		if _, err := s.CreateKey(ctx, bad); !errors.Is(err, tenant.ErrInvalid) {
			t.Errorf("key named %q: %v, want ErrInvalid", name, err)
		}
	}
	_, bad := newKey(t, false)
	bad.Name = "\x00"
	if _, err := s.CreateTenant(ctx, "Beta", tenant.PlanPro, bad); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("tenant with a key named NUL: %v, want ErrInvalid", err)
	}
}
