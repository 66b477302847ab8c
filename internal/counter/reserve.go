package counter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// Reservations: budgets whose cost is known only afterwards. A reservation
// charges an amount to a request's policy counters, decided and counted as a
// Check of the request, and records in the same atomic step what it charged
// (each policy item's counter, arguments and amount, and the window it was
// charged in). Settle later applies the difference between what was really
// used and what was charged: a give-back to the window charged while it
// still counts, an excess to the current window even past the limit
// (limit.Adjust). A reservation nobody settles by its expiry is settled at
// the full amount (nothing changes), or, with OnExpiryRelease, released
// (settled at 0) at its expiry instant, exactly once, by the next
// Reserve or Settle of its group on any instance (or a store's sweep).
//
// A settled reservation's outcome is kept, so that the same settlement
// sent again (a retry after a lost answer) gets the same answer, marked
// Repeat: until the later of its expiry and an hour after it was settled.
// Reservations live beside the counters and leases of the same store, named
// by Group and ID, and Reset does not touch them: a reset counter is charged
// and given back to as a new one.

// ErrNoReservation is returned (wrapped) by Settle when the group holds no
// reservation by that id, live or settled: it was never made, or it expired
// unsettled (at its expiry exactly, it is gone), or its settled outcome is
// no longer kept.
var ErrNoReservation = errors.New("no such reservation")

// ErrSettled is returned (wrapped) by Settle when the reservation was settled
// already with another Used: a settlement happens once.
var ErrSettled = errors.New("reservation settled already")

// ErrReservationExists is returned (wrapped) by Reserve when the group
// holds a reservation by that id already, live or settled and kept: nothing
// was reserved. It wraps ErrInvalid, so a caller that chose its ids at
// random sees a malformed request, and one that derives an id from a
// client's idempotency key knows the reservation was made before.
var ErrReservationExists = fmt.Errorf("reservation id in use: %w", ErrInvalid)

// Bounds of a reservation's time to live, and how long a settled outcome is
// kept at least after its settlement. Reservation ids are 1 to MaxKeyLen
// bytes, any bytes.
const (
	MinReserveTTL = time.Millisecond
	MaxReserveTTL = 24 * time.Hour
	SettledKept   = time.Hour
)

// Reservation asks to reserve amounts of a request's policy counters.
type Reservation struct {
	// Request is decided as a Check of it would be (its Mode must be
	// Consume): the ceilings tier, then the policies, all or nothing, with
	// advisory items. The policy items (after Request.Ceilings) are what is
	// reserved, each for its Cost; an advisory policy item is reserved only
	// when it allowed. Request.Group names the reservation's owner and
	// Request.Now replaces the store's clock as in a Check.
	Request Request
	// ID names the reservation, 1 to MaxKeyLen bytes, unique and
	// unguessable: Settle names it by its group and ID alone. An ID the
	// group holds already, live or settled and kept, is refused with
	// ErrReservationExists.
	ID string
	// TTL is how long the reservation waits for its settlement,
	// MinReserveTTL to MaxReserveTTL; the store keeps microseconds.
	TTL time.Duration
	// OnExpiryRelease gives the whole amount back when the reservation
	// expires unsettled, as a Settle with Used 0 at its expiry would;
	// otherwise the amount stays charged.
	OnExpiryRelease bool
	// GroupLimit, when not zero, is how many live (unsettled, unexpired)
	// reservations the group may hold, 0 to limit.MaxLimit: a reservation
	// past it is refused as GroupFull.
	GroupLimit int64
}

// Reserved answers a Reservation.
type Reserved struct {
	// Result answers Reservation.Request as a Check of it would: the
	// ceilings were counted when they allowed, the policies only when
	// Allowed. When GroupFull, it is the answer of a Peek of the request
	// (the ceilings counted as a Check counts them, the policies not).
	Result Result
	// Allowed says the reservation is held: every enforced item allowed
	// and the group had room.
	Allowed bool
	// GroupFull says the group held GroupLimit live reservations already.
	GroupFull bool
	// ExpiresAt is the reservation's expiry when Allowed, else zero.
	ExpiresAt time.Time
	// Overdrawn is, for each item of Reservation.Request, how many units
	// its counter was past its limit as the request saw it (Overdrafts):
	// what a budget refused after an excess must recover beyond the amount.
	Overdrawn []int64
}

// Overdrafts returns, for each item of req, how many units past its limit
// the counter it saw (seen, at instant now) was: limit.Overdrawn of the
// state before the request counted anything, 0 for one within its limit.
func Overdrafts(req Request, seen []Seen, now time.Time) []int64 {
	out := make([]int64, len(req.Items))
	for i, it := range req.Items {
		out[i] = limit.Overdrawn(it.Algorithm, seen[i].State, now, it.Limit, it.Window)
	}
	return out
}

// SettleRef names a reservation and what was really used of it. Releasing
// a reservation is settling it with Used 0.
type SettleRef struct {
	Group, ID string
	// Used is what was really used, 0 to limit.MaxLimit, charged to every
	// policy item of the reservation in place of its amount.
	Used int64
	// KeptLimit, when not zero, is how many settled outcomes the group
	// keeps at most: settling past it forgets the group's oldest outcomes
	// (by the instant until which each is kept, then id; never the one
	// settled now) before their SettledKept is up, so that a group's
	// settlements hold a share of the store, not all it has. A repeat of a
	// forgotten settlement wraps ErrNoReservation.
	KeptLimit int64
	// Now, when not zero, replaces the store's clock.
	Now time.Time
}

// Settlement answers a Settle.
type Settlement struct {
	// Items are the reservation's policy items in the order of its request,
	// each as its counter stands once settled.
	Items []SettledItem
	// Used is what was settled.
	Used int64
	// Repeat says the reservation was settled before with the same Used:
	// nothing was counted this time, and the answer is the first one's.
	Repeat bool
	// Now is the store clock reading the settlement was made at (the
	// first one's, for a Repeat).
	Now time.Time
}

// SettledItem is one reserved counter once settled.
type SettledItem struct {
	Key       string
	Algorithm limit.Algorithm
	Limit     int64
	Window    limit.Window
	// Amount is what was reserved on it.
	Amount int64
	// Remaining and ResetAt are what the counter held once settled
	// (limit.Left of its state at the settlement's instant).
	Remaining int64
	ResetAt   time.Time
	// Overdrawn is how many units it was past its limit then
	// (limit.Overdrawn): an excess settled past what was left. Reserve and
	// Check refuse it until it recovers.
	Overdrawn int64
}

// Held is a reservation as its store keeps it (Reserver.Reservation).
type Held struct {
	// Charges are what it holds of each policy item, in the order of its
	// request (none when its only item was advisory and had no room).
	Charges []Charge
	// ExpiresAt is its expiry, as Reserved.ExpiresAt answered it.
	ExpiresAt time.Time
	// Settled says it was settled, with Used.
	Settled bool
	Used    int64
}

// Charge is what a reservation holds of one policy item: the stores record
// it when they reserve and apply limit.Adjust with it when they settle.
type Charge struct {
	Key       string
	Algorithm limit.Algorithm
	Limit     int64
	Window    limit.Window
	Amount    int64
	// Charged is the Start of the state the charge left: the start of the
	// window it was charged in (µs).
	Charged int64
}

// Settled answers for the charge c whose counter holds after at instant
// now, once settled.
func (c Charge) Settled(after limit.State, now time.Time) SettledItem {
	rem, reset := limit.Left(c.Algorithm, after, now, c.Limit, c.Window)
	return SettledItem{
		Key: c.Key, Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window, Amount: c.Amount,
		Remaining: rem, ResetAt: reset,
		Overdrawn: limit.Overdrawn(c.Algorithm, after, now, c.Limit, c.Window),
	}
}

// Charges returns what reserving r charges when its request's items saw
// seen at instant now (Unix µs) and it is Allowed: its policy items that
// allowed, in order, each with the window its own admission charged in.
func Charges(r Reservation, seen []Seen, now int64) []Charge {
	req := r.Request
	out := make([]Charge, 0, len(req.Items)-req.Ceilings)
	for i := req.Ceilings; i < len(req.Items); i++ {
		if !seen[i].Allowed {
			continue
		}
		it := req.Items[i]
		_, next := limit.Admit(it.Algorithm, seen[i].State, now, it.Cost, it.Limit, it.Window)
		out = append(out, Charge{Key: it.Key, Algorithm: it.Algorithm, Limit: it.Limit, Window: it.Window, Amount: it.Cost, Charged: next.Start})
	}
	return out
}

// Reserver is the reservation half of the Store contract: every Store
// holds reservations. It is safe for concurrent use and exact across every
// instance that shares its server: a reservation's charge and its record
// are one atomic step, a settlement is applied once however many instances
// race to settle (or to release on expiry), and no give-back is lost. Every
// call is one round trip. Errors wrap ErrUnavailable, ErrInvalid (and
// ErrReservationExists), ErrNoReservation or ErrSettled.
type Reserver interface {
	// Reserve decides r.Request as a Check of it and, when it is allowed
	// and the group has room, records the reservation.
	Reserve(ctx context.Context, r Reservation) (Reserved, error)
	// Settle applies ref.Used in place of the amounts reserved, once; the
	// same settlement again answers as the first one did, marked Repeat,
	// while the outcome is kept. A different Used for a settled
	// reservation wraps ErrSettled; an unknown or expired one
	// ErrNoReservation.
	Settle(ctx context.Context, ref SettleRef) (Settlement, error)
	// Reservation reads the group's reservation id as it is kept at
	// instant now (zero: the store's clock), changing nothing: what is
	// due then is left to the next Reserve or Settle. It answers a
	// retry that Reserve refused with ErrReservationExists as the first
	// reservation was answered. An id the group does not hold at now
	// (never made, expired unsettled, or its settled outcome no longer
	// kept) wraps ErrNoReservation.
	Reservation(ctx context.Context, group, id string, now time.Time) (Held, error)
	// ReservedSums returns, for each of keys, the sum of the amounts that
	// group's live reservations hold on its counter at now (zero: the
	// store's clock): those unsettled whose expiry is after now. It only
	// reads, in one round trip, and deals with no expiry: a reservation
	// past its expiry that no call has released yet counts nothing here,
	// though its amount is still in its counter until then. The answer is
	// what the usage report and the dashboard call reserved (of a budget,
	// its counter counts the reserved and the spent alike). Errors wrap
	// ErrInvalid (a group, key or now that Validate would refuse, or more
	// than MaxItems keys) or ErrUnavailable.
	ReservedSums(ctx context.Context, group string, keys []string, now time.Time) ([]int64, error)
}

// ValidateRead checks the arguments of a Reservation read. Its errors
// wrap ErrInvalid.
func ValidateRead(group, id string, now time.Time) error {
	return ValidateSettle(SettleRef{Group: group, ID: id, Now: now})
}

// ValidateReservedSums checks a ReservedSums call's arguments. Its errors
// wrap ErrInvalid.
func ValidateReservedSums(group string, keys []string, now time.Time) error {
	if !validGroup(group) {
		return fmt.Errorf("group of %d bytes: must be at most %d bytes of A-Z, a-z, 0-9, _ and -: %w", len(group), MaxGroupLen, ErrInvalid)
	}
	if len(keys) > MaxItems {
		return fmt.Errorf("%d keys: at most %d: %w", len(keys), MaxItems, ErrInvalid)
	}
	for _, k := range keys {
		if k == "" || len(k) > MaxKeyLen {
			return fmt.Errorf("key of %d bytes: must be 1 to %d: %w", len(k), MaxKeyLen, ErrInvalid)
		}
	}
	return validNow(now)
}

// ValidateReserve checks a Reservation's shape before it is sent anywhere.
// Its errors wrap ErrInvalid.
func ValidateReserve(r Reservation) error {
	if r.Request.Mode != Consume {
		return fmt.Errorf("reservation in mode %d: must consume: %w", r.Request.Mode, ErrInvalid)
	}
	if err := Validate(r.Request); err != nil {
		return err
	}
	if r.Request.Ceilings == len(r.Request.Items) {
		return fmt.Errorf("reservation of %d items, all ceilings: nothing to reserve: %w", len(r.Request.Items), ErrInvalid)
	}
	if r.ID == "" || len(r.ID) > MaxKeyLen {
		return fmt.Errorf("reservation id of %d bytes: must be 1 to %d: %w", len(r.ID), MaxKeyLen, ErrInvalid)
	}
	if r.TTL < MinReserveTTL || r.TTL > MaxReserveTTL {
		return fmt.Errorf("reservation ttl %s: must be %s to %s: %w", r.TTL, MinReserveTTL, MaxReserveTTL, ErrInvalid)
	}
	if r.GroupLimit < 0 || r.GroupLimit > limit.MaxLimit {
		return fmt.Errorf("group reservation limit %d: must be 0 to %d: %w", r.GroupLimit, limit.MaxLimit, ErrInvalid)
	}
	return nil
}

// ValidateSettle checks a SettleRef's shape. Its errors wrap ErrInvalid.
func ValidateSettle(ref SettleRef) error {
	if !validGroup(ref.Group) {
		return fmt.Errorf("group of %d bytes: must be at most %d bytes of A-Z, a-z, 0-9, _ and -: %w", len(ref.Group), MaxGroupLen, ErrInvalid)
	}
	if ref.ID == "" || len(ref.ID) > MaxKeyLen {
		return fmt.Errorf("reservation id of %d bytes: must be 1 to %d: %w", len(ref.ID), MaxKeyLen, ErrInvalid)
	}
	if ref.Used < 0 || ref.Used > limit.MaxLimit {
		return fmt.Errorf("used %d: must be 0 to %d: %w", ref.Used, limit.MaxLimit, ErrInvalid)
	}
	if ref.KeptLimit < 0 || ref.KeptLimit > limit.MaxLimit {
		return fmt.Errorf("kept limit %d: must be 0 to %d: %w", ref.KeptLimit, limit.MaxLimit, ErrInvalid)
	}
	return validNow(ref.Now)
}
