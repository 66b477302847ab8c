package tenant

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"
)

// clock is a time source that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeStore holds what the Directory reads, counts the reads, and can hold
// a key load until released.
type fakeStore struct {
	Store // methods the Directory never calls stay nil

	mu          sync.Mutex
	keys        map[string]Key // by prefix
	tenants     map[string]Tenant
	plans       []Plan
	keyLoads    int
	tenantLoads int
	planLoads   int
	touches     []map[string]time.Time
	fail        error // every load fails with it when set
	touchErr    error
	// hold, when set, makes KeyByPrefix read its answer, report on
	// started, and wait for hold to close before returning it.
	hold    chan struct{}
	started chan struct{}
}

func (s *fakeStore) KeyByPrefix(ctx context.Context, prefix string) (Key, error) {
	s.mu.Lock()
	s.keyLoads++
	k, ok := s.keys[prefix]
	fail, hold, started := s.fail, s.hold, s.started
	s.mu.Unlock()
	if hold != nil {
		started <- struct{}{}
		<-hold
	}
	switch {
	case fail != nil:
		return Key{}, fail
	case !ok:
		return Key{}, ErrNotFound
	}
	return k, nil
}

func (s *fakeStore) Tenant(ctx context.Context, id string) (Tenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenantLoads++
	t, ok := s.tenants[id]
	switch {
	case s.fail != nil:
		return Tenant{}, s.fail
	case !ok:
		return Tenant{}, ErrNotFound
	}
	return t, nil
}

func (s *fakeStore) Plans(ctx context.Context) ([]Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.planLoads++
	if s.fail != nil {
		return nil, s.fail
	}
	return append([]Plan(nil), s.plans...), nil
}

func (s *fakeStore) TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.touchErr != nil {
		return s.touchErr
	}
	s.touches = append(s.touches, maps.Clone(lastUsed))
	return nil
}

func (s *fakeStore) addKey(t *testing.T, tenantID string, test bool) (string, Key) {
	t.Helper()
	raw, k, err := NewKey(test)
	if err != nil {
		t.Fatal(err)
	}
	k.TenantID = tenantID
	s.mu.Lock()
	s.keys[k.Prefix] = k
	s.mu.Unlock()
	return raw, k
}

func (s *fakeStore) revoke(prefix string, at time.Time) {
	s.mu.Lock()
	k := s.keys[prefix]
	k.RevokedAt = &at
	s.keys[prefix] = k
	s.mu.Unlock()
}

func (s *fakeStore) loads() (keys, tenants, plans int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keyLoads, s.tenantLoads, s.planLoads
}

const tenantID = "11111111-2222-3333-4444-555555555555"

func newFake() *fakeStore {
	return &fakeStore{
		keys:    map[string]Key{},
		tenants: map[string]Tenant{tenantID: {ID: tenantID, Name: "Acme", Plan: PlanPro, BillingStatus: StatusActive}},
		plans: []Plan{
			{Name: PlanStarter, IPPerMinute: 600},
			{Name: PlanPro, IPPerMinute: 60_000},
			{Name: PlanEnterprise, IPPerMinute: 600_000},
		},
	}
}

func newTestDirectory(s *fakeStore, clk *clock, cfg DirectoryConfig) *Directory {
	cfg.Store = s
	cfg.Now = clk.Now
	cfg.Logger = slog.New(slog.DiscardHandler)
	return NewDirectory(cfg)
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	s := newFake()
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(s, clk, DirectoryConfig{})
	live, liveKey := s.addKey(t, tenantID, false)
	test, testKey := s.addKey(t, tenantID, true)
	revoked, revokedKey := s.addKey(t, tenantID, false)
	s.revoke(revokedKey.Prefix, clk.Now())
	orphan, _ := s.addKey(t, "99999999-2222-3333-4444-555555555555", false)
	stranger, _, _ := NewKey(false)
	wrongSecret := live[:len(live)-secretLen] + stranger[len(stranger)-secretLen:]

	cases := []struct {
		name    string
		bearer  string
		wantKey Key
	}{
		{"live key", live, liveKey},
		{"test key", test, testKey},
		{"empty", "", Key{}},
		{"malformed", "tg_live_nope", Key{}},
		{"unknown prefix", stranger, Key{}},
		{"known prefix, wrong secret", wrongSecret, Key{}},
		{"known prefix and secret, wrong mode", "tg_test_" + live[len("tg_live_"):], Key{}},
		{"revoked", revoked, Key{}},
		{"tenant gone", orphan, Key{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k, tn, err := d.Authenticate(context.Background(), c.bearer)
			if c.wantKey.ID == "" {
				// ErrUnauthorized itself, unwrapped: nothing says which case.
				if err != ErrUnauthorized {
					t.Fatalf("got %v, want exactly ErrUnauthorized", err)
				}
				if k.ID != "" || tn.ID != "" {
					t.Fatalf("refused, yet got key %q of tenant %q", k.ID, tn.ID)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want the key", err)
			}
			if k.ID != c.wantKey.ID || k.Test != c.wantKey.Test || tn.ID != tenantID {
				t.Errorf("got key %s (test %v) of tenant %s, want %s (test %v) of %s", k.ID, k.Test, tn.ID, c.wantKey.ID, c.wantKey.Test, tenantID)
			}
			if k.Hash != nil {
				t.Errorf("Authenticate handed out the key's hash")
			}
		})
	}
}

func TestAuthenticateStoreDown(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{})
	live, _ := s.addKey(t, tenantID, false)
	s.fail = errors.New("connection refused")
	_, _, err := d.Authenticate(context.Background(), live)
	if err == nil || errors.Is(err, ErrUnauthorized) {
		t.Fatalf("got %v, want the store's failure, not ErrUnauthorized", err)
	}
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	if _, _, err := d.Authenticate(context.Background(), live); err != nil {
		t.Fatalf("after the store came back: %v (a failure must not be cached)", err)
	}
}

func TestConcurrentMissesLoadOnce(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{})
	live, _ := s.addKey(t, tenantID, false)
	s.hold, s.started = make(chan struct{}), make(chan struct{}, 1)
	const callers = 50
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, _, err := d.Authenticate(context.Background(), live)
			errs <- err
		}()
	}
	<-s.started
	close(s.hold)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if keys, tenants, _ := s.loads(); keys != 1 || tenants != 1 {
		t.Fatalf("%d callers: %d key loads and %d tenant loads, want 1 and 1", callers, keys, tenants)
	}
}

func TestCallerGivingUpDoesNotFailOthers(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{})
	live, _ := s.addKey(t, tenantID, false)
	s.hold, s.started = make(chan struct{}), make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, _, err := d.Authenticate(ctx, live)
		first <- err
	}()
	<-s.started
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: got %v, want context.Canceled", err)
	}
	second := make(chan error, 1)
	go func() {
		_, _, err := d.Authenticate(context.Background(), live)
		second <- err
	}()
	close(s.hold)
	if err := <-second; err != nil {
		t.Fatalf("a caller waiting on the same load: %v", err)
	}
	if keys, _, _ := s.loads(); keys != 1 {
		t.Fatalf("%d key loads, want 1", keys)
	}
}

func TestUnknownPrefixRemembered(t *testing.T) {
	t.Parallel()
	s := newFake()
	clk := &clock{}
	d := newTestDirectory(s, clk, DirectoryConfig{MissTTL: 5 * time.Second})
	raw, k, _ := NewKey(false)
	for range 10 {
		if _, _, err := d.Authenticate(context.Background(), raw); err != ErrUnauthorized {
			t.Fatalf("unknown key: got %v, want ErrUnauthorized", err)
		}
	}
	if keys, _, _ := s.loads(); keys != 1 {
		t.Fatalf("10 tries of one unknown key: %d loads, want 1", keys)
	}
	clk.Advance(5 * time.Second)
	d.Authenticate(context.Background(), raw)
	if keys, _, _ := s.loads(); keys != 2 {
		t.Fatalf("after MissTTL: %d loads, want 2", keys)
	}
	// The key is created, and its notification arrives.
	k.TenantID = tenantID
	s.mu.Lock()
	s.keys[k.Prefix] = k
	s.mu.Unlock()
	d.Invalidate("key", k.Prefix)
	if _, _, err := d.Authenticate(context.Background(), raw); err != nil {
		t.Fatalf("a key created after a miss, once invalidated: %v", err)
	}
}

func TestUnknownPrefixesBounded(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{MaxMisses: 3})
	var raws []string
	for range 10 {
		raw, _, _ := NewKey(false)
		raws = append(raws, raw)
		d.Authenticate(context.Background(), raw)
	}
	d.keys.mu.Lock()
	n := len(d.keys.misses)
	d.keys.mu.Unlock()
	if n != 3 {
		t.Fatalf("10 unknown prefixes, MaxMisses 3: %d remembered, want 3", n)
	}
	for _, raw := range raws[7:] {
		d.Authenticate(context.Background(), raw)
	}
	if keys, _, _ := s.loads(); keys != 10 {
		t.Fatalf("the 3 newest misses again: %d loads in all, want 10 (answered from memory)", keys)
	}
	d.Authenticate(context.Background(), raws[0])
	if keys, _, _ := s.loads(); keys != 11 {
		t.Fatalf("the oldest miss again: %d loads in all, want 11 (it was forgotten)", keys)
	}
}

func TestEntriesExpireAfterTTL(t *testing.T) {
	t.Parallel()
	s := newFake()
	clk := &clock{}
	d := newTestDirectory(s, clk, DirectoryConfig{TTL: 30 * time.Second})
	live, k := s.addKey(t, tenantID, false)
	if _, _, err := d.Authenticate(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	// Revoked, and the notification lost.
	s.revoke(k.Prefix, clk.Now())
	clk.Advance(29 * time.Second)
	if _, _, err := d.Authenticate(context.Background(), live); err != nil {
		t.Fatalf("within TTL: got %v, want the cached key", err)
	}
	clk.Advance(time.Second)
	if _, _, err := d.Authenticate(context.Background(), live); err != ErrUnauthorized {
		t.Fatalf("after TTL: got %v, want ErrUnauthorized", err)
	}
}

func TestInvalidateDuringLoad(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{})
	live, k := s.addKey(t, tenantID, false)
	hold := make(chan struct{})
	s.hold, s.started = hold, make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := d.Authenticate(context.Background(), live)
		done <- err
	}()
	<-s.started // the load has read the key, not yet revoked
	s.mu.Lock()
	s.hold = nil
	s.mu.Unlock()
	s.revoke(k.Prefix, time.Now())
	d.Invalidate("key", k.Prefix)
	if _, _, err := d.Authenticate(context.Background(), live); err != ErrUnauthorized {
		t.Fatalf("after the invalidation, while the old load runs: got %v, want ErrUnauthorized", err)
	}
	close(hold)
	<-done // answered as of before the revocation, when it asked
	if _, _, err := d.Authenticate(context.Background(), live); err != ErrUnauthorized {
		t.Fatalf("after the old load finished: got %v, want ErrUnauthorized (its result must not be cached)", err)
	}
	if keys, _, _ := s.loads(); keys != 2 {
		t.Fatalf("%d key loads, want 2", keys)
	}
}

func TestInvalidateKinds(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{})
	ctx := context.Background()
	if _, err := d.Tenant(ctx, tenantID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Plans(ctx); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.tenants[tenantID] = Tenant{ID: tenantID, Plan: PlanEnterprise}
	s.plans[0].IPPerMinute = 900
	s.mu.Unlock()

	d.Invalidate("policy", tenantID) // not the Directory's
	if tn, _ := d.Tenant(ctx, tenantID); tn.Plan != PlanPro {
		t.Fatalf("a policy notification dropped the tenant")
	}
	d.Invalidate("tenant", tenantID)
	if tn, _ := d.Tenant(ctx, tenantID); tn.Plan != PlanEnterprise {
		t.Fatalf("after tenant:%s: plan %s, want enterprise", tenantID, tn.Plan)
	}
	if p, _ := d.Plan(ctx, PlanStarter); p.IPPerMinute != 600 {
		t.Fatalf("a tenant notification dropped the plans")
	}
	d.Invalidate("plan", PlanStarter)
	if p, _ := d.Plan(ctx, PlanStarter); p.IPPerMinute != 900 {
		t.Fatalf("after plan:starter: ip_per_minute %d, want 900", p.IPPerMinute)
	}
	if _, err := d.Plan(ctx, "platinum"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown plan: got %v, want ErrNotFound", err)
	}

	s.mu.Lock()
	s.tenants[tenantID] = Tenant{ID: tenantID, Plan: PlanStarter}
	s.plans[0].IPPerMinute = 700
	s.mu.Unlock()
	d.InvalidateAll()
	if tn, _ := d.Tenant(ctx, tenantID); tn.Plan != PlanStarter {
		t.Fatalf("after InvalidateAll: tenant plan %s, want starter", tn.Plan)
	}
	if p, _ := d.Plan(ctx, PlanStarter); p.IPPerMinute != 700 {
		t.Fatalf("after InvalidateAll: ip_per_minute %d, want 700", p.IPPerMinute)
	}
}

func TestMaxIPPerMinute(t *testing.T) {
	t.Parallel()
	s := newFake()
	d := newTestDirectory(s, &clock{}, DirectoryConfig{})
	ctx := context.Background()
	if got := d.MaxIPPerMinute(ctx); got != 600_000 {
		t.Fatalf("got %d, want 600000", got)
	}
	s.mu.Lock()
	s.fail = errors.New("down")
	s.mu.Unlock()
	d.InvalidateAll()
	if got := d.MaxIPPerMinute(ctx); got != 600_000 {
		t.Fatalf("store down: got %d, want the last value, 600000", got)
	}
	cold := newTestDirectory(s, &clock{}, DirectoryConfig{})
	if got := cold.MaxIPPerMinute(ctx); got != DefaultIPPerMinute {
		t.Fatalf("store down from the start: got %d, want DefaultIPPerMinute", got)
	}
}

func TestRunWritesUsesInOneBatch(t *testing.T) {
	t.Parallel()
	s := newFake()
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(s, clk, DirectoryConfig{FlushEvery: time.Hour})
	var raws []string
	want := map[string]time.Time{}
	for range 3 {
		raw, k := s.addKey(t, tenantID, false)
		raws = append(raws, raw)
		want[k.ID] = clk.Now().Add(100 * time.Millisecond) // the last of 100 uses
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for range 100 {
		clk.Advance(time.Millisecond)
		for _, raw := range raws {
			if _, _, err := d.Authenticate(context.Background(), raw); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.touches) != 1 {
		t.Fatalf("300 uses of 3 keys: %d writes, want 1", len(s.touches))
	}
	if !maps.Equal(s.touches[0], want) {
		t.Fatalf("written %v, want %v", s.touches[0], want)
	}
}

func TestFailedFlushIsRetried(t *testing.T) {
	t.Parallel()
	s := newFake()
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	d := newTestDirectory(s, clk, DirectoryConfig{})
	a, ka := s.addKey(t, tenantID, false)
	b, kb := s.addKey(t, tenantID, false)
	ctx := context.Background()
	d.Authenticate(ctx, a)
	s.touchErr = errors.New("down")
	d.flush(ctx, true)
	s.touchErr = nil
	clk.Advance(time.Second)
	d.Authenticate(ctx, b)
	d.flush(ctx, true)
	want := map[string]time.Time{ka.ID: clk.Now().Add(-time.Second), kb.ID: clk.Now()}
	if len(s.touches) != 1 || !maps.Equal(s.touches[0], want) {
		t.Fatalf("after a failed write: writes %v, want one of %v", s.touches, want)
	}
}
