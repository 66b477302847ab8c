package policy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLoader returns a Set holding one policy whose limit is the number of
// the load, so a test can tell loads apart. When gate is not nil each load
// waits for a value on it (or its ctx).
type fakeLoader struct {
	loads   atomic.Int64
	gate    chan struct{}
	started chan string
	err     error
}

func (f *fakeLoader) LoadSet(ctx context.Context, tenantID string) (Set, error) {
	n := f.loads.Add(1)
	if f.started != nil {
		f.started <- tenantID
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return Set{}, ctx.Err()
		}
	}
	if f.err != nil {
		return Set{}, f.err
	}
	return NewSet([]Policy{{Name: tenantID, Limit: n}}, nil), nil
}

// loadNumber is which load produced s.
func loadNumber(t *testing.T, s Set, tenantID string) int64 {
	t.Helper()
	p, ok := s.Lookup(tenantID)
	if !ok {
		t.Fatalf("set of %s lacks its policy", tenantID)
	}
	return p.Limit
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestCatalogCachesAndInvalidates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &fakeLoader{}
	clk := &clock{t: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)}
	c := NewCatalog(f, CatalogConfig{TTL: 30 * time.Second, Now: clk.now})

	want := func(tenant string, load int64) {
		t.Helper()
		s, err := c.For(ctx, tenant)
		if err != nil {
			t.Fatalf("For(%s): %v", tenant, err)
		}
		if got := loadNumber(t, s, tenant); got != load {
			t.Errorf("For(%s) served load %d, want %d", tenant, got, load)
		}
	}
	want("a", 1)
	want("a", 1) // cached
	want("b", 2)
	c.Invalidate("a")
	want("a", 3)
	want("b", 2) // untouched by a's invalidation
	clk.add(29 * time.Second)
	want("a", 3)
	clk.add(time.Second) // 30 s after a's load: stale
	want("a", 4)
	want("b", 5) // loaded 30 s ago as well
	c.InvalidateAll()
	want("a", 6)
	want("b", 7)
	if got := f.loads.Load(); got != 7 {
		t.Errorf("%d loads, want 7", got)
	}
}

func TestCatalogSharesOneLoad(t *testing.T) {
	t.Parallel()
	f := &fakeLoader{gate: make(chan struct{}), started: make(chan string, 100)}
	c := NewCatalog(f, CatalogConfig{})
	const callers = 20
	var wg sync.WaitGroup
	got := make([]int64, callers)
	for i := range callers {
		wg.Go(func() {
			s, err := c.For(context.Background(), "a")
			if err != nil {
				t.Errorf("For: %v", err)
				return
			}
			got[i] = loadNumber(t, s, "a")
		})
	}
	<-f.started
	// Every caller either waits on the one load or asks after it and finds
	// its result cached.
	close(f.gate)
	wg.Wait()
	for i, n := range got {
		if n != 1 {
			t.Errorf("caller %d got load %d, want 1", i, n)
		}
	}
	if n := f.loads.Load(); n != 1 {
		t.Errorf("%d loads for %d concurrent callers, want 1", n, callers)
	}
}

func TestCatalogDropsALoadInvalidatedInFlight(t *testing.T) {
	t.Parallel()
	f := &fakeLoader{gate: make(chan struct{}, 1), started: make(chan string, 10)}
	c := NewCatalog(f, CatalogConfig{})
	done := make(chan Set)
	go func() {
		s, err := c.For(context.Background(), "a")
		if err != nil {
			t.Errorf("For: %v", err)
		}
		done <- s
	}()
	<-f.started
	// The change lands while load 1 reads: load 1 may predate it.
	c.Invalidate("a")
	f.gate <- struct{}{}
	if n := loadNumber(t, <-done, "a"); n != 1 {
		t.Errorf("the caller that started load 1 got load %d", n)
	}
	f.gate <- struct{}{}
	s, err := c.For(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if n := loadNumber(t, s, "a"); n != 2 {
		t.Errorf("after the invalidation For served load %d, want a new load 2", n)
	}
}

func TestCatalogDoesNotCacheErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("database down")
	f := &fakeLoader{err: boom}
	c := NewCatalog(f, CatalogConfig{})
	for range 2 {
		_, err := c.For(context.Background(), "a")
		if !errors.Is(err, boom) {
			t.Fatalf("For: got %v, want %v wrapped", err, boom)
		}
	}
	if n := f.loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2: a failure must not be cached", n)
	}
	f.err = nil
	if _, err := c.For(context.Background(), "a"); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}

func TestCatalogWaiterOutlivesLeader(t *testing.T) {
	t.Parallel()
	f := &fakeLoader{gate: make(chan struct{}), started: make(chan string, 10)}
	c := NewCatalog(f, CatalogConfig{})
	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error)
	go func() {
		_, err := c.For(leaderCtx, "a")
		leaderErr <- err
	}()
	<-f.started
	waiter := make(chan Set)
	go func() {
		s, err := c.For(context.Background(), "a")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiter <- s
	}()
	// Whether the waiter joins the leader's load before the leader gives up
	// (and then retries) or asks after (and finds nothing cached), it must
	// end with a load of its own.
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: got %v, want context.Canceled", err)
	}
	<-f.started // the waiter's own load
	close(f.gate)
	if n := loadNumber(t, <-waiter, "a"); n != 2 {
		t.Errorf("waiter got load %d, want 2", n)
	}
}

func TestCatalogWaiterGivesUp(t *testing.T) {
	t.Parallel()
	f := &fakeLoader{gate: make(chan struct{}), started: make(chan string, 10)}
	c := NewCatalog(f, CatalogConfig{})
	go func() { _, _ = c.For(context.Background(), "a") }()
	<-f.started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.For(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	close(f.gate)
}

func TestCatalogIsBounded(t *testing.T) {
	t.Parallel()
	f := &fakeLoader{}
	c := NewCatalog(f, CatalogConfig{MaxTenants: 3})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if _, err := c.For(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		n := len(c.m)
		c.mu.Unlock()
		if n > 3 {
			t.Fatalf("%d tenants cached, want at most 3", n)
		}
	}
	// The latest is always kept.
	before := f.loads.Load()
	if _, err := c.For(context.Background(), "e"); err != nil {
		t.Fatal(err)
	}
	if f.loads.Load() != before {
		t.Error("the tenant just loaded was evicted")
	}
}
