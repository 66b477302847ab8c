package countertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// runLeases is the lease contract (counter.Leaser) and Store.Reset: every
// backend holds leases.
func runLeases(t *testing.T, b Backend) {
	t.Run("LeasesUpToTheLimit", func(t *testing.T) { t.Parallel(); leasesUpToLimit(t, b) })
	t.Run("LeaseReleaseGivesThePlaceBack", func(t *testing.T) { t.Parallel(); leaseRelease(t, b) })
	t.Run("LeaseExpiryGivesThePlaceBack", func(t *testing.T) { t.Parallel(); leaseExpiry(t, b) })
	t.Run("LeaseRenew", func(t *testing.T) { t.Parallel(); leaseRenew(t, b) })
	t.Run("LeaseGroupsAreSeparate", func(t *testing.T) { t.Parallel(); leaseGroups(t, b) })
	t.Run("LeaseCeilings", func(t *testing.T) { t.Parallel(); leaseCeilings(t, b) })
	t.Run("LeaseCeilingsAdvisoryTopUp", func(t *testing.T) { t.Parallel(); leaseAdvisoryTopUp(t, b) })
	t.Run("LeaseTallies", func(t *testing.T) { t.Parallel(); leaseTallies(t, b) })
	t.Run("LeaseLimitLowered", func(t *testing.T) { t.Parallel(); leaseLimitLowered(t, b) })
	t.Run("LeaseGroupLimit", func(t *testing.T) { t.Parallel(); leaseGroupLimit(t, b) })
	t.Run("ResetForgetsCountersAndLeases", func(t *testing.T) { t.Parallel(); resetForgets(t, b) })
	t.Run("InvalidLeaseRequests", func(t *testing.T) { t.Parallel(); invalidLeases(t, b) })
	t.Run("ThreeInstancesTwoHundredAcquirers", func(t *testing.T) { t.Parallel(); leasesThreeInstances(t, b) })
	t.Run("ThreeInstancesLeaseChurn", func(t *testing.T) { t.Parallel(); leaseChurn(t, b) })
}

func openLeaser(t *testing.T, b Backend) (counter.Store, counter.Leaser) {
	t.Helper()
	s := open(t, b)
	return s, s
}

func acquire(t testing.TB, l counter.Leaser, a counter.Acquire) counter.Acquired {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := l.Acquire(ctx, a)
	if err != nil {
		t.Fatalf("acquire %+v: %v", a, err)
	}
	if len(res.Ceilings.Decisions) != len(a.Ceilings) {
		t.Fatalf("acquire: %d ceiling decisions for %d ceilings", len(res.Ceilings.Decisions), len(a.Ceilings))
	}
	return res
}

func renew(l counter.Leaser, ref counter.LeaseRef) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.Renew(ctx, ref)
}

func release(l counter.Leaser, ref counter.LeaseRef) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.Release(ctx, ref)
}

func held(t testing.TB, l counter.Leaser, group string, now time.Time, tallies ...string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := l.Held(ctx, group, tallies, now)
	if err != nil {
		t.Fatalf("held %v: %v", tallies, err)
	}
	if len(n) != len(tallies) {
		t.Fatalf("held: %d counts for %d tallies", len(n), len(tallies))
	}
	return n
}

// lease is an Acquire of key with limit lim and a TTL of a minute at base.
func lease(key, id string, lim int64) counter.Acquire {
	return counter.Acquire{Key: key, Tally: "tally-" + key, ID: id, Limit: lim, TTL: time.Minute, Now: base}
}

// wantAcquired fails unless res says allowed, in flight and expiry.
func wantAcquired(t testing.TB, what string, res counter.Acquired, allowed bool, inFlight int64, expires time.Time) {
	t.Helper()
	if res.Allowed != allowed || res.InFlight != inFlight || !res.ExpiresAt.Equal(expires) {
		t.Fatalf("%s: allowed %v, in flight %d, expires %s; want %v, %d, %s", what, res.Allowed, res.InFlight,
			res.ExpiresAt.Format(time.RFC3339Nano), allowed, inFlight, expires.Format(time.RFC3339Nano))
	}
}

// leasesUpToLimit takes leases of one key up to its limit: each answers
// the holders in flight and its expiry; the one past the limit is refused
// with the earliest expiry, when a place is free at the latest.
func leasesUpToLimit(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	for i := range 3 {
		a := lease("k", fmt.Sprintf("id-%d", i), 3)
		a.Now = base.Add(time.Duration(i) * time.Second)
		res := acquire(t, l, a)
		wantAcquired(t, fmt.Sprintf("lease %d of 3", i+1), res, true, int64(i+1), a.Now.Add(time.Minute))
		if !res.Now.Equal(a.Now) {
			t.Fatalf("lease %d: store used clock %s, asked for %s", i+1, res.Now, a.Now)
		}
	}
	a := lease("k", "id-3", 3)
	a.Now = base.Add(10 * time.Second)
	wantAcquired(t, "lease 4 of 3", acquire(t, l, a), false, 3, base.Add(time.Minute))
	// Another key has places of its own.
	wantAcquired(t, "another key", acquire(t, l, lease("other", "id-4", 1)), true, 1, base.Add(time.Minute))
}

// leaseRelease releases a lease: its place is free at once, and it is gone:
// releasing or renewing it again is ErrNoLease, as for an id never seen.
func leaseRelease(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	acquire(t, l, lease("k", "a", 2))
	acquire(t, l, lease("k", "b", 2))
	wantAcquired(t, "third of 2", acquire(t, l, lease("k", "c", 2)), false, 2, base.Add(time.Minute))
	ref := counter.LeaseRef{ID: "a", Now: base.Add(time.Second)}
	if err := release(l, ref); err != nil {
		t.Fatalf("release a: %v", err)
	}
	for _, what := range []string{"release a again", "renew a released", "release an unknown id"} {
		r := ref
		var err error
		switch what {
		case "release an unknown id":
			r.ID = "never"
			err = release(l, r)
		case "renew a released":
			r.TTL = time.Minute
			_, err = renew(l, r)
		default:
			err = release(l, r)
		}
		if !errors.Is(err, counter.ErrNoLease) {
			t.Errorf("%s: got %v, want ErrNoLease", what, err)
		}
	}
	a := lease("k", "d", 2)
	a.Now = base.Add(2 * time.Second)
	wantAcquired(t, "after a release", acquire(t, l, a), true, 2, a.Now.Add(time.Minute))
}

// leaseExpiry lets leases run out: a holder that never comes back gives its
// place back at its expiry exactly, without any call, and the expired lease
// can be neither renewed nor released.
func leaseExpiry(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	first := lease("k", "first", 2)
	first.TTL = 10 * time.Second
	acquire(t, l, first)
	second := lease("k", "second", 2)
	second.Now = base.Add(5 * time.Second)
	acquire(t, l, second)
	a := lease("k", "third", 2)
	a.Now = base.Add(10*time.Second - time.Microsecond)
	wantAcquired(t, "a microsecond before the first expires", acquire(t, l, a), false, 2, base.Add(10*time.Second))
	a.Now = base.Add(10 * time.Second)
	wantAcquired(t, "when the first expires", acquire(t, l, a), true, 2, a.Now.Add(time.Minute))
	ref := counter.LeaseRef{ID: "first", TTL: time.Minute, Now: base.Add(11 * time.Second)}
	if _, err := renew(l, ref); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("renew an expired lease: got %v, want ErrNoLease", err)
	}
	if err := release(l, ref); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("release an expired lease: got %v, want ErrNoLease", err)
	}
	// The second expires too; a released or expired lease's id is not in
	// flight.
	a = lease("k", "fourth", 2)
	a.Now = base.Add(5*time.Second + time.Minute)
	wantAcquired(t, "when the second expires", acquire(t, l, a), true, 2, a.Now.Add(time.Minute))
}

// leaseRenew renews a lease: it lives on past its first expiry, holding its
// place, until the new one; a renewal may shorten it too.
func leaseRenew(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	acquire(t, l, lease("k", "held", 1))
	ref := counter.LeaseRef{ID: "held", TTL: 2 * time.Minute, Now: base.Add(50 * time.Second)}
	exp, err := renew(l, ref)
	if err != nil || !exp.Equal(base.Add(170*time.Second)) {
		t.Fatalf("renew: %s, %v; want %s", exp, err, base.Add(170*time.Second))
	}
	a := lease("k", "waiting", 1)
	a.Now = base.Add(90 * time.Second)
	wantAcquired(t, "past the first expiry", acquire(t, l, a), false, 1, base.Add(170*time.Second))
	ref.TTL, ref.Now = time.Second, base.Add(100*time.Second)
	if exp, err := renew(l, ref); err != nil || !exp.Equal(base.Add(101*time.Second)) {
		t.Fatalf("renew shorter: %s, %v; want %s", exp, err, base.Add(101*time.Second))
	}
	a.Now = base.Add(101 * time.Second)
	wantAcquired(t, "at the shortened expiry", acquire(t, l, a), true, 1, a.Now.Add(time.Minute))
}

// leaseGroups: a lease is its group's. Another group's leases on the same
// key do not take its places, and another group cannot renew or release it
// by its id.
func leaseGroups(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	for _, g := range []string{"tenant-a", "tenant-b", ""} {
		a := lease("k", "same-id", 1)
		a.Group = g
		wantAcquired(t, "group "+g, acquire(t, l, a), true, 1, base.Add(time.Minute))
	}
	ref := counter.LeaseRef{Group: "tenant-c", ID: "same-id", TTL: time.Minute, Now: base}
	if _, err := renew(l, ref); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("renew from another group: got %v, want ErrNoLease", err)
	}
	if err := release(l, ref); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("release from another group: got %v, want ErrNoLease", err)
	}
	ref.Group = "tenant-a"
	if err := release(l, ref); err != nil {
		t.Fatalf("release in its group: %v", err)
	}
	a := lease("k", "next", 1)
	a.Group = "tenant-b"
	wantAcquired(t, "tenant-b after tenant-a released", acquire(t, l, a), false, 1, base.Add(time.Minute))
}

// leaseCeilings acquires with the service's ceilings: they count every
// acquire that passes them, taken or refused for want of a place, and a
// ceiling that refuses counts nothing and takes no lease.
func leaseCeilings(t *testing.T, b Backend) {
	s, l := openLeaser(t, b)
	w := limit.Every(time.Hour)
	quota, spent := item("quota", limit.FixedWindow, 10, w), item("spent", limit.FixedWindow, 1, w)
	check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base})
	a := lease("k", "one", 1)
	a.Ceilings = []counter.Item{quota}
	res := acquire(t, l, a)
	wantAcquired(t, "with a ceiling", res, true, 1, base.Add(time.Minute))
	if !res.Ceilings.Allowed || res.Ceilings.Decisions[0].Remaining != 9 {
		t.Fatalf("ceiling: %+v, want allowed, 9 left", res.Ceilings)
	}
	a.ID = "two"
	res = acquire(t, l, a)
	wantAcquired(t, "no place left", res, false, 1, base.Add(time.Minute))
	if !res.Ceilings.Allowed || res.Ceilings.Decisions[0].Remaining != 8 {
		t.Fatalf("ceiling of a refused lease: %+v, want allowed and counted, 8 left", res.Ceilings)
	}
	a.ID, a.Key = "three", "free"
	a.Ceilings = []counter.Item{quota, spent}
	res = acquire(t, l, a)
	wantAcquired(t, "a ceiling refuses", res, false, 0, time.Time{})
	if got := allowed(res.Ceilings); got != "[false true false]" || res.Ceilings.Decisions[0].Remaining != 8 {
		t.Fatalf("ceilings: allowed (all, items) %s, remaining %d; want [false true false], 8 untouched", got, res.Ceilings.Decisions[0].Remaining)
	}
	if got := remaining(t, s, quota); got != 8 {
		t.Errorf("quota after three acquires, one refused by a ceiling: %d left, want 8", got)
	}
	// No lease was taken on the free key.
	a.Ceilings, a.ID = nil, "four"
	wantAcquired(t, "the free key", acquire(t, l, a), true, 1, base.Add(time.Minute))
}

// leaseAdvisoryTopUp acquires with a ceiling and an advisory top-up on the
// same counter, as the gate renews an advance: the top-up is consumed when
// the counter has room for all of it, and its refusal neither fails the
// ceilings nor stops the lease.
func leaseAdvisoryTopUp(t *testing.T, b Backend) {
	s, l := openLeaser(t, b)
	quota := item("quota", limit.FixedWindow, 10, limit.Every(time.Hour))
	top := quota
	top.Cost, top.Advisory = 6, true
	a := lease("k", "one", 5)
	a.Ceilings = []counter.Item{quota, top}
	res := acquire(t, l, a)
	wantAcquired(t, "with a top-up", res, true, 1, base.Add(time.Minute))
	if got := allowed(res.Ceilings); got != "[true true true]" || res.Ceilings.Decisions[1].Remaining != 3 {
		t.Fatalf("ceilings: allowed (all, items) %s, top-up's remaining %d; want [true true true], 3", got, res.Ceilings.Decisions[1].Remaining)
	}
	a.ID = "two"
	res = acquire(t, l, a)
	wantAcquired(t, "the top-up refused", res, true, 2, base.Add(time.Minute))
	if got := allowed(res.Ceilings); got != "[true true false]" || res.Ceilings.Decisions[0].Remaining != 2 {
		t.Fatalf("ceilings: allowed (all, items) %s, remaining %d; want [true true false], 2", got, res.Ceilings.Decisions[0].Remaining)
	}
	if got := remaining(t, s, quota); got != 2 {
		t.Errorf("quota after a top-up of 6 and two acquires: %d left, want 2", got)
	}
}

// leaseTallies counts a tally's live leases across its keys.
func leaseTallies(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	for i, key := range []string{"a", "a", "b", "c"} {
		a := lease(key, fmt.Sprint("id-", i), 5)
		a.Tally = "policy"
		if key == "c" {
			a.Tally = "other"
		}
		acquire(t, l, a)
	}
	if got := held(t, l, "", base, "policy", "other", "none"); fmt.Sprint(got) != "[3 1 0]" {
		t.Fatalf("held: %v, want [3 1 0]", got)
	}
	if err := release(l, counter.LeaseRef{ID: "id-0", Now: base}); err != nil {
		t.Fatal(err)
	}
	if got := held(t, l, "", base, "policy"); got[0] != 2 {
		t.Fatalf("held after a release: %d, want 2", got[0])
	}
	if got := held(t, l, "", base.Add(time.Minute), "policy", "other"); fmt.Sprint(got) != "[0 0]" {
		t.Fatalf("held when all expired: %v, want [0 0]", got)
	}
	if got := held(t, l, "elsewhere", base, "policy"); got[0] != 0 {
		t.Fatalf("held in another group: %d, want 0", got[0])
	}
}

// leaseLimitLowered lowers a key's limit below its live leases: no one gets
// in until enough are gone.
func leaseLimitLowered(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	for i := range 3 {
		acquire(t, l, lease("k", fmt.Sprint("id-", i), 3))
	}
	wantAcquired(t, "limit lowered to 2", acquire(t, l, lease("k", "id-3", 2)), false, 3, base.Add(time.Minute))
	for _, id := range []string{"id-0", "id-1"} {
		if err := release(l, counter.LeaseRef{ID: id, Now: base}); err != nil {
			t.Fatal(err)
		}
	}
	wantAcquired(t, "one left of 2", acquire(t, l, lease("k", "id-4", 2)), true, 2, base.Add(time.Minute))
}

// leaseGroupLimit caps a group's live leases across its keys: at the cap an
// acquire is refused as GroupFull whatever its key's own room, other groups
// are not held back, and a released or expired lease makes room again.
func leaseGroupLimit(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	capped := func(key, id string, at time.Time) counter.Acquire {
		a := lease(key, id, 10)
		a.Group, a.GroupLimit, a.Now = "capped", 3, at
		return a
	}
	for i := range 3 {
		wantAcquired(t, fmt.Sprint("lease ", i), acquire(t, l, capped(fmt.Sprint("k", i), fmt.Sprint("id-", i), base)), true, 1, base.Add(time.Minute))
	}
	res := acquire(t, l, capped("k9", "id-3", base))
	if res.Allowed || !res.GroupFull {
		t.Fatalf("a fourth lease of a group capped at 3: allowed %v, group full %v; want refused as group full", res.Allowed, res.GroupFull)
	}
	other := lease("k9", "id-3", 10)
	other.Group, other.GroupLimit = "other", 3
	if res := acquire(t, l, other); !res.Allowed || res.GroupFull {
		t.Fatalf("another group: allowed %v, group full %v", res.Allowed, res.GroupFull)
	}
	if err := release(l, counter.LeaseRef{Group: "capped", ID: "id-0", Now: base}); err != nil {
		t.Fatal(err)
	}
	wantAcquired(t, "after a release", acquire(t, l, capped("k9", "id-4", base)), true, 1, base.Add(time.Minute))
	if res := acquire(t, l, capped("k9", "id-5", base.Add(time.Second))); res.Allowed || !res.GroupFull {
		t.Fatalf("at the cap again: allowed %v, group full %v", res.Allowed, res.GroupFull)
	}
	// A minute on, every lease has expired; the stores may count expired
	// leases for a second or two, not longer.
	later := base.Add(time.Minute + 3*time.Second)
	for i := range 3 {
		wantAcquired(t, fmt.Sprint("after expiry ", i), acquire(t, l, capped(fmt.Sprint("n", i), fmt.Sprint("id-n", i), later)), true, 1, later.Add(time.Minute))
	}
}

// resetForgets resets keys: a counter starts afresh, the leases under a key
// are gone (their places free, their ids unknown), and other keys and groups
// keep theirs.
func resetForgets(t *testing.T, b Backend) {
	s, l := openLeaser(t, b)
	ctx := context.Background()
	w := limit.Every(time.Hour)
	spent := item("spent", limit.FixedWindow, 1, w)
	for _, g := range []string{"a", "b"} {
		check(t, s, counter.Request{Group: g, Items: []counter.Item{spent}, Now: base})
		for i := range 2 {
			a := lease("held", fmt.Sprint(g, "-", i), 2)
			a.Group, a.Tally = g, "tally"
			acquire(t, l, a)
		}
		a := lease("kept", g+"-kept", 1)
		a.Group, a.Tally = g, "tally"
		acquire(t, l, a)
	}
	for _, key := range []string{"spent", "held", "never-used"} {
		if err := s.Reset(ctx, "a", key); err != nil {
			t.Fatalf("reset %s: %v", key, err)
		}
	}
	if res := check(t, s, counter.Request{Group: "a", Items: []counter.Item{spent}, Now: base}); !res.Allowed {
		t.Errorf("a reset counter: refused %+v", res)
	}
	if res := check(t, s, counter.Request{Group: "b", Items: []counter.Item{spent}, Now: base}); res.Allowed {
		t.Errorf("another group's counter was reset too")
	}
	if got := held(t, l, "a", base, "tally"); got[0] != 1 {
		t.Errorf("held after a reset: %d, want 1 (the other key's)", got[0])
	}
	if err := release(l, counter.LeaseRef{Group: "a", ID: "a-0", Now: base}); !errors.Is(err, counter.ErrNoLease) {
		t.Errorf("release a lease dropped by a reset: got %v, want ErrNoLease", err)
	}
	a := lease("held", "a-new", 2)
	a.Group = "a"
	wantAcquired(t, "after the reset", acquire(t, l, a), true, 1, base.Add(time.Minute))
	b2 := lease("held", "b-new", 2)
	b2.Group = "b"
	wantAcquired(t, "another group after the reset", acquire(t, l, b2), false, 2, base.Add(time.Minute))
	for name, args := range map[string][2]string{"empty key": {"a", ""}, "bad group": {"a/b", "k"}, "long key": {"a", strings.Repeat("k", counter.MaxKeyLen+1)}} {
		if err := s.Reset(ctx, args[0], args[1]); !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("reset, %s: got %v, want ErrInvalid", name, err)
		}
	}
}

func invalidLeases(t *testing.T, b Backend) {
	_, l := openLeaser(t, b)
	ctx := context.Background()
	ok := lease("k", "id", 1)
	bad := map[string]func(a *counter.Acquire){
		"no key":            func(a *counter.Acquire) { a.Key = "" },
		"long key":          func(a *counter.Acquire) { a.Key = strings.Repeat("k", counter.MaxKeyLen+1) },
		"long tally":        func(a *counter.Acquire) { a.Tally = strings.Repeat("t", counter.MaxKeyLen+1) },
		"no id":             func(a *counter.Acquire) { a.ID = "" },
		"limit 0":           func(a *counter.Acquire) { a.Limit = 0 },
		"limit too large":   func(a *counter.Acquire) { a.Limit = limit.MaxLimit + 1 },
		"ttl too short":     func(a *counter.Acquire) { a.TTL = counter.MinLeaseTTL - time.Microsecond },
		"ttl too long":      func(a *counter.Acquire) { a.TTL = counter.MaxLeaseTTL + time.Microsecond },
		"bad group":         func(a *counter.Acquire) { a.Group = "a:b" },
		"now 2200":          func(a *counter.Acquire) { a.Now = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC) },
		"bad ceiling":       func(a *counter.Acquire) { a.Ceilings = []counter.Item{{Key: "c", Limit: 1, Cost: 1}} },
		"too many ceilings": func(a *counter.Acquire) { a.Ceilings = make([]counter.Item, counter.MaxItems+1) },
	}
	for name, f := range bad {
		a := ok
		f(&a)
		if _, err := l.Acquire(ctx, a); !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("acquire, %s: got %v, want ErrInvalid", name, err)
		}
	}
	// An id the group already holds.
	acquire(t, l, ok)
	again := ok
	again.Key = "other"
	if _, err := l.Acquire(ctx, again); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("acquire with an id in use: got %v, want ErrInvalid", err)
	}
	if _, err := l.Renew(ctx, counter.LeaseRef{ID: "id", TTL: 0, Now: base}); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("renew with no ttl: got %v, want ErrInvalid", err)
	}
	if err := l.Release(ctx, counter.LeaseRef{ID: "", Now: base}); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("release with no id: got %v, want ErrInvalid", err)
	}
	if _, err := l.Held(ctx, "", []string{""}, base); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("held with an empty tally: got %v, want ErrInvalid", err)
	}
}

// leasesThreeInstances races 200 acquirers for 10 places of one key through
// three store instances on one namespace, on the store's own clock: exactly
// 10 are taken; released, the 10 places go to 10 more of another 200.
func leasesThreeInstances(t *testing.T, b Backend) {
	newStore := opener(t, b)
	var ls []counter.Leaser
	for range 3 {
		ls = append(ls, newStore())
	}
	race := func(round int) []string {
		var mu sync.Mutex
		var taken []string
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				a := counter.Acquire{Key: "race", Tally: "race", ID: fmt.Sprintf("r%d-%d", round, i), Limit: 10, TTL: time.Hour}
				res, err := ls[i%3].Acquire(context.Background(), a)
				if err != nil {
					t.Errorf("acquire %d: %v", i, err)
					return
				}
				if res.InFlight > 10 {
					t.Errorf("acquire %d: %d in flight, limit 10", i, res.InFlight)
				}
				if res.Allowed {
					mu.Lock()
					taken = append(taken, a.ID)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return taken
	}
	taken := race(1)
	if t.Failed() {
		return
	}
	if len(taken) != 10 {
		t.Fatalf("200 acquirers over 3 instances at a limit of 10: %d leases taken, want 10", len(taken))
	}
	if got := held(t, ls[1], "", time.Time{}, "race"); got[0] != 10 {
		t.Fatalf("held: %d, want 10", got[0])
	}
	for i, id := range taken {
		if err := release(ls[i%3], counter.LeaseRef{ID: id}); err != nil {
			t.Fatalf("release %s: %v", id, err)
		}
	}
	if taken := race(2); len(taken) != 10 {
		t.Fatalf("after the 10 were released, 200 more acquirers: %d leases taken, want 10", len(taken))
	}
}

// leaseChurn runs acquirers that hold a lease briefly and release it,
// through three instances: the leases in flight, counted from after each
// acquire to before its release (so never more than the store's own count),
// never exceed the limit, and every acquirer gets a turn.
func leaseChurn(t *testing.T, b Backend) {
	newStore := opener(t, b)
	var ls []counter.Leaser
	for range 3 {
		ls = append(ls, newStore())
	}
	const lim = 5
	var inFlight, most, turns atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	for i := range 30 {
		wg.Go(func() {
			for n := 0; n < 5 && time.Now().Before(deadline); {
				id := fmt.Sprintf("c%d-%d", i, n)
				res, err := ls[i%3].Acquire(context.Background(), counter.Acquire{Key: "churn", ID: id, Limit: lim, TTL: time.Hour})
				if err != nil {
					t.Errorf("acquire %s: %v", id, err)
					return
				}
				if !res.Allowed {
					time.Sleep(time.Millisecond)
					continue
				}
				now := inFlight.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inFlight.Add(-1)
				if err := release(ls[(i+1)%3], counter.LeaseRef{ID: id}); err != nil {
					t.Errorf("release %s: %v", id, err)
					return
				}
				turns.Add(1)
				n++
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got > lim {
		t.Errorf("%d leases in flight at once, limit %d", got, lim)
	}
	if got := turns.Load(); got != 30*5 {
		t.Errorf("%d turns of 150 within 20 s", got)
	}
}
