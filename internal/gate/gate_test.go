package gate_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// directory is a TenantSource over fixed tenants: the bearer token is the
// tenant's id, with "test:" in front for its test key.
type directory struct {
	tenants map[string]tenant.Tenant
	plans   map[string]tenant.Plan
	maxIP   int64
}

func (d directory) Authenticate(_ context.Context, bearer string) (tenant.Key, tenant.Tenant, error) {
	id, test := strings.CutPrefix(bearer, "test:")
	t, ok := d.tenants[id]
	if !ok {
		return tenant.Key{}, tenant.Tenant{}, tenant.ErrUnauthorized
	}
	return tenant.Key{ID: "key_" + id, TenantID: id, Test: test}, t, nil
}

func (d directory) Plan(_ context.Context, name string) (tenant.Plan, error) {
	p, ok := d.plans[name]
	if !ok {
		return tenant.Plan{}, tenant.ErrNotFound
	}
	return p, nil
}

func (d directory) MaxIPPerMinute(context.Context) int64 { return d.maxIP }

// catalog is a PolicySource over fixed policy sets.
type catalog map[string]policy.Set

func (c catalog) For(_ context.Context, tenantID string) (policy.Set, error) { return c[tenantID], nil }

// recorder keeps every counter request that reaches the store it wraps, and
// counts the calls.
type recorder struct {
	counter.Store
	calls atomic.Int64
	mu    sync.Mutex
	reqs  []counter.Request
}

func (r *recorder) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	r.calls.Add(1)
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Store.Check(ctx, req)
}

func (r *recorder) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []string
	for _, req := range r.reqs {
		for _, it := range req.Items {
			ks = append(ks, it.Key)
		}
	}
	return ks
}

// events keeps what an Observer is told.
type events struct {
	mu sync.Mutex
	es []admission.Event
}

func (o *events) Observe(_ context.Context, e admission.Event) {
	o.mu.Lock()
	o.es = append(o.es, e)
	o.mu.Unlock()
}

// defaultPlans are DESIGN §3's plan table.
func defaultPlans() map[string]tenant.Plan {
	month := func(n int64) *int64 { return &n }
	return map[string]tenant.Plan{
		tenant.PlanStarter:    {Name: tenant.PlanStarter, IPPerMinute: 600, QuotaPerMinute: 1200, QuotaPerHour: 30000, MonthlyChecks: month(100000)},
		tenant.PlanPro:        {Name: tenant.PlanPro, IPPerMinute: 60000, QuotaPerMinute: 120000, QuotaPerHour: 5000000, MonthlyChecks: month(50000000)},
		tenant.PlanEnterprise: {Name: tenant.PlanEnterprise, IPPerMinute: 600000, QuotaPerMinute: 1200000, QuotaPerHour: 50000000},
	}
}

func mustPolicy(t *testing.T, name, body string) policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(body))
	if err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
	return p
}

const testPepper = "gate-test-pepper-0123456789abcdef0123"

// newTestGate returns a gate.Gate over store (the memory store when nil) with
// tenants and policies, and the recorder in front of the store.
func newTestGate(t *testing.T, store counter.Store, dir directory, pols catalog, cfg gate.Config) (*gate.Gate, *recorder, *events) {
	t.Helper()
	if store == nil {
		store = memory.New(memory.Config{})
	}
	rec := &recorder{Store: store}
	t.Cleanup(func() { store.Close() })
	obs := &events{}
	if dir.plans == nil {
		dir.plans = defaultPlans()
	}
	if dir.maxIP == 0 {
		dir.maxIP = 600000
	}
	cfg.Store, cfg.Policies, cfg.Observer = rec, pols, obs
	if cfg.Tenants == nil {
		cfg.Tenants = dir
	}
	if cfg.Pepper == nil {
		cfg.Pepper = []byte(testPepper)
	}
	if cfg.Local == nil {
		local := memory.New(memory.Config{Now: cfg.Now})
		t.Cleanup(func() { local.Close() })
		cfg.Local = local
	}
	g, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, rec, obs
}

var client = netip.MustParseAddr("203.0.113.7")

func checkReq(bearer string, ip netip.Addr, items ...gate.Item) gate.Request {
	return gate.Request{Route: "check", ClientIP: ip, Bearer: bearer, Check: &gate.Check{Mode: counter.Consume, Items: items}}
}

// TestAdmitReportsTheTightestQuota checks which layer or policy an allowed
// answer names for its RateLimit fields.
func TestAdmitReportsTheTightestQuota(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name     string
		tenant   tenant.Tenant
		policies []policy.Policy
		items    []gate.Item
		want     gate.Quota // Name, Limit, Remaining
	}{
		{
			name:     "a tight policy",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro},
			policies: []policy.Policy{mustPolicy(t, "tight", `{"limit":3,"window":"1m"}`)},
			items:    []gate.Item{{Policy: "tight", Subject: "s"}},
			want:     gate.Quota{Name: "tight", Limit: 3, Remaining: 2},
		},
		{
			name:     "the tightest of two policies",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro},
			policies: []policy.Policy{mustPolicy(t, "wide", `{"limit":10,"window":"1m"}`), mustPolicy(t, "narrow", `{"limit":4,"window":"1h"}`)},
			items:    []gate.Item{{Policy: "wide", Subject: "s", Cost: 5}, {Policy: "narrow", Subject: "s", Cost: 1}},
			want:     gate.Quota{Name: "wide", Limit: 10, Remaining: 5},
		},
		{
			name:     "equal shares: the fewer remaining",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro},
			policies: []policy.Policy{mustPolicy(t, "big", `{"limit":100,"window":"1h"}`), mustPolicy(t, "small", `{"limit":10,"window":"1h"}`)},
			items:    []gate.Item{{Policy: "big", Subject: "s", Cost: 50}, {Policy: "small", Subject: "s", Cost: 5}},
			want:     gate.Quota{Name: "small", Limit: 10, Remaining: 5},
		},
		{
			name:     "used up by this check",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro},
			policies: []policy.Policy{mustPolicy(t, "few", `{"limit":10,"window":"1h"}`), mustPolicy(t, "last", `{"limit":1000000,"window":"1h"}`)},
			items:    []gate.Item{{Policy: "few", Subject: "s", Cost: 9}, {Policy: "last", Subject: "s", Cost: 1000000}},
			want:     gate.Quota{Name: "last", Limit: 1000000, Remaining: 0},
		},
		{
			name:     "the tenant's per-IP limit",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro, RateLimitPerMinute: 4},
			policies: []policy.Policy{mustPolicy(t, "open", `{"limit":1000,"window":"1h"}`)},
			items:    []gate.Item{{Policy: "open", Subject: "s"}},
			want:     gate.Quota{Name: admission.LayerIP, Limit: 4, Remaining: 3},
		},
		{
			name:     "the tenant's quota",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro, QuotaPerHour: n(5)},
			policies: []policy.Policy{mustPolicy(t, "open", `{"limit":1000,"window":"1h"}`)},
			items:    []gate.Item{{Policy: "open", Subject: "s"}},
			want:     gate.Quota{Name: admission.LayerQuota, Limit: 5, Remaining: 4},
		},
		{
			name:     "a shadow policy is never the one",
			tenant:   tenant.Tenant{Plan: tenant.PlanPro},
			policies: []policy.Policy{mustPolicy(t, "dark", `{"limit":1,"window":"1h","shadow":true}`), mustPolicy(t, "open", `{"limit":20,"window":"1h"}`)},
			items:    []gate.Item{{Policy: "dark", Subject: "s"}, {Policy: "open", Subject: "s"}},
			want:     gate.Quota{Name: "open", Limit: 20, Remaining: 19},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.tenant.ID = "tenant-1"
			g, _, _ := newTestGate(t, nil,
				directory{tenants: map[string]tenant.Tenant{"tenant-1": tt.tenant}},
				catalog{"tenant-1": policy.NewSet(tt.policies, nil)}, gate.Config{})
			v, err := g.Admit(context.Background(), checkReq("tenant-1", client, tt.items...))
			if err != nil || !v.Allowed || v.Refusal != nil {
				t.Fatalf("Admit: %+v, %v", v, err)
			}
			got := gate.Quota{Name: v.Tightest.Name, Limit: v.Tightest.Limit, Remaining: v.Tightest.Remaining}
			if got != tt.want {
				t.Errorf("tightest %+v, want %+v", got, tt.want)
			}
		})
	}
}

// digestKey matches a counter key that holds a digest: "ip:<route>:" or
// "p:<policy>:", then 32 hex digits.
var digestKey = regexp.MustCompile(`^(ip:[a-z]+|(t:)?p:[a-z0-9._-]+):[0-9a-f]{32}$`)

func hmacHex(pepper, kind, s string) string {
	m := hmac.New(sha256.New, []byte(pepper))
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// TestDigestsHideSubjectsAndIPs looks at every key that reaches the counter
// store and every event observers get: subjects and client addresses appear
// only as HMAC-SHA-256 digests under the pepper.
func TestDigestsHideSubjectsAndIPs(t *testing.T) {
	t.Parallel()
	const subject = "alice@example.com"
	ips := []netip.Addr{client, netip.MustParseAddr("::ffff:203.0.113.7"), netip.MustParseAddr("2001:db8::7")}
	raw := []string{subject, "alice", "example.com", "203.0.113.7", "2001:db8::7"}

	dir := directory{tenants: map[string]tenant.Tenant{
		"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro, RateLimitPerMinute: 3},
		"tenant-2": {ID: "tenant-2", Plan: tenant.PlanPro},
	}}
	pols := []policy.Policy{mustPolicy(t, "sign-in", `{"limit":1,"window":"1h"}`), mustPolicy(t, "errors", `{"limit":100,"window":"1h","scope":"global"}`)}
	cat := catalog{"tenant-1": policy.NewSet(pols, nil), "tenant-2": policy.NewSet(pols, nil)}
	g, rec, obs := newTestGate(t, nil, dir, cat, gate.Config{})
	ctx := context.Background()
	var refusals []admission.Refusal
	for _, ip := range ips {
		for _, tid := range []string{"tenant-1", "tenant-2"} {
			// The second sign-in of a subject is refused by its policy; the
			// fourth request of an address, by tenant-1's per-IP limit of 3.
			for range 2 {
				v, err := g.Admit(ctx, checkReq(tid, ip, gate.Item{Policy: "sign-in", Subject: subject}, gate.Item{Policy: "errors", Subject: subject}))
				if err != nil {
					t.Fatal(err)
				}
				if v.Refusal != nil {
					refusals = append(refusals, *v.Refusal)
				}
			}
		}
	}
	if len(refusals) == 0 {
		t.Fatal("no ceiling refused: the per-IP key was not seen")
	}

	keys := rec.keys()
	for _, r := range refusals {
		keys = append(keys, r.Key)
	}
	for _, e := range obs.es {
		for _, r := range e.Refusals {
			keys = append(keys, r.Key)
		}
		for _, s := range raw {
			if strings.Contains(fmt.Sprintf("%+v", e), s) {
				t.Errorf("event holds %q: %+v", s, e)
			}
		}
	}
	for _, k := range keys {
		for _, s := range raw {
			if strings.Contains(k, s) {
				t.Errorf("counter key %q holds %q", k, s)
			}
		}
		switch k {
		case "quota:minute", "quota:hour", "allotment", "p:errors:*":
		default:
			if !digestKey.MatchString(k) {
				t.Errorf("counter key %q is neither a fixed name nor a digest", k)
			}
		}
	}

	// The digests are HMAC-SHA-256 under the pepper of tenant:policy:subject
	// and of the address: the same for the same input, apart for different
	// tenants, and the same for an address and its IPv4-mapped form.
	want := map[string]bool{
		"p:sign-in:" + hmacHex(testPepper, "subject", "tenant-1:sign-in:"+subject): true,
		"p:sign-in:" + hmacHex(testPepper, "subject", "tenant-2:sign-in:"+subject): true,
		"ip:check:" + hmacHex(testPepper, "ip", "203.0.113.7"):                     true,
		"ip:check:" + hmacHex(testPepper, "ip", "2001:db8::7"):                     true,
	}
	seen := map[string]bool{}
	for _, k := range rec.keys() {
		if digestKey.MatchString(k) {
			seen[k] = true
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no counter key %s; keys seen: %v", k, seen)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("digest keys %v, want %v", seen, want)
	}
	// Another pepper, other keys.
	g2, rec2, _ := newTestGate(t, nil, dir, cat, gate.Config{Pepper: []byte("another-pepper-0123456789abcdef0123")})
	if _, err := g2.Admit(ctx, checkReq("tenant-2", client, gate.Item{Policy: "sign-in", Subject: subject})); err != nil {
		t.Fatal(err)
	}
	for _, k := range rec2.keys() {
		if seen[k] {
			t.Errorf("key %s is the same under another pepper", k)
		}
	}
}

// TestUnresolvableClientsShareOneBucket: requests whose client address is
// unknown (a trusted proxy sent garbage, or nothing) share one bucket per
// route, in the pre-authentication bucket and the tenant's per-IP layer
// alike: a malformed header must never buy a fresh bucket.
func TestUnresolvableClientsShareOneBucket(t *testing.T) {
	t.Parallel()
	dir := directory{
		tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro, RateLimitPerMinute: 2}},
		maxIP:   600000,
	}
	cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000,"window":"1h"}`)}, nil)}
	g, rec, _ := newTestGate(t, nil, dir, cat, gate.Config{})
	ctx := context.Background()
	item := gate.Item{Policy: "open", Subject: "s"}

	for i := range 2 {
		if v, err := g.Admit(ctx, checkReq("tenant-1", netip.Addr{}, item)); err != nil || !v.Allowed {
			t.Fatalf("request %d of an unknown address: %+v, %v", i+1, v, err)
		}
	}
	v, err := g.Admit(ctx, checkReq("tenant-1", netip.Addr{}, item))
	if err != nil || v.Refusal == nil || v.Refusal.Layer != admission.LayerIP {
		t.Fatalf("third request of unknown addresses at 2 a minute: %+v, %v", v, err)
	}
	// A known address has a bucket of its own.
	if v, err := g.Admit(ctx, checkReq("tenant-1", client, item)); err != nil || !v.Allowed {
		t.Fatalf("a known address after the unknown ones: %+v, %v", v, err)
	}
	for _, k := range rec.keys() {
		if strings.HasPrefix(k, "ip:") && k != "ip:check:unresolved" && !digestKey.MatchString(k) {
			t.Errorf("per-IP key %q", k)
		}
	}
}

// TestAuthFailuresAreBoundedPerClient: keys that do not authenticate cost
// the client network that sends them: past AuthFailuresPerMinute, its
// requests are refused before the key is looked up, while another network,
// and a right key from elsewhere, go on.
func TestAuthFailuresAreBoundedPerClient(t *testing.T) {
	t.Parallel()
	dir := &countingDirectory{directory: directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro}}, plans: defaultPlans(), maxIP: 600000}}
	cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000,"window":"1h"}`)}, nil)}
	g, _, _ := newTestGate(t, nil, directory{}, cat, gate.Config{AuthFailuresPerMinute: 5, Tenants: dir})
	ctx := context.Background()
	item := gate.Item{Policy: "open", Subject: "s"}
	guesser, other := netip.MustParseAddr("198.51.100.9"), netip.MustParseAddr("198.51.100.10")
	for i := range 5 {
		if _, err := g.Admit(ctx, checkReq(fmt.Sprintf("guess-%d", i), guesser, item)); !errors.Is(err, tenant.ErrUnauthorized) {
			t.Fatalf("guess %d: %v, want ErrUnauthorized", i+1, err)
		}
	}
	before := dir.calls.Load()
	v, err := g.Admit(ctx, checkReq("guess-6", guesser, item))
	if err != nil || v.Refusal == nil || v.Refusal.Layer != admission.LayerIP || v.Refusal.Limit != 5 {
		t.Fatalf("sixth guess: %+v, %v; want a per-IP refusal at 5", v, err)
	}
	if dir.calls.Load() != before {
		t.Error("the sixth guess was looked up")
	}
	if _, err := g.Admit(ctx, checkReq("guess", other, item)); !errors.Is(err, tenant.ErrUnauthorized) {
		t.Errorf("another network's first guess: %v, want ErrUnauthorized", err)
	}
	if v, err := g.Admit(ctx, checkReq("tenant-1", other, item)); err != nil || !v.Allowed {
		t.Errorf("a right key from another network: %+v, %v", v, err)
	}
}

// TestKeylessFloodKeepsTenantsL1: requests that have not shown a key are
// one party in the instance's local store, however many addresses send
// them. A tenant's 200 addresses each spend their 2 a minute; keys that do
// not authenticate then come from eight times the local store's bound of
// addresses, each leaving a pre-authentication and a failed-key counter;
// the tenant's per-IP L1 counters stay, so each address's third request is
// refused in memory, without a call of the shared store. (Forgotten, the
// L1 would let it through to the shared per-IP ceiling.)
func TestKeylessFloodKeepsTenantsL1(t *testing.T) {
	t.Parallel()
	const bound = 1_000
	now := func() time.Time { return time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC) }
	local := memory.New(memory.Config{MaxKeys: bound, Now: now, PruneEvery: -1})
	t.Cleanup(func() { local.Close() })
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro, RateLimitPerMinute: 2}}}
	cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000,"window":"1h"}`)}, nil)}
	g, rec, _ := newTestGate(t, nil, dir, cat, gate.Config{Local: local, Now: now})
	ctx := context.Background()
	item := gate.Item{Policy: "open", Subject: "s"}
	addr := func(net byte, i int) netip.Addr { return netip.AddrFrom4([4]byte{10, net, byte(i >> 8), byte(i)}) }
	const addresses = 200
	for range 2 {
		for i := range addresses {
			if v, err := g.Admit(ctx, checkReq("tenant-1", addr(1, i), item)); err != nil || !v.Allowed {
				t.Fatalf("address %d within its 2 a minute: %+v, %v", i, v, err)
			}
		}
	}
	for i := range 8 * bound {
		if _, err := g.Admit(ctx, checkReq("no-such-key", addr(2, i), item)); !errors.Is(err, tenant.ErrUnauthorized) {
			t.Fatalf("keyless request %d: %v, want ErrUnauthorized", i, err)
		}
	}
	before := rec.calls.Load()
	for i := range addresses {
		v, err := g.Admit(ctx, checkReq("tenant-1", addr(1, i), item))
		if err != nil || v.Refusal == nil || v.Refusal.Layer != admission.LayerIP {
			t.Fatalf("address %d's third request: %+v, %v; want a per-IP refusal", i, v, err)
		}
	}
	if n := rec.calls.Load() - before; n > 0 {
		t.Fatalf("%d of %d addresses' third requests reached the shared store: the keyless flood made the L1 forget them", n, addresses)
	}
}

// countingDirectory counts Authenticate calls: what a lookup would cost the
// database.
type countingDirectory struct {
	directory
	calls atomic.Int64
}

func (d *countingDirectory) Authenticate(ctx context.Context, bearer string) (tenant.Key, tenant.Tenant, error) {
	d.calls.Add(1)
	return d.directory.Authenticate(ctx, bearer)
}

// TestTestKeysCountInTheSandbox: a test key's checks move counters of their
// own, so that draining a policy with a test key leaves live traffic its
// whole limit, and the other way round.
func TestTestKeysCountInTheSandbox(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro}}}
	pols := []policy.Policy{mustPolicy(t, "login", `{"limit":2,"window":"1h"}`), mustPolicy(t, "errors", `{"limit":2,"window":"1h","scope":"global"}`)}
	g, _, _ := newTestGate(t, nil, dir, catalog{"tenant-1": policy.NewSet(pols, nil)}, gate.Config{})
	ctx := context.Background()
	items := []gate.Item{{Policy: "login", Subject: "alice"}, {Policy: "errors"}}
	admitted := func(bearer string) int {
		n := 0
		for range 5 {
			v, err := g.Admit(ctx, checkReq(bearer, client, items...))
			if err != nil || v.Refusal != nil {
				t.Fatalf("%s: %+v, %v", bearer, v, err)
			}
			if v.Allowed {
				n++
			}
		}
		return n
	}
	if got := admitted("test:tenant-1"); got != 2 {
		t.Errorf("test key: %d admitted, want 2", got)
	}
	if got := admitted("tenant-1"); got != 2 {
		t.Errorf("live key after the test key drained the sandbox: %d admitted, want 2", got)
	}
}

// failingFor is a fault injector, like faultnet for the network: it passes
// every call to a real store except those of one group (tenant), which fail
// as a store past its deadline does.
type failingFor struct {
	counter.Store
	group string
	calls atomic.Int64 // calls of that group that reached the injector
}

func (f *failingFor) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	if req.Group == f.group {
		f.calls.Add(1)
		return counter.Result{}, fmt.Errorf("injected: %w", counter.ErrUnavailable)
	}
	return f.Store.Check(ctx, req)
}

// TestBreakerIsPerTenant: a store failing for one tenant's work (its shard
// down, its rows locked) opens that tenant's circuit only; another tenant
// keeps exact answers, never degraded, and its fail-open policy never
// admits more than its limit.
func TestBreakerIsPerTenant(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	store := &failingFor{Store: memory.New(memory.Config{}), group: "tenant-a"}
	dir := directory{tenants: map[string]tenant.Tenant{
		"tenant-a": {ID: "tenant-a", Plan: tenant.PlanPro},
		"tenant-b": {ID: "tenant-b", Plan: tenant.PlanPro},
	}}
	two := []policy.Policy{mustPolicy(t, "two", `{"limit":2,"window":"1h","fail_mode":"open"}`)}
	cat := catalog{"tenant-a": policy.NewSet(two, nil), "tenant-b": policy.NewSet(two, nil)}
	g, _, _ := newTestGate(t, store, dir, cat, gate.Config{Metrics: m, StoreName: "memory", BreakerFailures: 3, BreakerOpenFor: time.Minute})
	ctx := context.Background()
	item := gate.Item{Policy: "two", Subject: "s"}

	for i := range 10 {
		v, err := g.Admit(ctx, checkReq("tenant-a", client, item))
		if err != nil || !v.Degraded {
			t.Fatalf("tenant a, check %d: %+v, %v; want degraded", i+1, v, err)
		}
	}
	if got := store.calls.Load(); got != 3 {
		t.Errorf("tenant a reached the store %d times, want 3 (then its circuit opened)", got)
	}
	if got := metric(t, m, `tollgate_counter_breaker_open{store="memory"}`); got != "1" {
		t.Errorf("tollgate_counter_breaker_open %s, want 1", got)
	}
	allowed := 0
	for i := range 10 {
		v, err := g.Admit(ctx, checkReq("tenant-b", client, item))
		if err != nil || v.Degraded {
			t.Fatalf("tenant b, check %d: %+v, %v; want an exact answer", i+1, v, err)
		}
		if v.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("tenant b: %d admitted at a limit of 2", allowed)
	}
}

// TestTenantInflightIsBounded: one tenant's work in progress on an instance
// is bounded in check items; beyond the bound its requests wait their turn
// and then are refused by the inflight layer, while another tenant's
// checks go straight through.
func TestTenantInflightIsBounded(t *testing.T) {
	t.Parallel()
	store := &holding{Store: memory.New(memory.Config{}), group: "tenant-a", release: make(chan struct{}), entered: make(chan struct{}, 100)}
	dir := directory{tenants: map[string]tenant.Tenant{
		"tenant-a": {ID: "tenant-a", Plan: tenant.PlanEnterprise},
		"tenant-b": {ID: "tenant-b", Plan: tenant.PlanEnterprise},
	}}
	open := []policy.Policy{mustPolicy(t, "open", `{"limit":1000000,"window":"1h"}`)}
	cat := catalog{"tenant-a": policy.NewSet(open, nil), "tenant-b": policy.NewSet(open, nil)}
	g, _, _ := newTestGate(t, store, dir, cat, gate.Config{TenantInflight: 64, InflightWait: 50 * time.Millisecond})
	ctx := context.Background()
	big := make([]gate.Item, gate.MaxItems)
	for i := range big {
		big[i] = gate.Item{Policy: "open", Subject: fmt.Sprint(i)}
	}
	// Two checks of 32 items fill tenant a's 64 units; they hold them in
	// the store until released.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if v, err := g.Admit(ctx, checkReq("tenant-a", client, big...)); err != nil || !v.Allowed {
				t.Errorf("a held check: %+v, %v", v, err)
			}
		})
	}
	<-store.entered
	<-store.entered
	v, err := g.Admit(ctx, checkReq("tenant-a", client, gate.Item{Policy: "open", Subject: "x"}))
	if err != nil || v.Refusal == nil || v.Refusal.Layer != admission.LayerInflight || v.Refusal.Limit != 64 {
		t.Errorf("a third check of tenant a: %+v, %v; want an inflight refusal at 64", v, err)
	}
	if v, err := g.Admit(ctx, checkReq("tenant-b", client, big...)); err != nil || !v.Allowed {
		t.Errorf("tenant b meanwhile: %+v, %v", v, err)
	}
	close(store.release)
	wg.Wait()
	// Given back: tenant a is served again.
	if v, err := g.Admit(ctx, checkReq("tenant-a", client, big...)); err != nil || !v.Allowed {
		t.Errorf("tenant a after its checks ended: %+v, %v", v, err)
	}
}

// holding passes calls to a real store, holding those of one group until
// release is closed (each reports on entered first): a store busy with one
// tenant's work.
type holding struct {
	counter.Store
	group   string
	release chan struct{}
	entered chan struct{}
}

func (h *holding) Check(ctx context.Context, req counter.Request) (counter.Result, error) {
	if req.Group == h.group {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Store.Check(ctx, req)
}

// metric returns the value of the sample named (with its labels) name in
// m's exposition, or "" when there is none.
func metric(t *testing.T, m *metrics.Metrics, name string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestBreaker drives the circuit breaker through a real PostgreSQL counter
// store behind a proxy that cuts and restores the link: it opens after
// BreakerFailures consecutive failures and keeps calls away from the store,
// even one that is back, until BreakerOpenFor has passed; then one probe
// goes through, and a success closes it while a failure opens it again.
func TestBreaker(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	ctx := context.Background()
	store, err := pgcounter.New(ctx, pgcounter.Config{DSN: proxied, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var clock struct {
		sync.Mutex
		now time.Time
	}
	clock.now = time.Now()
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.now }
	wait := func(d time.Duration) { clock.Lock(); clock.now = clock.now.Add(d); clock.Unlock() }

	m := metrics.New()
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanPro}}}
	cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000000,"window":"1h"}`)}, nil)}
	g, rec, _ := newTestGate(t, store, dir, cat, gate.Config{Metrics: m, StoreName: "postgres", Now: now, BreakerFailures: 3, BreakerOpenFor: time.Minute})

	// step admits one check and reports whether the answer was degraded and
	// whether the store was called.
	step := func() (degraded, called bool) {
		t.Helper()
		before := rec.calls.Load()
		v, err := g.Admit(ctx, checkReq("tenant-1", client, gate.Item{Policy: "open", Subject: "s"}))
		if err != nil || !v.Allowed {
			t.Fatalf("Admit: %+v, %v", v, err)
		}
		return v.Degraded, rec.calls.Load() > before
	}
	want := func(what string, wantDegraded, wantCalled bool, open string) {
		t.Helper()
		degraded, called := step()
		if degraded != wantDegraded || called != wantCalled {
			t.Fatalf("%s: degraded %t, store called %t; want %t, %t", what, degraded, called, wantDegraded, wantCalled)
		}
		if got := metric(t, m, `tollgate_counter_breaker_open{store="postgres"}`); got != open {
			t.Fatalf("%s: tollgate_counter_breaker_open %s, want %s", what, got, open)
		}
	}
	// recover restores the link and probes until the store answers again:
	// the first call on a pool whose connections were cut may fail.
	recoverStore := func() {
		t.Helper()
		if err := proxy.Restore(); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if degraded, _ := step(); !degraded {
				return
			}
			if i == 20 {
				t.Fatal("the store did not answer again after 20 probes")
			}
			wait(time.Minute)
		}
	}

	want("store up", false, true, "0")

	// Failures that a success interrupts are not consecutive.
	proxy.Cut()
	want("failure 1 of 3", true, true, "0")
	want("failure 2 of 3", true, true, "0")
	recoverStore()
	proxy.Cut()
	want("failure 1 of 3 after a success", true, true, "0")
	want("failure 2 of 3 after a success", true, true, "0")
	want("failure 3 of 3: the breaker opens", true, true, "1")
	want("open: the store is not called", true, false, "1")
	if got := metric(t, m, `tollgate_counter_store_seconds_count{operation="check",outcome="skipped",store="postgres"}`); got != "1" {
		t.Errorf("skipped calls: %q, want 1", got)
	}

	// Back, but the breaker is open until BreakerOpenFor has passed.
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	want("open, store back", true, false, "1")
	wait(59 * time.Second)
	want("open, 59 s later", true, false, "1")

	// Half-open: one probe; a failure opens the breaker again.
	proxy.Cut()
	wait(time.Second)
	want("the probe fails", true, true, "1")
	want("open again", true, false, "1")

	// Half-open lets one probe out at a time: while it hangs on a store
	// that stopped answering, other calls do not reach the store.
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	wait(time.Minute)
	before := rec.calls.Load()
	probe := make(chan gate.Verdict)
	go func() {
		v, _ := g.Admit(ctx, checkReq("tenant-1", client, gate.Item{Policy: "open", Subject: "s"}))
		probe <- v
	}()
	eventually.True(t, 5*time.Second, "the probe reaching the store", func() bool { return rec.calls.Load() != before })
	want("a call while the probe is out", true, false, "1")
	if v := <-probe; !v.Degraded {
		t.Fatalf("probe of a stalled store: %+v", v)
	}
	want("the probe timed out: open again", true, false, "1")

	// Half-open: a successful probe closes it.
	wait(time.Minute)
	recoverStore()
	if got := metric(t, m, `tollgate_counter_breaker_open{store="postgres"}`); got != "0" {
		t.Fatalf("after a successful probe: tollgate_counter_breaker_open %s, want 0", got)
	}
	want("closed", false, true, "0")
	want("closed, again", false, true, "0")
}

// stepClock is a clock that moves on by step each time it is read: traffic
// at a steady rate, in virtual time.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// quotaRun sends n checks alternately through gates sharing one store, on a
// clock that moves step per reading, and returns how many the tenant's
// per-minute quota admitted and how many counter items the ceilings sent
// to the store.
func quotaRun(t *testing.T, gates int, quota int64, n int, step time.Duration) (admitted, ceilingItems int) {
	t.Helper()
	// The store's clock stands still in the middle of a minute: the runs'
	// virtual minutes are the gates' (their advances' rates and ends), and on
	// the wall clock a run across a minute's end would find the quota's
	// counter afresh and admit twice.
	storeNow := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	store := memory.New(memory.Config{MaxKeys: 1 << 20, Now: func() time.Time { return storeNow }})
	clk := &stepClock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), step: step}
	dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanEnterprise, QuotaPerMinute: &quota}}}
	cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000000000,"window":"1h"}`)}, nil)}
	var gs []*gate.Gate
	var recs []*recorder
	for range gates {
		g, rec, _ := newTestGate(t, store, dir, cat, gate.Config{Now: clk.read})
		gs = append(gs, g)
		recs = append(recs, rec)
	}
	ctx := context.Background()
	for i := range n {
		req := checkReq("tenant-1", client, gate.Item{Policy: "open", Subject: "s"})
		req.Check.Mode = counter.Peek
		v, err := gs[i%gates].Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case v.Refusal == nil:
			admitted++
		case v.Refusal.Layer != admission.LayerQuota || v.Refusal.Scope != "minute":
			t.Fatalf("check %d refused by %+v", i, v.Refusal)
		}
	}
	for _, rec := range recs {
		rec.mu.Lock()
		for _, r := range rec.reqs {
			ceilingItems += r.Ceilings
		}
		rec.mu.Unlock()
	}
	return admitted, ceilingItems
}

// TestCeilingAdvancesOnOneInstanceAreExact: an instance alone spends every
// unit it takes in advance, so its quota admits exactly its limit however fast the
// traffic (the 61st request at 60 a minute is refused).
func TestCeilingAdvancesOnOneInstanceAreExact(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		quota int64
		n     int
		step  time.Duration
	}{
		{60, 100, time.Millisecond},
		{60, 100, 100 * time.Microsecond},
		{5000, 6000, 100 * time.Microsecond},
	} {
		if got, _ := quotaRun(t, 1, tt.quota, tt.n, tt.step); got != int(tt.quota) {
			t.Errorf("one instance, %d checks at %d a minute: %d admitted", tt.n, tt.quota, got)
		}
	}
}

// TestCeilingAdvancesAcrossInstances: instances under-admit only by what
// the others hold when the counter runs out, and never over-admit: at 300
// a minute, two instances alternating admit at least 294; at 120,000 a
// minute, at least 99 %. And the ceilings cost the store a small fraction
// of an item per check.
func TestCeilingAdvancesAcrossInstances(t *testing.T) {
	t.Parallel()
	admitted, _ := quotaRun(t, 2, 300, 1000, time.Millisecond)
	if admitted < 294 || admitted > 300 {
		t.Errorf("two instances at 300 a minute: %d admitted, want 294 to 300", admitted)
	}
	admitted, items := quotaRun(t, 2, 120_000, 130_000, 200*time.Microsecond)
	if admitted < 118_800 || admitted > 120_000 {
		t.Errorf("two instances at 120,000 a minute: %d admitted, want 118,800 to 120,000", admitted)
	}
	// Three ceilings (per-IP, quota minute and hour), each of which would
	// cost an item per check without advances.
	if perCheck := float64(items) / 130_000; perCheck > 0.2 {
		t.Errorf("%.2f ceiling items per check sent to the store", perCheck)
	}
	t.Logf("120,000 a minute over two instances: %d admitted, %.3f ceiling items per check", admitted, float64(items)/130_000)
}

// TestCeilingAdvancesUnderConcurrency: many requests at once on instances
// sharing a store: one instance admits exactly its quota, two never more
// and nearly all of it.
func TestCeilingAdvancesUnderConcurrency(t *testing.T) {
	t.Parallel()
	run := func(gates int, quota int64, n int) int64 {
		// Virtual time within one minute: 1 µs a reading, the shared
		// store's too (on the wall clock, a run across a minute's end
		// would find the quota's counter afresh and admit twice).
		clk := &stepClock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), step: time.Microsecond}
		store := memory.New(memory.Config{Now: clk.read})
		dir := directory{tenants: map[string]tenant.Tenant{"tenant-1": {ID: "tenant-1", Plan: tenant.PlanEnterprise, QuotaPerMinute: &quota}}}
		cat := catalog{"tenant-1": policy.NewSet([]policy.Policy{mustPolicy(t, "open", `{"limit":1000000000,"window":"1h"}`)}, nil)}
		var gs []*gate.Gate
		for range gates {
			g, _, _ := newTestGate(t, store, dir, cat, gate.Config{Now: clk.read})
			gs = append(gs, g)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				for i := w; i < n; i += 32 {
					v, err := gs[i%gates].Admit(context.Background(), checkReq("tenant-1", client, gate.Item{Policy: "open", Subject: "s"}))
					if err != nil {
						t.Error(err)
						return
					}
					if v.Refusal == nil {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return admitted.Load()
	}
	if got := run(1, 500, 5000); got != 500 {
		t.Errorf("one instance, 32 at once, quota 500: %d admitted", got)
	}
	if got := run(2, 3000, 20000); got > 3000 || got < 2940 {
		t.Errorf("two instances, 32 at once, quota 3000: %d admitted, want 2940 to 3000", got)
	}
}
