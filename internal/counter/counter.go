// Package counter is the contract between Tollgate's admission pipeline and
// the places counters live: memory, PostgreSQL and Redis. A Store answers a
// request's counter items in one round trip, all or nothing (in two tiers when
// the request has ceilings, and with advisory items that never block), with
// the arithmetic of internal/limit.
//
// counter imports only internal/limit; the backends live in its
// subpackages, and internal/testkit/countertest holds the conformance suite they all pass.
package counter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// ErrUnavailable is returned (wrapped) when the store cannot be reached or does
// not answer within its deadline. Callers fall back (fail open or closed);
// nothing was consumed, or at worst a consumption was applied that the caller
// never learns about, which a rate limit tolerates.
var ErrUnavailable = errors.New("counter store unavailable")

// ErrInvalid is returned (wrapped) for a malformed request: an unknown mode,
// no items or too many, an empty or oversized key, limit arguments that fail
// limit.Validate, Ceilings outside 0 to len(Items), a Group that is not an
// identifier of at most MaxGroupLen bytes, or a Now outside 1970 to 2199.
var ErrInvalid = errors.New("invalid counter request")

// Mode says whether a check counts.
type Mode uint8

const (
	// Consume counts every item when all of them allow, and none otherwise
	// (but see Request.Ceilings and Item.Advisory).
	Consume Mode = iota
	// Peek answers what Consume would answer, counting nothing but a
	// request's ceilings (see Request.Ceilings).
	Peek
)

// Bounds of one request. A Group is at most MaxGroupLen bytes of
// [A-Za-z0-9_-] (tenant ids are UUIDs), so that every backend can use it as
// it is: in a row key, and as a Redis hash tag.
const (
	MaxItems    = 64
	MaxKeyLen   = 256
	MaxGroupLen = 64
)

// The instants a Request's Now may name: from the epoch, which the window
// arithmetic assumes, to the start of 2200, well below 2^53 µs (June 2255),
// past which Redis's Lua numbers no longer hold microseconds exactly.
var (
	minNow = time.Unix(0, 0)
	maxNow = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Item is one counter to check. Key is opaque to the store and already free of
// anything secret (the gate hashes subjects and IPs into it).
type Item struct {
	Key       string
	Algorithm limit.Algorithm
	Limit     int64
	Window    limit.Window
	Cost      int64
	// Advisory marks an item that never blocks: its refusal does not fail its
	// tier, and it is consumed when it alone allows and its tier is consumed.
	// Shadow policies are advisory.
	//
	// An advisory item is decided like any other, against the working state,
	// and its Decision says what it would have decided; only the verdict of
	// its tier and of the Result leaves it out. A refused advisory item
	// consumes nothing, so neither a later item of the request nor the store
	// sees anything of it: its key keeps the state it had. Advisory items may
	// be ceilings or policies.
	Advisory bool
}

// Request is one all-or-nothing group of items, or two tiers of it: the
// service's ceilings, then a tenant's policies.
//
// Items are decided in order, each against the state left by the earlier
// items of the request on the same key (their tentative consumption, if they
// allowed), whatever the tier and whether or not anything is written in the
// end: a policy item sees what a ceiling item on its key took even when
// another ceiling refused, so an item's decision never depends on the items
// after it.
//
// A tier is kept when every one of its enforced (not advisory) items allows;
// what it keeps is the new states of the items that allowed, advisory ones
// included.
type Request struct {
	Mode  Mode
	Items []Item
	// Ceilings is how many of the first Items are the service's own ceilings
	// (per-IP, tenant quota, allotment). They are consumed, in either mode,
	// when all of them allow, whatever the later items answer; the later items
	// (a tenant's policies) are consumed only when every item allows and Mode
	// is Consume. Zero means plain all-or-nothing over all items, as before.
	// "All of them allow" leaves advisory items out (see Item.Advisory).
	//
	// A key that a ceiling and a policy share, when only the ceilings are
	// consumed, keeps the state the last ceiling on it left.
	Ceilings int
	// Group names the keys' owner (a tenant id): at most MaxGroupLen bytes of
	// [A-Za-z0-9_-], or empty. A counter is named by Group and Key together;
	// the Redis store also uses Group as the hash tag, so one request's keys
	// share a cluster slot.
	Group string
	// Now, when not zero, replaces the store's own clock; it must be from
	// 1970-01-01 to before 2200-01-01 (UTC). Only tests and replays set it;
	// production lets the store's server pick the time, so instances with
	// skewed clocks agree.
	Now time.Time
}

// Result is the answer to a Request: Decisions[i] answers Items[i].
//
// A decision's Allowed and RetryAfter are its item's own verdict, against
// the state the item saw (after the earlier admitted items of the request on
// its key, see Request); whether anything was counted is Result.Allowed's
// business. Its Remaining and ResetAt tell the truth about the counter
// afterwards: they are what the item's key holds once the request is done
// (limit.Left of that state, with the item's own algorithm, limit and
// window), that is
//
//   - after the request, when the request counted the key: every admitted
//     item of a kept request, a ceiling kept beside a policy that refused,
//     an item on a key that another counted item shares;
//   - untouched by the request otherwise: a peek's policies, every item of
//     a refused request (each item on a key that several share reports the
//     same, whatever the earlier ones took tentatively), a refused advisory
//     item.
//
// So Remaining is how many units a consume of the item's counter would be
// admitted for next, and a peek of cost c is allowed exactly when c is at
// most its Remaining.
type Result struct {
	// Allowed is true when every item that is not advisory allowed (so it
	// is true when every item is advisory); an advisory item's refusal shows
	// in its Decision alone. Only when Allowed were the policies (the items
	// after the ceilings) consumed, and never in Peek mode. The ceilings were
	// consumed when all of the enforced ones allowed, whatever the policies
	// answered and in either mode. An advisory item was consumed only when
	// it allowed and its tier was consumed.
	Allowed   bool
	Decisions []limit.Decision
	// Now is the store clock reading the decisions were made at.
	Now time.Time
}

// Store is everything every counter backend does: it checks counters, one
// request or a batch of them, holds leases (Leaser) and reservations
// (Reserver), counts usage after the fact (Charger), and forgets a counter.
// Implementations are safe for concurrent use and make one round trip to
// their server per call (several concurrent calls may share one); each
// asserts the interface at compile time beside its type, and countertest.Run
// holds it to the contract. Errors wrap ErrUnavailable or ErrInvalid (and
// ErrNoLease, for Leaser's; ErrNoReservation and ErrSettled, for
// Reserver's).
type Store interface {
	Check(ctx context.Context, req Request) (Result, error)
	// CheckInto is Check with the Result's decisions written into into when
	// it has room for them (AnswerInto), valid until the caller reuses it:
	// the gate asks the in-process store two or three times a request, and
	// a Result's own slice would be the call's only allocation.
	CheckInto(ctx context.Context, req Request, into []limit.Decision) (Result, error)
	// CheckBatch decides reqs, each all or nothing on its own, as if each
	// were Checked alone, one after the other in some order: no request
	// sees part of another. The checks of a batch (POST /v1/check/batch)
	// travel together, so their HTTP request and their store call are paid
	// once. results[i] and errs[i] answer reqs[i]; errs[i] is nil when
	// results[i] holds the answer, and wraps ErrInvalid (that request is
	// malformed: the others are still decided) or ErrUnavailable (the store
	// did not answer it: perhaps none of them). More than MaxBatch requests
	// are all ErrInvalid (TooLarge).
	CheckBatch(ctx context.Context, reqs []Request) (results []Result, errs []error)
	Leaser
	Reserver
	Charger
	// Reset forgets the counter named key in group, and every lease held
	// under key: what follows counts as on a counter never used. A key that
	// holds nothing is no error. Errors wrap ErrUnavailable or ErrInvalid (a
	// group or key that Validate would refuse).
	Reset(ctx context.Context, group, key string) error
	// Close releases the store's connections and background work.
	Close() error
}

// Validate checks a request's shape before it is sent anywhere. Its errors
// wrap ErrInvalid.
func Validate(req Request) error {
	if req.Mode != Consume && req.Mode != Peek {
		return fmt.Errorf("mode %d: %w", req.Mode, ErrInvalid)
	}
	if len(req.Items) == 0 || len(req.Items) > MaxItems {
		return fmt.Errorf("%d items: must be 1 to %d: %w", len(req.Items), MaxItems, ErrInvalid)
	}
	if req.Ceilings < 0 || req.Ceilings > len(req.Items) {
		return fmt.Errorf("%d ceilings of %d items: %w", req.Ceilings, len(req.Items), ErrInvalid)
	}
	if !validGroup(req.Group) {
		return fmt.Errorf("group of %d bytes: must be at most %d bytes of A-Z, a-z, 0-9, _ and -: %w", len(req.Group), MaxGroupLen, ErrInvalid)
	}
	if !req.Now.IsZero() && (req.Now.Before(minNow) || !req.Now.Before(maxNow)) {
		return fmt.Errorf("now %s: must be from 1970 to before 2200: %w", req.Now.UTC().Format(time.RFC3339Nano), ErrInvalid)
	}
	for i, it := range req.Items {
		if it.Key == "" || len(it.Key) > MaxKeyLen {
			return fmt.Errorf("item %d: key of %d bytes: must be 1 to %d: %w", i, len(it.Key), MaxKeyLen, ErrInvalid)
		}
		if err := limit.Validate(it.Algorithm, it.Limit, it.Cost, it.Window); err != nil {
			return fmt.Errorf("item %d: %w: %w", i, ErrInvalid, err)
		}
	}
	return nil
}

// ValidateReset checks the arguments of Store.Reset. Its errors wrap
// ErrInvalid.
func ValidateReset(group, key string) error {
	if !validGroup(group) {
		return fmt.Errorf("group of %d bytes: must be at most %d bytes of A-Z, a-z, 0-9, _ and -: %w", len(group), MaxGroupLen, ErrInvalid)
	}
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("key of %d bytes: must be 1 to %d: %w", len(key), MaxKeyLen, ErrInvalid)
	}
	return nil
}

// validGroup reports whether g is at most MaxGroupLen bytes of [A-Za-z0-9_-].
func validGroup(g string) bool {
	if len(g) > MaxGroupLen {
		return false
	}
	for i := 0; i < len(g); i++ {
		switch c := g[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Seen is what a store reports for one item: the state it found (after the
// tentative consumption of the earlier admitted items of the same request on
// the same key, ceilings or policies) and whether its own arithmetic
// admitted the item.
type Seen struct {
	State   limit.State
	Allowed bool
}

// Answer turns the states a store saw at instant now into a Result, deriving
// each decision with limit.Decide, Result.Allowed from the verdicts of the
// items that are not advisory, and each Remaining and ResetAt from the state
// its key keeps once the request is done (see Result), which it works out
// from the verdicts as the stores write: the state after the last admitted
// item on the key of a kept tier, else the state the key's first item saw.
// A store whose arithmetic disagrees with limit.Admit is a bug; the store's
// own verdict stands, since it is what was written.
func Answer(req Request, seen []Seen, now time.Time) Result {
	return AnswerInto(req, seen, now, nil)
}

// AnswerInto is Answer with the Result's decisions written into into when
// it has room for them, else into a slice of their own.
func AnswerInto(req Request, seen []Seen, now time.Time, into []limit.Decision) Result {
	if cap(into) < len(req.Items) {
		into = make([]limit.Decision, len(req.Items))
	}
	res := Result{Allowed: true, Decisions: into[:len(req.Items)], Now: now}
	ceilingsOK, policiesOK := true, true
	var nextBuf [8]limit.State
	next := nextBuf[:0]
	for i, it := range req.Items {
		d, st := limit.Decide(it.Algorithm, seen[i].State, now, it.Cost, it.Limit, it.Window)
		d.Allowed = seen[i].Allowed
		if d.Allowed {
			d.RetryAfter = 0
		} else if !it.Advisory {
			if i < req.Ceilings {
				ceilingsOK = false
			} else {
				policiesOK = false
			}
		}
		res.Decisions[i] = d
		next = append(next, st)
	}
	res.Allowed = ceilingsOK && policiesOK
	keepPolicies := ceilingsOK && policiesOK && req.Mode == Consume
	// kept reports whether item j's consumption was written.
	kept := func(j int) bool {
		return seen[j].Allowed && (j < req.Ceilings && ceilingsOK || j >= req.Ceilings && keepPolicies)
	}
	if !sharesKey(req.Items) {
		// Each key is one item's. Decide's Remaining and ResetAt are Left
		// of the state it leaves: right for an item that was kept, and for
		// one refused (which leaves the state it saw). Only an item that
		// allowed and was not kept has what it saw left.
		for i, it := range req.Items {
			if seen[i].Allowed && !kept(i) {
				d := &res.Decisions[i]
				d.Remaining, d.ResetAt = limit.Left(it.Algorithm, seen[i].State, now, it.Limit, it.Window)
			}
		}
		return res
	}
	for i, it := range req.Items {
		// The state the key keeps: the last kept item's on it, else what its
		// first item saw.
		st, found := limit.State{}, false
		for j := len(req.Items) - 1; j >= 0; j-- {
			if req.Items[j].Key == it.Key && kept(j) {
				st, found = next[j], true
				break
			}
		}
		if !found {
			for j := range req.Items {
				if req.Items[j].Key == it.Key {
					st = seen[j].State
					break
				}
			}
		}
		d := &res.Decisions[i]
		d.Remaining, d.ResetAt = limit.Left(it.Algorithm, st, now, it.Limit, it.Window)
	}
	return res
}

// sharesKey reports whether two items have the same key.
func sharesKey(items []Item) bool {
	for i := 1; i < len(items); i++ {
		for j := range i {
			if items[i].Key == items[j].Key {
				return true
			}
		}
	}
	return false
}
