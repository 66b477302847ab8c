package counter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// Leases: concurrency limits. A lease holds a place among at most Limit
// holders of one key, held from Acquire until Release or until it expires,
// whichever comes first; a holder that crashed gives its place back at the
// expiry without any call. Leases live beside the counters of the same store,
// named by Group and Key like them, in a namespace of their own (a lease key
// and a counter key that are the same string are two things), except for
// Reset, which forgets both.

// ErrNoLease is returned (wrapped) by Renew and Release when the group holds
// no live lease by that id: it was never acquired, or it was released, or it
// expired (at its expiry exactly, it is gone).
var ErrNoLease = errors.New("no such lease")

// Bounds of a lease's time to live. Lease ids, keys and tallies are at most
// MaxKeyLen bytes, any bytes.
const (
	MinLeaseTTL = time.Millisecond
	MaxLeaseTTL = 24 * time.Hour
)

// Acquire asks for a lease, in one round trip with the service's ceilings.
type Acquire struct {
	// Group names the owner, as Request.Group does.
	Group string
	// Ceilings are decided first, as the items of a Request in Consume mode
	// whose items are all ceilings: they are consumed when every one that is
	// not advisory allows, whatever the lease then answers; when one
	// refuses, nothing is consumed and no lease is looked at. None is fine.
	Ceilings []Item
	// Key names the set of holders the lease joins; Tally, when not empty,
	// names a set of such sets (a policy's, across its subjects) that Held
	// counts. Each is 1 to MaxKeyLen bytes (Tally 0 to MaxKeyLen).
	Key, Tally string
	// ID names the new lease, 1 to MaxKeyLen bytes. The caller chooses it,
	// unique and unguessable: Renew and Release name a lease by its group
	// and ID alone. An ID that the group already holds is refused with
	// ErrInvalid.
	ID string
	// Limit is how many live leases Key may hold, this one included: 1 to
	// limit.MaxLimit. A limit lowered below the live holders admits no one
	// until enough of them are gone.
	Limit int64
	// TTL is how long the lease lives unless renewed, MinLeaseTTL to
	// MaxLeaseTTL; the store keeps microseconds.
	TTL time.Duration
	// GroupLimit, when not zero, is how many live leases the whole Group
	// may hold, whatever their keys (0 to limit.MaxLimit): a bound on what
	// one owner keeps in the store. The store may count leases that
	// expired or were reset within the last second or two as still held;
	// never fewer than are live.
	GroupLimit int64
	// Now, when not zero, replaces the store's clock, as Request.Now does.
	Now time.Time
}

// Acquired answers an Acquire.
type Acquired struct {
	// Ceilings answers Acquire.Ceilings as a Check of them would (a
	// Result whose Decisions follow the Ceilings; Allowed when every
	// enforced one allowed, and only then were they consumed).
	Ceilings Result
	// Allowed says the lease was taken: the ceilings allowed, Key had
	// fewer than Limit live leases and the group fewer than GroupLimit.
	Allowed bool
	// GroupFull says the lease was refused because the group holds
	// GroupLimit leases already (InFlight and ExpiresAt then describe Key's
	// leases as for any refusal).
	GroupFull bool
	// InFlight is how many live leases Key holds after the request, this
	// one included when Allowed; zero when a ceiling refused (the leases
	// were not looked at).
	InFlight int64
	// ExpiresAt is the new lease's expiry when Allowed. When refused for
	// want of a place, it is the earliest expiry among Key's live leases: a
	// place is free by then at the latest, unless the leases are renewed. It
	// is zero when a ceiling refused.
	ExpiresAt time.Time
	// Now is the store clock reading the request was decided at.
	Now time.Time
}

// LeaseRef names one lease for Renew and Release.
type LeaseRef struct {
	Group, ID string
	// TTL is the new time to live from now, for Renew (MinLeaseTTL to
	// MaxLeaseTTL); Release ignores it.
	TTL time.Duration
	// Now, when not zero, replaces the store's clock.
	Now time.Time
}

// Leaser is the lease half of the Store contract: every Store holds
// leases. It is safe for concurrent use, and exact across every instance
// that shares its server: however many
// Acquires race on one key, no more than Limit leases of it are ever live at
// one instant of the store's clock. Every call is one round trip. Errors
// wrap ErrUnavailable, ErrInvalid or ErrNoLease.
type Leaser interface {
	// Acquire decides the ceilings, then takes a lease when they allowed
	// and a place is free.
	Acquire(ctx context.Context, a Acquire) (Acquired, error)
	// Renew gives a live lease a new expiry, now + TTL (which may be
	// earlier than its current one), and returns it; ErrNoLease when the
	// lease is gone.
	Renew(ctx context.Context, ref LeaseRef) (time.Time, error)
	// Release ends a live lease at once; ErrNoLease when it is gone.
	Release(ctx context.Context, ref LeaseRef) error
	// Held returns how many live leases each tally counts, in order, at
	// instant now (zero: the store's clock).
	Held(ctx context.Context, group string, tallies []string, now time.Time) ([]int64, error)
}

// ValidateAcquire checks an Acquire's shape before it is sent anywhere. Its
// errors wrap ErrInvalid.
func ValidateAcquire(a Acquire) error {
	if len(a.Ceilings) > MaxItems {
		return fmt.Errorf("%d ceilings: must be at most %d: %w", len(a.Ceilings), MaxItems, ErrInvalid)
	}
	if len(a.Ceilings) > 0 {
		if err := Validate(a.CeilingRequest()); err != nil {
			return err
		}
	}
	if err := ValidateRef(LeaseRef{Group: a.Group, ID: a.ID, TTL: a.TTL, Now: a.Now}, true); err != nil {
		return err
	}
	if a.Key == "" || len(a.Key) > MaxKeyLen {
		return fmt.Errorf("lease key of %d bytes: must be 1 to %d: %w", len(a.Key), MaxKeyLen, ErrInvalid)
	}
	if len(a.Tally) > MaxKeyLen {
		return fmt.Errorf("tally of %d bytes: must be at most %d: %w", len(a.Tally), MaxKeyLen, ErrInvalid)
	}
	if a.Limit < 1 || a.Limit > limit.MaxLimit {
		return fmt.Errorf("lease limit %d: must be 1 to %d: %w", a.Limit, limit.MaxLimit, ErrInvalid)
	}
	if a.GroupLimit < 0 || a.GroupLimit > limit.MaxLimit {
		return fmt.Errorf("group lease limit %d: must be 0 to %d: %w", a.GroupLimit, limit.MaxLimit, ErrInvalid)
	}
	return nil
}

// ValidateRef checks a LeaseRef's shape; withTTL says whether its TTL is
// used (Renew) or not (Release). Its errors wrap ErrInvalid.
func ValidateRef(ref LeaseRef, withTTL bool) error {
	if !validGroup(ref.Group) {
		return fmt.Errorf("group of %d bytes: must be at most %d bytes of A-Z, a-z, 0-9, _ and -: %w", len(ref.Group), MaxGroupLen, ErrInvalid)
	}
	if ref.ID == "" || len(ref.ID) > MaxKeyLen {
		return fmt.Errorf("lease id of %d bytes: must be 1 to %d: %w", len(ref.ID), MaxKeyLen, ErrInvalid)
	}
	if withTTL && (ref.TTL < MinLeaseTTL || ref.TTL > MaxLeaseTTL) {
		return fmt.Errorf("lease ttl %s: must be %s to %s: %w", ref.TTL, MinLeaseTTL, MaxLeaseTTL, ErrInvalid)
	}
	return validNow(ref.Now)
}

// ValidateHeld checks the arguments of Held. Its errors wrap ErrInvalid.
func ValidateHeld(group string, tallies []string, now time.Time) error {
	if !validGroup(group) {
		return fmt.Errorf("group of %d bytes: must be at most %d bytes of A-Z, a-z, 0-9, _ and -: %w", len(group), MaxGroupLen, ErrInvalid)
	}
	if len(tallies) > MaxItems {
		return fmt.Errorf("%d tallies: must be at most %d: %w", len(tallies), MaxItems, ErrInvalid)
	}
	for i, t := range tallies {
		if t == "" || len(t) > MaxKeyLen {
			return fmt.Errorf("tally %d of %d bytes: must be 1 to %d: %w", i, len(t), MaxKeyLen, ErrInvalid)
		}
	}
	return validNow(now)
}

func validNow(now time.Time) error {
	if !now.IsZero() && (now.Before(minNow) || !now.Before(maxNow)) {
		return fmt.Errorf("now %s: must be from 1970 to before 2200: %w", now.UTC().Format(time.RFC3339Nano), ErrInvalid)
	}
	return nil
}

// CeilingRequest returns the Request whose answer Acquired.Ceilings is: the
// ceilings in Consume mode, all of them ceilings. Stores decide the ceilings
// as they decide it, and answer them with Answer.
func (a Acquire) CeilingRequest() Request {
	return Request{Mode: Consume, Items: a.Ceilings, Ceilings: len(a.Ceilings), Group: a.Group, Now: a.Now}
}
