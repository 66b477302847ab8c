package gate

// Leases of concurrency policies: a tenant's places in flight, the only
// leases in Tollgate (the ceiling units an instance takes ahead are
// advances, advance.go). A tenant holds at most
// Config.TenantMaxLeases of them at once, across policies and subjects. A policy of algorithm "concurrency"
// admits at most its limit of holders in flight per subject (or in all,
// scope global). Acquiring a lease is admitted like a check: Acquire runs the
// pipeline's first steps with its Lease, the ceilings count it (the allotment
// included), spending this instance's advances as a check's do, and the
// lease is taken in the same round trip as the ceilings whose advance ran
// out (counter.Store's Acquire). Releasing and renewing take no new place:
// their routes pass Admit, as the policy routes do, and then call Release
// and Renew.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
)

// Bounds of a lease's time to live, and the default when a request names
// none.
const (
	MinLeaseTTL     = time.Second
	MaxLeaseTTL     = time.Hour
	DefaultLeaseTTL = time.Minute
)

// Lease is the body of a POST /v1/leases call.
type Lease struct {
	Policy  string
	Subject string
	// TTL is how long the lease lives unless renewed or released,
	// MinLeaseTTL to MaxLeaseTTL.
	TTL time.Duration
}

// LeaseVerdict answers a Lease.
type LeaseVerdict struct {
	Policy string
	// Allowed says a place was taken: ID names the lease, and ExpiresAt is
	// when it ends unless renewed or released.
	Allowed   bool
	ID        string
	ExpiresAt time.Time
	// InFlight is the subject's (or the policy's, scope global) leases in
	// flight after this request, this one included when Allowed; Limit is
	// how many it may hold, after overrides.
	InFlight, Limit int64
	// RetryAfter is zero when Allowed; otherwise the wait until the earliest
	// lease in flight expires, when a place is free unless it is renewed
	// (one may be released sooner).
	RetryAfter time.Duration
	// Degraded says the counter store could not be asked, and the policy's
	// fail_mode decided: a lease allowed so holds no place, and its ID is
	// known to no store.
	Degraded bool
	// TenantFull says the lease was refused because the tenant holds
	// Config.TenantMaxLeases leases already, whatever the subject's room.
	TenantFull bool
}

// Lease ids are "ls_" and 32 hex digits of a random 128-bit number: not to
// be guessed, and holding nothing of the tenant, policy or subject.
const (
	leaseIDPrefix = "ls_"
	leaseIDLen    = len(leaseIDPrefix) + 32
)

// ValidLeaseID reports whether id has the form of a lease id.
func ValidLeaseID(id string) bool {
	if len(id) != leaseIDLen || id[:len(leaseIDPrefix)] != leaseIDPrefix {
		return false
	}
	for i := len(leaseIDPrefix); i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func newLeaseID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return leaseIDPrefix + hex.EncodeToString(b[:])
}

// storeLeaseID is the id a lease is kept under: a test key's leases are
// the sandbox's, "t:" in front, so that a live key cannot renew or release
// a test key's lease or the other way round, as their counters are apart.
func storeLeaseID(id string, test bool) string {
	if test {
		return "t:" + id
	}
	return id
}

// leaseTally is what a policy's leases are counted in, across subjects.
func leaseTally(name string, test bool) string {
	if test {
		return "t:p:" + name
	}
	return "p:" + name
}

// leasePolicy resolves a lease request's policy: one of the tenant's, of
// algorithm concurrency. Errors are *policy.FieldError.
func leasePolicy(set policy.Set, name string) (policy.Policy, error) {
	p, ok := set.Lookup(name)
	if !ok && set.Stale() {
		return policy.Policy{}, fmt.Errorf("%w: policy %q is not among the tenant's policies as last read, and they cannot be read again now", ErrUnavailable, truncate(name, 64))
	}
	if !ok {
		return policy.Policy{}, &policy.FieldError{Field: "policy", Reason: fmt.Sprintf("no policy named %q", truncate(name, 64))}
	}
	if p.Algorithm != limit.Concurrency {
		return policy.Policy{}, &policy.FieldError{Field: "policy",
			Reason: fmt.Sprintf(`policy %q has algorithm %q: leases are for policies of algorithm "concurrency"; ask POST /v1/check for it`, p.Name, p.Algorithm)}
	}
	return p, nil
}

// leaseAnswer is a lease's verdict with its policy's name, as its
// observers are told it (admission.Event.Policies).
type leaseAnswer struct {
	LeaseVerdict
	name [1]string
}

// acquire is Acquire's last step, once the ceilings that run in memory
// have passed: the shared ceilings and the lease in one round trip. The
// ceilings spend this instance's advances as a check's do (ceilingItems):
// only those whose advance has run out go to the store, with the lease.
func (g *Gate) acquire(ctx context.Context, p *passage, ceilings []layerItem) (Verdict, error) {
	v, now := p.v, p.now
	t, test, l := v.Tenant, v.Key.Test, p.lease
	set, err := g.cfg.Policies.For(ctx, t.ID)
	if err != nil {
		return v, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, t.ID, err)
	}
	pol, err := leasePolicy(set, l.Policy)
	if err != nil {
		return v, err
	}
	if reason := subjectFault(pol, l.Subject); reason != "" {
		return v, &policy.FieldError{Field: "subject", Reason: reason}
	}
	if l.TTL < MinLeaseTTL || l.TTL > MaxLeaseTTL {
		return v, &policy.FieldError{Field: "ttl", Reason: fmt.Sprintf("must be %s to %s", MinLeaseTTL, MaxLeaseTTL)}
	}
	lim := pol.Limit
	if pol.Scope != policy.ScopeGlobal {
		lim = set.LimitFor(pol, l.Subject, now)
	}
	lim = min(lim, limit.MaxLimit)
	var buf [80]byte
	key := string(g.appendPolicyKey(buf[:0], t.ID, test, pol, l.Subject))
	id := newLeaseID()
	a := counter.Acquire{
		Group: t.ID, Key: key, Tally: leaseTally(pol.Name, test), ID: storeLeaseID(id, test), Limit: lim, TTL: l.TTL,
		GroupLimit: g.cfg.TenantMaxLeases,
	}
	var itemBuf [8]counter.Item
	var spentBuf [4]*units
	items, spent := g.ceilingItems(p, ceilings, itemBuf[:0], spentBuf[:0])
	if len(items) > 0 {
		a.Ceilings = slices.Clone(items)
	}

	// The verdict and the name its observers are told, in one allocation.
	la := &leaseAnswer{name: [1]string{pol.Name}}
	p.policies = la.name[:]
	res, err := g.storeAcquire(ctx, t.ID, a)
	if errors.Is(err, counter.ErrInvalid) {
		return p.v, fmt.Errorf("lease request of tenant %s: %w", t.ID, err)
	}
	if err != nil {
		return g.leaseDegraded(ctx, p, ceilings, pol, id, lim, err), nil
	}
	if g.ceilingRefused(ctx, p, ceilings, spent, res.Ceilings) {
		return p.v, nil
	}
	g.renewAdvances(p, ceilings, a.CeilingRequest(), res.Ceilings)
	v = p.v
	la.LeaseVerdict = LeaseVerdict{Policy: pol.Name, Allowed: res.Allowed, InFlight: res.InFlight, Limit: lim, TenantFull: res.GroupFull}
	lv := &la.LeaseVerdict
	v.Lease, v.Allowed = lv, res.Allowed
	var refusals []admission.Refusal
	switch {
	case res.Allowed:
		lv.ID, lv.ExpiresAt = id, res.ExpiresAt
	case res.GroupFull:
		// No expiry says when one of the tenant's leases ends: the store
		// counts again within a second or two.
		lv.RetryAfter = time.Second
		refusals = []admission.Refusal{{Layer: admission.LayerPolicy, Policy: pol.Name, Limit: lim, RetryAfter: lv.RetryAfter, ResetAt: res.Now.Add(time.Second), Key: key}}
	default:
		lv.RetryAfter = max(0, res.ExpiresAt.Sub(res.Now))
		refusals = []admission.Refusal{{Layer: admission.LayerPolicy, Policy: pol.Name, Limit: lim, RetryAfter: lv.RetryAfter, ResetAt: res.ExpiresAt, Key: key, AlertAfter: pol.AlertAfter}}
	}
	return g.answer(ctx, p, v, false, refusals), nil
}

// storeAcquire makes the acquire's one round trip, through the tenant's
// circuit breaker, as storeCheck does for a check.
func (g *Gate) storeAcquire(ctx context.Context, tenantID string, a counter.Acquire) (counter.Acquired, error) {
	return throughBreaker(ctx, g, opAcquire, tenantID, func() (counter.Acquired, error) { return g.cfg.Store.Acquire(ctx, a) })
}

// leaseDegraded answers without the shared store: the ceilings have passed
// L1 and allow; the policy's fail mode decides. An open policy hands out a
// lease that holds no place, under an id no store knows (releasing it
// answers that it is gone); a closed one refuses for a second.
func (g *Gate) leaseDegraded(ctx context.Context, pass *passage, ceilings []layerItem, p policy.Policy, id string, lim int64, cause error) Verdict {
	v := pass.v
	g.logDegraded(ctx, v.Tenant.ID, cause)
	now := g.cfg.Now()
	v.Degraded = true
	for _, c := range ceilings {
		g.met.degraded[c.layer].Inc()
	}
	g.met.degraded[admission.LayerPolicy].Inc()
	lv := &LeaseVerdict{Policy: p.Name, Limit: lim, Degraded: true}
	if p.FailMode == policy.FailOpen {
		lv.Allowed, lv.ID, lv.ExpiresAt = true, id, now.Add(pass.lease.TTL)
	} else {
		lv.RetryAfter = time.Second
	}
	v.Lease, v.Allowed = lv, lv.Allowed
	return g.answer(ctx, pass, v, true, nil)
}

// leaseRef returns the store's reference to the tenant's lease id, or a
// *policy.FieldError for an id of the wrong form.
func (g *Gate) leaseRef(tenantID string, test bool, id string, ttl time.Duration) (counter.LeaseRef, error) {
	if !ValidLeaseID(id) {
		return counter.LeaseRef{}, &policy.FieldError{Field: "id", Reason: `not a lease id: "ls_" and 32 hex digits, as POST /v1/leases answered`}
	}
	return counter.LeaseRef{Group: tenantID, ID: storeLeaseID(id, test), TTL: ttl}, nil
}

// Release ends a tenant's lease at once, freeing its place: the tenant's
// alone, and one taken with a key of the same kind (live or test). Errors:
// a *policy.FieldError for an id of the wrong form, counter.ErrNoLease
// (wrapped) when no such lease is live (never taken, released, expired, or
// dropped by a reset), counter.ErrUnavailable.
func (g *Gate) Release(ctx context.Context, tenantID string, test bool, id string) error {
	ref, err := g.leaseRef(tenantID, test, id, 0)
	if err != nil {
		return err
	}
	work, err := g.hold(ctx, tenantID)
	if err != nil {
		return err
	}
	defer work.release()
	if err := g.storeCall(ctx, opRelease, func() error { return g.cfg.Store.Release(ctx, ref) }); err != nil {
		return fmt.Errorf("release lease of tenant %s: %w", tenantID, err)
	}
	return nil
}

// Renew gives a tenant's live lease the expiry now + ttl and returns it.
// Errors as Release's, and a *policy.FieldError for a ttl out of bounds.
func (g *Gate) Renew(ctx context.Context, tenantID string, test bool, id string, ttl time.Duration) (time.Time, error) {
	ref, err := g.leaseRef(tenantID, test, id, ttl)
	if err != nil {
		return time.Time{}, err
	}
	if ttl < MinLeaseTTL || ttl > MaxLeaseTTL {
		return time.Time{}, &policy.FieldError{Field: "ttl", Reason: fmt.Sprintf("must be %s to %s", MinLeaseTTL, MaxLeaseTTL)}
	}
	work, err := g.hold(ctx, tenantID)
	if err != nil {
		return time.Time{}, err
	}
	defer work.release()
	var exp time.Time
	err = g.storeCall(ctx, opRenew, func() (err error) { exp, err = g.cfg.Store.Renew(ctx, ref); return err })
	if err != nil {
		return time.Time{}, fmt.Errorf("renew lease of tenant %s: %w", tenantID, err)
	}
	return exp, nil
}

// InFlight returns the live leases of each named policy of a tenant, live
// keys' (not the sandbox's), across its subjects, in order; 0 for a name
// that holds none. It asks the store once per counter.MaxItems names.
// Errors wrap counter.ErrUnavailable.
func (g *Gate) InFlight(ctx context.Context, tenantID string, policies []string) ([]int64, error) {
	out := make([]int64, 0, len(policies))
	for len(policies) > 0 {
		chunk := policies[:min(len(policies), counter.MaxItems)]
		policies = policies[len(chunk):]
		tallies := make([]string, len(chunk))
		for i, name := range chunk {
			tallies[i] = leaseTally(name, false)
		}
		var n []int64
		err := g.storeCall(ctx, opHeld, func() (err error) { n, err = g.cfg.Store.Held(ctx, tenantID, tallies, time.Time{}); return err })
		if err != nil {
			return nil, fmt.Errorf("leases in flight of tenant %s: %w", tenantID, err)
		}
		out = append(out, n...)
	}
	return out, nil
}
