package gate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
)

// leaser is a store that counts its lease calls and can fail them.
type leaser struct {
	counter.Store
	// ceilings counts the ceiling items the acquires carried.
	acquires, others, ceilings atomic.Int64
	down                       atomic.Bool
}

func (l *leaser) Acquire(ctx context.Context, a counter.Acquire) (counter.Acquired, error) {
	l.acquires.Add(1)
	l.ceilings.Add(int64(len(a.Ceilings)))
	if l.down.Load() {
		return counter.Acquired{}, fmt.Errorf("injected: %w", counter.ErrUnavailable)
	}
	return l.Store.Acquire(ctx, a)
}

func (l *leaser) Release(ctx context.Context, ref counter.LeaseRef) error {
	l.others.Add(1)
	if l.down.Load() {
		return fmt.Errorf("injected: %w", counter.ErrUnavailable)
	}
	return l.Store.Release(ctx, ref)
}

func (l *leaser) Renew(ctx context.Context, ref counter.LeaseRef) (time.Time, error) {
	l.others.Add(1)
	return l.Store.Renew(ctx, ref)
}

// leaseGate is a gate over one memory store for its counters and leases,
// with the tenants of dir and the policies of pols.
func leaseGate(t *testing.T, dir directory, pols catalog) (*gate.Gate, *recorder, *leaser, *events) {
	t.Helper()
	ls := &leaser{Store: memory.New(memory.Config{})}
	g, rec, obs := newTestGate(t, ls, dir, pols, gate.Config{})
	return g, rec, ls, obs
}

func leaseReq(bearer string) gate.Request {
	return gate.Request{Route: "leases", ClientIP: client, Bearer: bearer}
}

// mustAcquire asks g for a lease of pol for subject, for a minute.
func mustAcquire(t *testing.T, g *gate.Gate, bearer, pol, subject string) gate.Verdict {
	t.Helper()
	v, err := g.Acquire(context.Background(), leaseReq(bearer), gate.Lease{Policy: pol, Subject: subject, TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return v
}

func mustAdmit(t *testing.T, g *gate.Gate, req gate.Request) gate.Verdict {
	t.Helper()
	v, err := g.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return v
}

// TestLeasesUpToTheLimit: a concurrency policy hands out its limit of
// leases per subject, each in one round trip with the ceilings and none to
// Check; the next is refused with the wait until the earliest expires, and
// a release gives the place back.
func TestLeasesUpToTheLimit(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{mustPolicy(t, "jobs", `{"limit":2,"algorithm":"concurrency"}`)}, nil)}
	g, rec, ls, obs := leaseGate(t, dir, pols)

	var ids []string
	for i := range 2 {
		v := mustAcquire(t, g, "t1", "jobs", "alice")
		l := v.Lease
		if v.Refusal != nil || l == nil || !v.Allowed || !l.Allowed || l.InFlight != int64(i+1) || l.Limit != 2 || !gate.ValidLeaseID(l.ID) {
			t.Fatalf("lease %d: %+v %+v", i+1, v, l)
		}
		if d := time.Until(l.ExpiresAt); d < 50*time.Second || d > time.Minute {
			t.Errorf("lease %d expires in %s, want about a minute", i+1, d)
		}
		ids = append(ids, l.ID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two leases with one id %s", ids[0])
	}
	// Another subject has places of its own.
	if v := mustAcquire(t, g, "t1", "jobs", "bob"); !v.Allowed {
		t.Fatalf("another subject: %+v", v.Lease)
	}
	v := mustAcquire(t, g, "t1", "jobs", "alice")
	if l := v.Lease; v.Allowed || l.Allowed || l.ID != "" || l.InFlight != 2 || l.RetryAfter < 50*time.Second {
		t.Fatalf("third of 2: %+v %+v, want refused, a retry of about a minute", v, l)
	}
	if got, want := ls.acquires.Load(), int64(4); got != want || rec.calls.Load() != 0 {
		t.Errorf("%d acquires and %d checks of the store for 4 leases, want %d and 0", got, rec.calls.Load(), want)
	}
	// Acquires are checks to the allotment, and a refusal is the policy's.
	obs.mu.Lock()
	es := obs.es
	obs.mu.Unlock()
	if last := es[len(es)-1]; !last.Checked || last.Outcome != admission.LayerPolicy || len(last.Refusals) != 1 || last.Refusals[0].Policy != "jobs" {
		t.Errorf("event of the refusal: %+v", last)
	}
	if err := g.Release(context.Background(), "t1", false, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(context.Background(), "t1", false, ids[0]); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("second release: %v, want ErrNoLease", err)
	}
	if v := mustAcquire(t, g, "t1", "jobs", "alice"); !v.Allowed || v.Lease.InFlight != 2 {
		t.Fatalf("after a release: %+v", v.Lease)
	}
	exp, err := g.Renew(context.Background(), "t1", false, ids[1], time.Hour)
	if err != nil || time.Until(exp) < 59*time.Minute {
		t.Errorf("renew for an hour: %s, %v", exp, err)
	}
}

// TestLeasesCountTowardTheAllotment: acquires spend the monthly allotment
// as checks do, and one past it is the allotment's 429, with no lease taken.
func TestLeasesCountTowardTheAllotment(t *testing.T) {
	t.Parallel()
	two := int64(2)
	plans := defaultPlans()
	starter := plans[tenant.PlanStarter]
	starter.MonthlyChecks = &two
	plans[tenant.PlanStarter] = starter
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanStarter}}, plans: plans}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{mustPolicy(t, "jobs", `{"limit":10,"algorithm":"concurrency","scope":"global"}`)}, nil)}
	g, _, _, _ := leaseGate(t, dir, pols)
	for i := range 2 {
		if v := mustAcquire(t, g, "t1", "jobs", ""); !v.Allowed {
			t.Fatalf("lease %d of an allotment of 2: %+v %+v", i+1, v.Refusal, v.Lease)
		}
	}
	v := mustAcquire(t, g, "t1", "jobs", "")
	if v.Refusal == nil || v.Refusal.Layer != admission.LayerAllotment || v.Lease != nil {
		t.Fatalf("third lease: %+v, want the allotment's refusal", v)
	}
	n, err := g.InFlight(context.Background(), "t1", []string{"jobs", "none"})
	if err != nil || fmt.Sprint(n) != "[2 0]" {
		t.Errorf("in flight: %v, %v; want [2 0]", n, err)
	}
}

// TestLeaseCeilingsAreTakenInAdvance: an acquire spends the instance's
// advances on its ceilings as a check does, so that a run of acquires
// sends the store a small fraction of a ceiling item each, not four; and
// an instance alone stays exact: at a quota of 60 a minute, the 61st
// acquire is refused by the quota, whatever advances checks and acquires
// took from it between them.
func TestLeaseCeilingsAreTakenInAdvance(t *testing.T) {
	t.Parallel()
	run := func(quota int64, n int, check func(i int) bool) (admitted int, ls *leaser) {
		// As quotaRun: the store's clock stands still within a minute, the
		// gate's moves on 100 µs a reading.
		storeNow := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
		store := memory.New(memory.Config{MaxKeys: 1 << 20, Now: func() time.Time { return storeNow }})
		clk := &stepClock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), step: 100 * time.Microsecond}
		dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanEnterprise, QuotaPerMinute: &quota}}}
		pols := catalog{"t1": policy.NewSet([]policy.Policy{
			mustPolicy(t, "jobs", `{"limit":1000000,"algorithm":"concurrency","scope":"global"}`),
			mustPolicy(t, "open", `{"limit":1000000000,"window":"1h"}`),
		}, nil)}
		ls = &leaser{Store: store}
		g, _, _ := newTestGate(t, ls, dir, pols, gate.Config{Now: clk.read})
		ctx := context.Background()
		for i := range n {
			var v gate.Verdict
			if check(i) {
				v = mustAdmit(t, g, checkReq("t1", client, gate.Item{Policy: "open", Subject: "s"}))
			} else {
				v = mustAcquire(t, g, "t1", "jobs", "")
				if v.Allowed {
					if err := g.Release(ctx, "t1", false, v.Lease.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			switch {
			case v.Refusal == nil && v.Allowed:
				admitted++
			case v.Refusal == nil || v.Refusal.Layer != admission.LayerQuota || v.Refusal.Scope != "minute":
				t.Fatalf("request %d refused by %+v %+v", i, v.Refusal, v.Lease)
			}
		}
		return admitted, ls
	}
	never := func(int) bool { return false }
	admitted, ls := run(5000, 3000, never)
	if admitted != 3000 {
		t.Errorf("3,000 acquires at 5,000 a minute: %d admitted", admitted)
	}
	// Three ceilings (per-IP, quota minute and hour; the enterprise plan
	// has no allotment), each an item of every acquire without advances.
	if per := float64(ls.ceilings.Load()) / 3000; per > 0.2 {
		t.Errorf("%.2f ceiling items per acquire sent to the store", per)
	}
	if admitted, _ := run(60, 100, never); admitted != 60 {
		t.Errorf("100 acquires at 60 a minute: %d admitted", admitted)
	}
	if admitted, _ := run(60, 100, func(i int) bool { return i%3 == 0 }); admitted != 60 {
		t.Errorf("100 acquires and checks at 60 a minute: %d admitted", admitted)
	}
}

// TestTestKeysLeaseInTheSandbox: a test key's leases are apart from the
// live key's: they take no live place, and neither key can release the
// other's.
func TestTestKeysLeaseInTheSandbox(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{mustPolicy(t, "jobs", `{"limit":1,"algorithm":"concurrency"}`)}, nil)}
	g, _, _, _ := leaseGate(t, dir, pols)
	live := mustAcquire(t, g, "t1", "jobs", "s")
	test := mustAcquire(t, g, "test:t1", "jobs", "s")
	if !live.Allowed || !test.Allowed {
		t.Fatalf("live %+v, test %+v: want both allowed", live.Lease, test.Lease)
	}
	ctx := context.Background()
	if err := g.Release(ctx, "t1", false, test.Lease.ID); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("live key releasing the test key's lease: %v, want ErrNoLease", err)
	}
	if err := g.Release(ctx, "t1", true, live.Lease.ID); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("test key releasing the live key's lease: %v, want ErrNoLease", err)
	}
	if err := g.Release(ctx, "t2", false, live.Lease.ID); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("another tenant releasing it: %v, want ErrNoLease", err)
	}
	if err := g.Release(ctx, "t1", true, test.Lease.ID); err != nil {
		t.Errorf("test key releasing its own: %v", err)
	}
	if n, err := g.InFlight(ctx, "t1", []string{"jobs"}); err != nil || n[0] != 1 {
		t.Errorf("live leases in flight: %v, %v; want 1", n, err)
	}
}

// TestLeaseRequestsTheClientGotWrong are 400s naming the field, found
// before the store is asked.
func TestLeaseRequestsTheClientGotWrong(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{
		mustPolicy(t, "jobs", `{"limit":1,"algorithm":"concurrency"}`),
		mustPolicy(t, "rate", `{"limit":1,"window":"1m"}`),
	}, nil)}
	g, rec, ls, _ := leaseGate(t, dir, pols)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		lease gate.Lease
		field string
	}{
		{"unknown policy", gate.Lease{Policy: "nope", Subject: "s", TTL: time.Minute}, "policy"},
		{"a rate policy", gate.Lease{Policy: "rate", Subject: "s", TTL: time.Minute}, "policy"},
		{"no subject", gate.Lease{Policy: "jobs", TTL: time.Minute}, "subject"},
		{"ttl too short", gate.Lease{Policy: "jobs", Subject: "s", TTL: 999 * time.Millisecond}, "ttl"},
		{"ttl too long", gate.Lease{Policy: "jobs", Subject: "s", TTL: time.Hour + time.Millisecond}, "ttl"},
	} {
		_, err := g.Acquire(ctx, leaseReq("t1"), tc.lease)
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want a field error on %q", tc.name, err, tc.field)
		}
	}
	// A check of a concurrency policy is told to take a lease.
	_, err := g.Admit(ctx, checkReq("t1", client, gate.Item{Policy: "jobs", Subject: "s"}))
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "items[0].policy" {
		t.Errorf("check of a concurrency policy: got %v, want a field error on items[0].policy", err)
	}
	if rec.calls.Load() != 0 || ls.acquires.Load() != 0 {
		t.Errorf("the store was asked %d times, and for %d leases", rec.calls.Load(), ls.acquires.Load())
	}
	for _, id := range []string{"", "ls_", "ls_0123", "LS_0123456789abcdef0123456789abcdef", "ls_0123456789ABCDEF0123456789abcdef", "ls_0123456789abcdef0123456789abcdeg"} {
		if err := g.Release(ctx, "t1", false, id); !errors.As(err, &fe) || fe.Field != "id" {
			t.Errorf("release %q: got %v, want a field error on id", id, err)
		}
	}
	v := mustAcquire(t, g, "t1", "jobs", "s")
	if _, err := g.Renew(ctx, "t1", false, v.Lease.ID, 0); !errors.As(err, &fe) || fe.Field != "ttl" {
		t.Errorf("renew with no ttl: got %v, want a field error on ttl", err)
	}
}

// TestLeasesWhenTheStoreIsDown follow the policy's fail mode: open hands
// out a lease that holds no place (its release says it is gone), closed
// refuses for a second; both say degraded.
func TestLeasesWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{
		mustPolicy(t, "open", `{"limit":1,"algorithm":"concurrency","fail_mode":"open"}`),
		mustPolicy(t, "closed", `{"limit":1,"algorithm":"concurrency","fail_mode":"closed"}`),
	}, nil)}
	g, _, ls, _ := leaseGate(t, dir, pols)
	ls.down.Store(true)
	v := mustAcquire(t, g, "t1", "open", "s")
	if l := v.Lease; !v.Degraded || !v.Allowed || !l.Allowed || !l.Degraded || !gate.ValidLeaseID(l.ID) {
		t.Fatalf("fail open: %+v %+v", v, l)
	}
	v = mustAcquire(t, g, "t1", "closed", "s")
	if l := v.Lease; !v.Degraded || v.Allowed || l.Allowed || !l.Degraded || l.RetryAfter != time.Second {
		t.Fatalf("fail closed: %+v %+v", v, l)
	}
	ls.down.Store(false)
}

// TestReset clears a subject's counter of the key's kind, and a
// concurrency policy's leases of the subject; it names what it cannot
// reset.
func TestReset(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{
		mustPolicy(t, "login", `{"limit":1,"window":"1h"}`),
		mustPolicy(t, "jobs", `{"limit":1,"algorithm":"concurrency"}`),
		mustPolicy(t, "errors", `{"limit":1,"window":"1h","scope":"global"}`),
	}, nil)}
	g, rec, _, _ := leaseGate(t, dir, pols)
	ctx := context.Background()
	login := gate.Item{Policy: "login", Subject: "alice"}
	for _, bearer := range []string{"t1", "test:t1"} {
		if v := mustAdmit(t, g, checkReq(bearer, client, login)); !v.Allowed {
			t.Fatalf("%s: first check refused", bearer)
		}
	}
	key, err := g.Reset(ctx, "t1", false, "login", "alice")
	if err != nil {
		t.Fatal(err)
	}
	// The key names the counter the check used, and not the subject.
	if ks := rec.keys(); !slices.Contains(ks, key) || key == "p:login:alice" {
		t.Errorf("reset key %q, the checks' keys %v", key, ks)
	}
	if v := mustAdmit(t, g, checkReq("t1", client, login)); !v.Allowed {
		t.Errorf("live check after a live reset: refused")
	}
	if v := mustAdmit(t, g, checkReq("test:t1", client, login)); v.Allowed {
		t.Errorf("test check after a live reset: allowed, the sandbox was reset too")
	}

	l := mustAcquire(t, g, "t1", "jobs", "bob").Lease
	if _, err := g.Reset(ctx, "t1", false, "jobs", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx, "t1", false, l.ID); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("release of a lease a reset dropped: %v, want ErrNoLease", err)
	}
	if v := mustAcquire(t, g, "t1", "jobs", "bob"); !v.Allowed {
		t.Errorf("lease after a reset: refused")
	}

	var nf *policy.NotFoundError
	if _, err := g.Reset(ctx, "t1", false, "nope", "alice"); !errors.As(err, &nf) {
		t.Errorf("reset of an unknown policy: %v, want not found", err)
	}
	var fe *policy.FieldError
	if _, err := g.Reset(ctx, "t1", false, "errors", "alice"); !errors.As(err, &fe) || fe.Field != "subject" {
		t.Errorf("reset of a global policy: %v, want a field error on subject", err)
	}
}

// TestFailedStoreCallsAreLogged: a release (as a renewal, a reset) the
// store fails is a 503 that tells its client only "unavailable"; the log
// says which call failed, after how long and why, once a second at most.
func TestFailedStoreCallsAreLogged(t *testing.T) {
	t.Parallel()
	dir := directory{tenants: map[string]tenant.Tenant{"t1": {ID: "t1", Plan: tenant.PlanPro}}}
	pols := catalog{"t1": policy.NewSet([]policy.Policy{mustPolicy(t, "jobs", `{"limit":5,"algorithm":"concurrency"}`)}, nil)}
	ls := &leaser{Store: memory.New(memory.Config{})}
	logs := &logbuf.Buffer{}
	g, _, _ := newTestGate(t, ls, dir, pols, gate.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	var ids []string
	for range 3 {
		ids = append(ids, mustAcquire(t, g, "t1", "jobs", "alice").Lease.ID)
	}
	ls.down.Store(true)
	for _, id := range ids {
		if err := g.Release(t.Context(), "t1", false, id); !errors.Is(err, gate.ErrStoreUnavailable) {
			t.Fatalf("release while the store is down: %v, want ErrStoreUnavailable", err)
		}
	}
	if n := strings.Count(logs.String(), `msg="counter store call failed" op=release`); n != 1 || !strings.Contains(logs.String(), "injected") {
		t.Errorf("%d lines for three failed releases in a second, want 1 naming the cause:\n%s", n, logs)
	}
}
