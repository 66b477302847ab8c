package gate

// Reservations of budgets whose cost is known only afterwards (issue 40):
// POST /v1/reservations holds an amount of a policy's budget, and
// POST /v1/reservations/{id}/settle later charges what was really used
// (counter.Reserver). Reserving is admitted like a check and a lease:
// Reserve runs the pipeline's first steps with its Reservation, the
// ceilings count it once (the allotment included), spending this
// instance's advances as a check's do, and the amount is charged to the
// policy's counter in the same round trip as the ceilings whose advance ran
// out (counter.Store's Reserve). Settling takes no new place: its routes
// pass Admit, as the lease routes do, and then call Settle. A tenant holds
// at most Config.TenantMaxReservations live reservations at once.
//
// An idempotency key names the reservation: its id is an HMAC of the
// tenant and the key, so a retry sent to any instance names the same
// reservation, and the store, which refuses an id it holds
// (counter.ErrReservationExists), is what makes the retry reserve nothing
// more, exactly across instances, for as long as the store keeps the
// reservation (until it expires unsettled, or for counter.SettledKept
// after it is settled).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
)

// Bounds of a reservation's time to live, its default, and of an
// idempotency key.
const (
	MinReserveTTL     = counter.MinReserveTTL
	MaxReserveTTL     = counter.MaxReserveTTL
	DefaultReserveTTL = 5 * time.Minute
	// MaxIdempotencyKeyLen is the longest Idempotency-Key, in bytes of
	// printable ASCII.
	MaxIdempotencyKeyLen = 255
)

// DefaultTenantMaxReservations is Config.TenantMaxReservations's default.
const DefaultTenantMaxReservations = 10_000

// Reservation is the body of a POST /v1/reservations call.
type Reservation struct {
	Policy  string
	Subject string
	// Amount is what to hold of the budget, 1 to limit.MaxLimit.
	Amount int64
	// TTL is how long the reservation waits for its settlement,
	// MinReserveTTL to MaxReserveTTL.
	TTL time.Duration
	// IdempotencyKey, when not empty, names the reservation
	// (ValidIdempotencyKey): a second Reserve with the same key, by the
	// same tenant and kind of key, reserves nothing and answers Repeat.
	IdempotencyKey string
}

// ReservationVerdict answers a Reservation that no ceiling refused.
type ReservationVerdict struct {
	Policy string
	// Allowed says the amount is held: ID names the reservation, and
	// ExpiresAt is when it settles by itself (at its full amount, or
	// released, by the policy's on_expiry).
	Allowed   bool
	ID        string
	Amount    int64
	ExpiresAt time.Time
	// Remaining and ResetAt are the budget's after the request (the amount
	// taken when Allowed); Limit is its limit, after overrides.
	Remaining, Limit int64
	ResetAt          time.Time
	// RetryAfter is zero when Allowed; otherwise the wait after which the
	// amount would be admitted if nothing else is charged meanwhile.
	RetryAfter time.Duration
	// Overdrawn is, when the budget refused, how many units past its limit
	// it was (limit.Overdrawn: an excess settled before), 0 when within it
	// or when nothing could be read (Degraded).
	Overdrawn int64
	// Unit is the policy's unit ("" for none).
	Unit string
	// Degraded says the counter store could not be asked, and the policy's
	// fail_mode decided: a reservation allowed so holds nothing, and its
	// ID is known to no store.
	Degraded bool
	// TenantFull says the reservation was refused because the tenant holds
	// Config.TenantMaxReservations live reservations already.
	TenantFull bool
	// Repeat says the idempotency key's reservation was made before: this
	// request reserved nothing. Amount and ExpiresAt are the first
	// reservation's, Remaining and ResetAt the budget's as it is now; when
	// the store could not tell them (ExpiresAt zero), Amount is this
	// request's and only ID, Limit and Unit are set besides.
	Repeat bool
	// Level is how much of the budget is taken once the amount is held:
	// set when a live key's reservation of a budget (policy.Policy.Budget)
	// that is not in shadow mode is held.
	Level *BudgetLevel
}

// Settled answers a settlement (or a release, a settlement of 0).
type Settled struct {
	ID string
	// Amount is what was reserved and Used what was settled: Returned is
	// what went back to the budget (Amount - Used when positive), Excess
	// what was charged beyond the amount (Used - Amount when positive).
	Amount, Used, Returned, Excess int64
	// Remaining, Limit and ResetAt are the budget's once settled, and
	// Overdrawn how far past its limit it is then (0 when within it).
	Remaining, Limit, Overdrawn int64
	ResetAt                     time.Time
	// Unit is the policy's unit, as the policy now stands ("" when it is
	// gone).
	Unit string
	// Repeat says the reservation was settled before with the same Used:
	// nothing was counted this time, and the answer is the first one's.
	Repeat bool
	// At is when the settlement was made (the first one's, for a Repeat).
	At time.Time
	// Level is how much of the budget is taken once settled: set for a
	// live key's settlement of a budget (policy.Policy.Budget), not a
	// Repeat.
	Level *BudgetLevel
}

// BudgetLevel is how much of one budget's window is taken, for the
// budget.threshold webhooks (issue 40).
type BudgetLevel struct {
	Policy string
	// Subject is the counter key's subject part: a digest, or "*" for a
	// policy of scope global.
	Subject string
	Unit    string
	// Limit is the budget's limit; Taken what its window counts, spent
	// and reserved alike, past Limit when overdrawn.
	Limit, Taken int64
	// WindowStart and WindowEnd bound the policy's window at the instant
	// (limit.Window's Bounds; for a token bucket, its period).
	WindowStart, WindowEnd time.Time
}

// budgetLevel returns the BudgetLevel of policy p's counter key at at, of
// which taken is counted; nil when p is no budget.
func budgetLevel(p policy.Policy, key string, lim, taken int64, at time.Time) *BudgetLevel {
	if !p.Budget() {
		return nil
	}
	start, end := p.Window.Bounds(at.UnixMicro())
	subject := key[strings.LastIndexByte(key, ':')+1:]
	return &BudgetLevel{Policy: p.Name, Subject: subject, Unit: p.Unit, Limit: lim, Taken: taken,
		WindowStart: time.UnixMicro(start).UTC(), WindowEnd: time.UnixMicro(end).UTC()}
}

// Reservation ids are "rs_" and 32 hex digits: of a random 128-bit number,
// or of an HMAC of the tenant and its idempotency key. Neither is to be
// guessed, and neither holds anything of the policy or subject.
const (
	reservationIDPrefix = "rs_"
	reservationIDLen    = len(reservationIDPrefix) + 32
)

// ValidReservationID reports whether id has the form of a reservation id.
func ValidReservationID(id string) bool {
	if len(id) != reservationIDLen || !strings.HasPrefix(id, reservationIDPrefix) {
		return false
	}
	for i := len(reservationIDPrefix); i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidIdempotencyKey reports whether key can be an Idempotency-Key: 1 to
// MaxIdempotencyKeyLen bytes of printable ASCII (space to "~").
func ValidIdempotencyKey(key string) bool {
	if key == "" || len(key) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// reservationID returns the id of a tenant's new reservation: derived
// from its idempotency key when it has one, random otherwise.
func (g *Gate) reservationID(tenantID, idempotencyKey string) string {
	if idempotencyKey == "" {
		var b [16]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		return reservationIDPrefix + hex.EncodeToString(b[:])
	}
	buf := make([]byte, 0, reservationIDLen)
	return string(g.digest.AppendHex(append(buf, reservationIDPrefix...), 16, "reservation", tenantID, ":", idempotencyKey))
}

// reservePolicy resolves a reservation's policy: one of the tenant's, of a
// windowed algorithm. Errors are *policy.FieldError, or ErrUnavailable
// while the policies are stale.
func reservePolicy(set policy.Set, tenantID, name string) (policy.Policy, error) {
	p, ok := set.Lookup(name)
	if !ok && set.Stale() {
		return policy.Policy{}, errStalePolicy(tenantID, name)
	}
	if !ok {
		return policy.Policy{}, &policy.FieldError{Field: "policy", Reason: fmt.Sprintf("no policy named %q", truncate(name, 64))}
	}
	if p.Algorithm == limit.Concurrency {
		return policy.Policy{}, &policy.FieldError{Field: "policy",
			Reason: fmt.Sprintf(`policy %q has algorithm "concurrency": it bounds holders in flight, not a budget; take a lease with POST /v1/leases`, p.Name)}
	}
	return p, nil
}

// Reserve admits POST /v1/reservations with its body r: the steps Admit
// takes before the store, then the shared ceilings and the reservation in
// one round trip. Errors are Admit's, and a *policy.FieldError for a
// reservation the tenant's policies cannot hold.
func (g *Gate) Reserve(ctx context.Context, req Request, r Reservation) (Verdict, error) {
	p := passage{req: req, now: g.cfg.Now(), reservation: &r}
	var ceilBuf [4]layerItem
	ceilings, work, stop, err := g.pass(ctx, &p, ceilBuf[:0])
	if stop {
		return p.v, err
	}
	defer work.release()
	return g.reserve(ctx, &p, ceilings)
}

// reserve is Reserve's last step, once the ceilings that run in memory
// have passed: the shared ceilings and the reservation in one round trip,
// as acquire does for a lease.
func (g *Gate) reserve(ctx context.Context, p *passage, ceilings []layerItem) (Verdict, error) {
	t, test, r := p.v.Tenant, p.v.Key.Test, p.reservation
	set, err := g.cfg.Policies.For(ctx, t.ID)
	if err != nil {
		return p.v, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, t.ID, err)
	}
	pol, err := reservePolicy(set, t.ID, r.Policy)
	if err != nil {
		return p.v, err
	}
	if reason := subjectFault(pol, r.Subject); reason != "" {
		return p.v, &policy.FieldError{Field: "subject", Reason: reason}
	}
	if r.Amount < 1 || r.Amount > limit.MaxLimit {
		return p.v, &policy.FieldError{Field: "amount", Reason: fmt.Sprintf("must be 1 to %d", limit.MaxLimit)}
	}
	if r.TTL < MinReserveTTL || r.TTL > MaxReserveTTL {
		return p.v, &policy.FieldError{Field: "ttl", Reason: fmt.Sprintf("must be %s to %s", MinReserveTTL, MaxReserveTTL)}
	}
	lim := pol.Limit
	if pol.Scope != policy.ScopeGlobal {
		lim = set.LimitFor(pol, r.Subject, p.now)
	}
	lim = min(lim, limit.MaxLimit)
	var buf [80]byte
	key := string(g.appendPolicyKey(buf[:0], t.ID, test, pol, r.Subject))
	id := g.reservationID(t.ID, r.IdempotencyKey)

	var itemBuf [8]counter.Item
	var spentBuf [4]*units
	items, spent := g.ceilingItems(p, ceilings, itemBuf[:0], spentBuf[:0])
	ceilingCount := len(items)
	// A shadow policy's budget is advisory, as in a check: the amount is
	// held when it is there, and the reservation allowed either way.
	items = append(items, counter.Item{Key: key, Algorithm: pol.Algorithm, Limit: lim, Window: pol.Window, Cost: r.Amount, Advisory: pol.Shadow})
	cr := counter.Reservation{
		Request:         counter.Request{Mode: counter.Consume, Group: t.ID, Items: slices.Clone(items), Ceilings: ceilingCount},
		ID:              storeLeaseID(id, test),
		TTL:             r.TTL,
		OnExpiryRelease: pol.ReleaseOnExpiry,
		GroupLimit:      g.cfg.TenantMaxReservations,
	}
	rv := &ReservationVerdict{Policy: pol.Name, ID: id, Amount: r.Amount, Limit: lim, Unit: pol.Unit}

	res, err := throughBreaker(ctx, g, opReserve, t.ID, func() (counter.Reserved, error) { return g.cfg.Store.Reserve(ctx, cr) })
	switch {
	case errors.Is(err, counter.ErrReservationExists):
		// The idempotency key's reservation is held already: this retry
		// reserves nothing more. Its ceilings' units count it as the
		// request it is.
		v := p.v
		rv.Allowed, rv.Repeat = true, true
		g.repeated(ctx, t.ID, cr.ID, items[ceilingCount], rv)
		v.Reservation, v.Allowed = rv, true
		return g.answer(ctx, p, v, false, nil), nil
	case errors.Is(err, counter.ErrInvalid):
		return p.v, fmt.Errorf("reservation of tenant %s: %w", t.ID, err)
	case err != nil:
		return g.reserveDegraded(ctx, p, ceilings, pol, rv, err), nil
	}
	if g.ceilingRefused(ctx, p, ceilings, spent, res.Result) {
		return p.v, nil
	}
	g.renewAdvances(p, ceilings, cr.Request, res.Result)
	v := p.v
	d := res.Result.Decisions[ceilingCount]
	rv.Allowed, rv.TenantFull = res.Allowed, res.GroupFull
	rv.Remaining, rv.ResetAt = d.Remaining, d.ResetAt
	v.Reservation, v.Allowed = rv, res.Allowed
	var refusals []admission.Refusal
	switch {
	case res.Allowed:
		rv.ExpiresAt = res.ExpiresAt
		if !pol.Shadow && !test {
			rv.Level = budgetLevel(pol, key, lim, lim-d.Remaining, res.Result.Now)
		}
		if !pol.Shadow {
			v.Tightest = tighter(v.Tightest, Quota{Name: pol.Name, Limit: lim, Remaining: d.Remaining, Window: windowLength(pol.Window, res.Result.Now), ResetIn: d.ResetAt.Sub(res.Result.Now)})
		}
	case res.GroupFull:
		// No expiry says when one of the tenant's reservations ends: a
		// second, as for a tenant full of leases.
		rv.RetryAfter = time.Second
		refusals = []admission.Refusal{{Layer: admission.LayerPolicy, Policy: pol.Name, Limit: lim, RetryAfter: rv.RetryAfter, ResetAt: res.Result.Now.Add(time.Second), Key: key}}
	default:
		rv.RetryAfter, rv.Overdrawn = d.RetryAfter, res.Overdrawn[ceilingCount]
		refusals = []admission.Refusal{{Layer: admission.LayerPolicy, Policy: pol.Name, Limit: lim, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: key, AlertAfter: pol.AlertAfter}}
	}
	return g.answer(ctx, p, v, false, refusals), nil
}

// repeated fills rv, the answer to a retry of the reservation id of
// group, as the first was answered: the amount and expiry the store keeps,
// and item's budget as it is now (a peek). A retry is rare, so two more
// round trips are its own; when either fails, rv keeps what this request
// says (its amount, no expiry), and the retry is still answered: it
// reserved nothing either way.
func (g *Gate) repeated(ctx context.Context, group, id string, item counter.Item, rv *ReservationVerdict) {
	held, err := throughBreaker(ctx, g, opReserve, group, func() (counter.Held, error) {
		return g.cfg.Store.Reservation(ctx, group, id, time.Time{})
	})
	if err != nil || len(held.Charges) == 0 {
		// Gone since (expired or released at this instant), or the store
		// is away: nothing to say of it but that it was made.
		return
	}
	item.Cost, item.Advisory = 1, false
	res, err := throughBreaker(ctx, g, opCheck, group, func() (counter.Result, error) {
		return g.cfg.Store.Check(ctx, counter.Request{Mode: counter.Peek, Group: group, Items: []counter.Item{item}})
	})
	if err != nil {
		return
	}
	d := res.Decisions[0]
	rv.Amount, rv.ExpiresAt, rv.Remaining, rv.ResetAt = held.Charges[0].Amount, held.ExpiresAt, d.Remaining, d.ResetAt
}

// reserveDegraded answers without the shared store: the ceilings have
// passed L1 and allow; the policy's fail mode decides. An open policy
// hands out a reservation that holds nothing, under an id no store knows
// (settling it answers that it is gone); a closed one refuses for a
// second.
func (g *Gate) reserveDegraded(ctx context.Context, pass *passage, ceilings []layerItem, p policy.Policy, rv *ReservationVerdict, cause error) Verdict {
	v := pass.v
	g.logDegraded(ctx, v.Tenant.ID, cause)
	now := g.cfg.Now()
	v.Degraded = true
	for _, c := range ceilings {
		g.met.degraded[c.layer].Inc()
	}
	g.met.degraded[admission.LayerPolicy].Inc()
	rv.Degraded, rv.ResetAt = true, now.Add(time.Second)
	if p.FailMode == policy.FailOpen {
		rv.Allowed, rv.ExpiresAt = true, now.Add(pass.reservation.TTL)
	} else {
		rv.RetryAfter = time.Second
	}
	v.Reservation, v.Allowed = rv, rv.Allowed
	return g.answer(ctx, pass, v, true, nil)
}

// Settle settles a tenant's reservation with what was really used (0
// releases it): the tenant's alone, and one made with a key of the same
// kind (live or test). Errors: a *policy.FieldError for an id of the wrong
// form or a used out of bounds; counter.ErrNoReservation (wrapped) when no
// such reservation is held (never made, expired unsettled, or its settled
// outcome no longer kept); counter.ErrSettled (wrapped) when it was
// settled with another used; counter.ErrUnavailable.
func (g *Gate) Settle(ctx context.Context, tenantID string, test bool, id string, used int64) (Settled, error) {
	if !ValidReservationID(id) {
		return Settled{}, &policy.FieldError{Field: "id", Reason: `not a reservation id: "rs_" and 32 hex digits, as POST /v1/reservations answered`}
	}
	if used < 0 || used > limit.MaxLimit {
		return Settled{}, &policy.FieldError{Field: "used", Reason: fmt.Sprintf("must be 0 to %d", limit.MaxLimit)}
	}
	work, err := g.hold(ctx, tenantID)
	if err != nil {
		return Settled{}, err
	}
	defer work.release()
	// A tenant keeps as many settled outcomes as it may hold live
	// reservations: its settlements hold a share of the store.
	ref := counter.SettleRef{Group: tenantID, ID: storeLeaseID(id, test), Used: used, KeptLimit: g.cfg.TenantMaxReservations}
	start := time.Now()
	res, err := throughBreaker(ctx, g, opSettle, tenantID, func() (counter.Settlement, error) { return g.cfg.Store.Settle(ctx, ref) })
	if err != nil {
		if storeFailed(ctx, err) {
			// The 503 tells the client only that the store was unavailable.
			g.logCallFailed(ctx, opSettle, start, err)
		}
		return Settled{}, fmt.Errorf("settle reservation of tenant %s: %w", tenantID, err)
	}
	out := Settled{ID: id, Used: res.Used, Repeat: res.Repeat, At: res.Now}
	if len(res.Items) > 0 {
		// A reservation charges one policy item (none when its shadow
		// policy had no room: nothing was held, nothing is settled).
		it := res.Items[0]
		out.Amount, out.Remaining, out.Limit, out.Overdrawn, out.ResetAt = it.Amount, it.Remaining, it.Limit, it.Overdrawn, it.ResetAt
		if p, ok := g.policyOf(ctx, tenantID, it.Key); ok {
			out.Unit = p.Unit
			if !test && !res.Repeat {
				out.Level = budgetLevel(p, it.Key, it.Limit, it.Limit-it.Remaining+it.Overdrawn, res.Now)
			}
		}
	}
	out.Returned, out.Excess = max(0, out.Amount-out.Used), max(0, out.Used-out.Amount)
	return out, nil
}

// policyOf returns the tenant's policy whose counter is key
// (appendPolicyKey's "[t:]p:NAME:…"), as it now stands: false when it is
// gone or the policies cannot be read (a settlement is not failed for its
// unit or its webhooks).
func (g *Gate) policyOf(ctx context.Context, tenantID, key string) (policy.Policy, bool) {
	key = strings.TrimPrefix(key, "t:")
	rest, ok := strings.CutPrefix(key, "p:")
	name, _, found := strings.Cut(rest, ":")
	if !ok || !found {
		return policy.Policy{}, false
	}
	set, err := g.cfg.Policies.For(ctx, tenantID)
	if err != nil {
		return policy.Policy{}, false
	}
	return set.Lookup(name)
}
