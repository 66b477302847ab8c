package countertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// runReservations is the reservation contract (counter.Reserver): every
// backend holds reservations.
func runReservations(t *testing.T, b Backend) {
	t.Run("ReserveThenSettleLess", func(t *testing.T) { t.Parallel(); settleLess(t, b) })
	t.Run("ReserveThenSettleMore", func(t *testing.T) { t.Parallel(); settleMore(t, b) })
	t.Run("ReserveThenRelease", func(t *testing.T) { t.Parallel(); settleRelease(t, b) })
	t.Run("ReservationExpiry", func(t *testing.T) { t.Parallel(); reservationExpiry(t, b) })
	t.Run("SettleIsIdempotent", func(t *testing.T) { t.Parallel(); settleIdempotent(t, b) })
	t.Run("RefusedReserveCountsNothing", func(t *testing.T) { t.Parallel(); refusedReserve(t, b) })
	t.Run("SettleUnknownReservation", func(t *testing.T) { t.Parallel(); settleUnknown(t, b) })
	t.Run("ReadReservation", func(t *testing.T) { t.Parallel(); readReservation(t, b) })
	t.Run("SettleAfterTheWindowRolled", func(t *testing.T) { t.Parallel(); settleRolled(t, b) })
	t.Run("ReserveEachAlgorithm", func(t *testing.T) { t.Parallel(); reserveEachAlgorithm(t, b) })
	t.Run("ReserveGroupLimit", func(t *testing.T) { t.Parallel(); reserveGroupLimit(t, b) })
	t.Run("InvalidReservations", func(t *testing.T) { t.Parallel(); invalidReservations(t, b) })
	t.Run("ThreeInstancesReserveAndSettle", func(t *testing.T) { t.Parallel(); reserveThreeInstances(t, b) })
	t.Run("ReservationsMatchTheModel", func(t *testing.T) { t.Parallel(); reservationsMatchModel(t, b) })
	t.Run("ReservedSums", func(t *testing.T) { t.Parallel(); reservedSums(t, b) })
	t.Run("SettledOutcomesHoldAShare", func(t *testing.T) { t.Parallel(); settledKeptLimit(t, b) })
}

// settledKeptLimit: a group keeps at most KeptLimit settled outcomes;
// settling past it forgets its oldest (by keep-until, then id) early, never
// the one just settled, and another group's outcomes not at all; the live
// reservations are untouched.
func settledKeptLimit(t *testing.T, b Backend) {
	s := open(t, b)
	it := counter.Item{Key: "kept", Algorithm: limit.FixedWindow, Limit: 1000, Window: limit.Every(time.Hour), Cost: 1}
	mk := func(group, id string, at time.Time, ttl time.Duration) {
		t.Helper()
		r := counter.Reservation{Request: counter.Request{Group: group, Items: []counter.Item{it}, Now: at}, ID: id, TTL: ttl}
		if res := reserve(t, s, r); !res.Allowed {
			t.Fatalf("reserve %s/%s: %+v", group, id, res)
		}
	}
	// The neighbour's outcome, and a live reservation of the group.
	mk("kept-b", "b1", base, time.Minute)
	settle(t, s, counter.SettleRef{Group: "kept-b", ID: "b1", Used: 1, Now: base, KeptLimit: 3})
	mk("kept-a", "live", base, time.Hour)
	// Six settled one second apart, a share of three: the first three
	// are forgotten, one by one, as the fourth to the sixth settle.
	for i := range 6 {
		at := base.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("a%d", i)
		mk("kept-a", id, at, time.Minute)
		settle(t, s, counter.SettleRef{Group: "kept-a", ID: id, Used: 1, Now: at, KeptLimit: 3})
	}
	now := base.Add(6 * time.Second)
	for i := range 6 {
		id := fmt.Sprintf("a%d", i)
		res, err := settleErr(s, counter.SettleRef{Group: "kept-a", ID: id, Used: 1, Now: now, KeptLimit: 3})
		switch {
		case i < 3 && !errors.Is(err, counter.ErrNoReservation):
			t.Errorf("outcome %s, past the share: %+v, %v; want ErrNoReservation", id, res, err)
		case i >= 3 && (err != nil || !res.Repeat):
			t.Errorf("outcome %s, within the share: %+v, %v; want a repeat", id, res, err)
		}
	}
	if res, err := settleErr(s, counter.SettleRef{Group: "kept-b", ID: "b1", Used: 1, Now: now, KeptLimit: 3}); err != nil || !res.Repeat {
		t.Errorf("the other group's outcome: %+v, %v; want a repeat", res, err)
	}
	if h, err := s.Reservation(context.Background(), "kept-a", "live", now); err != nil || h.Settled {
		t.Errorf("the live reservation: %+v, %v", h, err)
	}
	// The one settled now is kept even when it is the oldest to keep: a
	// reservation of a short ttl settled after others of a long one.
	for i, ttl := range []time.Duration{20 * time.Hour, 20 * time.Hour, 20 * time.Hour, time.Second} {
		id := fmt.Sprintf("c%d", i)
		mk("kept-c", id, now, ttl)
		settle(t, s, counter.SettleRef{Group: "kept-c", ID: id, Used: 1, Now: now, KeptLimit: 3})
	}
	if res, err := settleErr(s, counter.SettleRef{Group: "kept-c", ID: "c3", Used: 1, Now: now, KeptLimit: 3}); err != nil || !res.Repeat {
		t.Errorf("the outcome settled last: %+v, %v; want a repeat", res, err)
	}
	if _, err := settleErr(s, counter.SettleRef{Group: "kept-c", ID: "c0", Used: 1, Now: now, KeptLimit: 3}); !errors.Is(err, counter.ErrNoReservation) {
		t.Errorf("the oldest of the long ones: %v, want ErrNoReservation", err)
	}
}

func reserve(t fataler, s counter.Reserver, r counter.Reservation) counter.Reserved {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Reserve(ctx, r)
	if err != nil {
		t.Fatalf("reserve %+v: %v", r, err)
	}
	if len(res.Result.Decisions) != len(r.Request.Items) {
		t.Fatalf("reserve: %d decisions for %d items", len(res.Result.Decisions), len(r.Request.Items))
	}
	return res
}

func settleErr(s counter.Reserver, ref counter.SettleRef) (counter.Settlement, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Settle(ctx, ref)
}

func settle(t fataler, s counter.Reserver, ref counter.SettleRef) counter.Settlement {
	t.Helper()
	res, err := settleErr(s, ref)
	if err != nil {
		t.Fatalf("settle %+v: %v", ref, err)
	}
	return res
}

// budget is a fixed-window budget of 100 an hour, cost 30.
func budget() counter.Item {
	return counter.Item{Key: "tokens", Algorithm: limit.FixedWindow, Limit: 100, Window: limit.Every(time.Hour), Cost: 30}
}

// reservation reserves items (all policies) as id at base, for a minute.
func reservation(id string, items ...counter.Item) counter.Reservation {
	return counter.Reservation{Request: counter.Request{Items: items, Now: base}, ID: id, TTL: time.Minute}
}

// left is what a peek of it (cost 1) in group at now says is left.
func left(t fataler, s counter.Store, group string, it counter.Item, now time.Time) int64 {
	t.Helper()
	it.Cost, it.Advisory = 1, false
	return check(t, s, counter.Request{Mode: counter.Peek, Group: group, Items: []counter.Item{it}, Now: now}).Decisions[0].Remaining
}

// wantSettled fails unless the settlement's one item holds remaining and
// overdrawn.
func wantSettled(t fataler, what string, got counter.Settlement, remaining, overdrawn int64) {
	t.Helper()
	if len(got.Items) != 1 || got.Items[0].Remaining != remaining || got.Items[0].Overdrawn != overdrawn {
		t.Fatalf("%s: %+v, want one item with %d remaining, %d overdrawn", what, got, remaining, overdrawn)
	}
}

// settleLess settles below the amount reserved: the rest is given back.
func settleLess(t *testing.T, b Backend) {
	s := open(t, b)
	res := reserve(t, s, reservation("r1", budget()))
	if !res.Allowed || res.GroupFull || res.Result.Decisions[0].Remaining != 70 || !res.ExpiresAt.Equal(base.Add(time.Minute)) {
		t.Fatalf("reserve 30 of 100: %+v", res)
	}
	at := base.Add(time.Second)
	got := settle(t, s, counter.SettleRef{ID: "r1", Used: 10, Now: at})
	wantSettled(t, "settled 10 of 30", got, 90, 0)
	if it := got.Items[0]; got.Repeat || got.Used != 10 || !got.Now.Equal(at) || it.Key != "tokens" || it.Amount != 30 || !it.ResetAt.Equal(base.Truncate(time.Hour).Add(time.Hour)) {
		t.Fatalf("settlement: %+v", got)
	}
	if got := left(t, s, "", budget(), at); got != 90 {
		t.Fatalf("left after settling 10 of 30: %d, want 90", got)
	}
}

// settleMore settles above the amount reserved: the excess is counted past
// the limit, and the budget refuses reservations and checks until it
// recovers.
func settleMore(t *testing.T, b Backend) {
	s := open(t, b)
	big := budget()
	big.Cost = 60
	reserve(t, s, reservation("a", budget()))
	if res := reserve(t, s, reservation("b", big)); !res.Allowed || res.Result.Decisions[0].Remaining != 10 {
		t.Fatalf("reserve 60 more: %+v", res)
	}
	at := base.Add(time.Second)
	wantSettled(t, "settled 55 of 30", settle(t, s, counter.SettleRef{ID: "a", Used: 55, Now: at}), 0, 15)
	one := budget()
	one.Cost = 1
	r := reservation("c", one)
	r.Request.Now = at
	if res := reserve(t, s, r); res.Allowed || res.Result.Decisions[0].Remaining != 0 || len(res.Overdrawn) != 1 || res.Overdrawn[0] != 15 {
		t.Fatalf("reserve 1 when overdrawn: %+v, want refused, 15 overdrawn", res)
	}
	if res := check(t, s, counter.Request{Items: []counter.Item{one}, Now: at}); res.Allowed {
		t.Fatalf("check 1 when overdrawn: allowed")
	}
	wantSettled(t, "settled 40 of 60", settle(t, s, counter.SettleRef{ID: "b", Used: 40, Now: at}), 5, 0)
	r.Request.Items[0].Cost = 6
	if res := reserve(t, s, r); res.Allowed || res.Overdrawn[0] != 0 {
		t.Fatalf("reserve 6 of 5 left once recovered: %+v, want refused, none overdrawn", res)
	}
	r.Request.Items[0].Cost = 5
	if res := reserve(t, s, r); !res.Allowed || res.Result.Decisions[0].Remaining != 0 {
		t.Fatalf("reserve 5 once recovered: %+v", res)
	}
}

// settleRelease settles with nothing used: the whole amount is back.
func settleRelease(t *testing.T, b Backend) {
	s := open(t, b)
	reserve(t, s, reservation("r", budget()))
	wantSettled(t, "released", settle(t, s, counter.SettleRef{ID: "r", Now: base}), 100, 0)
	if got := left(t, s, "", budget(), base); got != 100 {
		t.Fatalf("left after a release: %d, want 100", got)
	}
}

// reservationExpiry lets reservations expire unsettled: one keeps its
// amount charged, one that says so gives it back, once, as of its expiry;
// neither can be settled any more.
func reservationExpiry(t *testing.T, b Backend) {
	s := open(t, b)
	kept := reservation("kept", budget())
	kept.Request.Group = "full"
	reserve(t, s, kept)
	freed := reservation("freed", budget())
	freed.Request.Group, freed.OnExpiryRelease = "release", true
	reserve(t, s, freed)
	// The next Reserve or Settle of a group deals with its expired
	// reservations: here a settlement a minute on, at the expiry exactly.
	for _, g := range []string{"full", "release"} {
		id := map[string]string{"full": "kept", "release": "freed"}[g]
		if _, err := settleErr(s, counter.SettleRef{Group: g, ID: id, Used: 1, Now: base.Add(time.Minute)}); !errors.Is(err, counter.ErrNoReservation) {
			t.Fatalf("settle %s at its expiry: got %v, want ErrNoReservation", id, err)
		}
	}
	at := base.Add(2 * time.Minute)
	if got := left(t, s, "full", budget(), at); got != 70 {
		t.Errorf("left after an expiry at the full amount: %d, want 70", got)
	}
	if got := left(t, s, "release", budget(), at); got != 100 {
		t.Errorf("left after an expiry that releases: %d, want 100", got)
	}
	// Given back once: another touch of the group gives nothing more.
	again := reservation("again", budget())
	again.Request.Group, again.Request.Now = "release", at
	if res := reserve(t, s, again); !res.Allowed || res.Result.Decisions[0].Remaining != 70 {
		t.Fatalf("reserve after the release: %+v, want 70 left", res)
	}
	if _, err := settleErr(s, counter.SettleRef{Group: "release", ID: "nothing", Now: at.Add(time.Second)}); !errors.Is(err, counter.ErrNoReservation) {
		t.Fatalf("settle an unknown id: %v", err)
	}
	if got := left(t, s, "release", budget(), at.Add(time.Second)); got != 70 {
		t.Errorf("left after a second touch: %d, want 70", got)
	}
}

// settleIdempotent settles twice with the same Used (the same answer,
// marked Repeat, nothing counted again), then with another (ErrSettled),
// and once the outcome is no longer kept (ErrNoReservation).
func settleIdempotent(t *testing.T, b Backend) {
	s := open(t, b)
	reserve(t, s, reservation("r", budget()))
	at := base.Add(time.Second)
	first := settle(t, s, counter.SettleRef{ID: "r", Used: 20, Now: at})
	for _, later := range []time.Duration{0, time.Minute, time.Hour - time.Microsecond} {
		again := settle(t, s, counter.SettleRef{ID: "r", Used: 20, Now: at.Add(later)})
		if !again.Repeat || again.Used != 20 || !again.Now.Equal(first.Now) || fmt.Sprint(again.Items) != fmt.Sprint(first.Items) {
			t.Fatalf("the same settlement %s later: %+v, want %+v marked Repeat", later, again, first)
		}
	}
	if got := left(t, s, "", budget(), at); got != 80 {
		t.Fatalf("left after settling 20 three times: %d, want 80", got)
	}
	if _, err := settleErr(s, counter.SettleRef{ID: "r", Used: 21, Now: at}); !errors.Is(err, counter.ErrSettled) {
		t.Fatalf("settle with another used: got %v, want ErrSettled", err)
	}
	if _, err := settleErr(s, counter.SettleRef{ID: "r", Used: 20, Now: at.Add(time.Hour)}); !errors.Is(err, counter.ErrNoReservation) {
		t.Fatalf("settle again an hour after: got %v, want ErrNoReservation", err)
	}
	// A settled id is in use while its outcome is kept.
	if _, err := s.Reserve(context.Background(), reservation("r", budget())); err != nil {
		t.Fatalf("reuse an id no longer kept: %v", err)
	}
	if _, err := s.Reserve(context.Background(), reservation("r", budget())); !errors.Is(err, counter.ErrReservationExists) || !errors.Is(err, counter.ErrInvalid) {
		t.Fatalf("reserve with an id in use: got %v, want ErrReservationExists (an ErrInvalid)", err)
	}
}

// refusedReserve asks for more than is left: the ceilings count as a
// check's, the budget nothing, and no reservation is recorded.
func refusedReserve(t *testing.T, b Backend) {
	s := open(t, b)
	ceiling := item("quota", limit.FixedWindow, 10, limit.Every(time.Hour))
	big := budget()
	big.Cost = 101
	r := reservation("r", ceiling, big)
	r.Request.Ceilings = 1
	res := reserve(t, s, r)
	if res.Allowed || res.Result.Allowed || allowed(res.Result) != "[false true false]" {
		t.Fatalf("reserve 101 of 100: %+v", res)
	}
	if got := left(t, s, "", ceiling, base); got != 9 {
		t.Errorf("the ceiling after a refused reservation: %d left, want 9", got)
	}
	if got := left(t, s, "", budget(), base); got != 100 {
		t.Errorf("the budget after a refused reservation: %d left, want 100", got)
	}
	if _, err := settleErr(s, counter.SettleRef{ID: "r", Now: base}); !errors.Is(err, counter.ErrNoReservation) {
		t.Errorf("settle a refused reservation: got %v, want ErrNoReservation", err)
	}
}

// settleUnknown settles ids never reserved, or another group's.
func settleUnknown(t *testing.T, b Backend) {
	s := open(t, b)
	r := reservation("r", budget())
	r.Request.Group = "a"
	reserve(t, s, r)
	for _, ref := range []counter.SettleRef{{Group: "a", ID: "never", Now: base}, {Group: "b", ID: "r", Now: base}, {ID: "r", Now: base}} {
		if _, err := settleErr(s, ref); !errors.Is(err, counter.ErrNoReservation) {
			t.Errorf("settle %+v: got %v, want ErrNoReservation", ref, err)
		}
	}
}

// readReservation reads reservations, from another instance than the one
// that made them: live until their expiry, settled while the outcome is
// kept, then gone; a read changes nothing (an expiry due is still applied
// by the next settlement, once).
func readReservation(t *testing.T, b Backend) {
	newStore := opener(t, b)
	s, other := newStore(), newStore()
	read := func(group, id string, now time.Time) (counter.Held, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return other.Reservation(ctx, group, id, now)
	}
	r := reservation("r", budget())
	r.Request.Group, r.TTL = "a", time.Hour
	reserve(t, s, r)
	release := reservation("gone", budget())
	release.Request.Group, release.OnExpiryRelease = "a", true
	reserve(t, s, release)
	got, err := read("a", "r", base.Add(time.Second))
	c := budget()
	if err != nil || got.Settled || !got.ExpiresAt.Equal(base.Add(time.Hour)) || len(got.Charges) != 1 ||
		got.Charges[0].Key != c.Key || got.Charges[0].Amount != 30 || got.Charges[0].Limit != 100 || got.Charges[0].Algorithm != c.Algorithm {
		t.Fatalf("read a live reservation: %+v, %v; want 30 of tokens held until %v", got, err, base.Add(time.Hour))
	}
	for _, tc := range []struct {
		group, id string
		now       time.Time
	}{{"a", "never", base}, {"b", "r", base}, {"a", "gone", base.Add(time.Minute)}, {"a", "gone", base.Add(time.Hour)}} {
		if got, err := read(tc.group, tc.id, tc.now); !errors.Is(err, counter.ErrNoReservation) {
			t.Errorf("read %s/%s at %v: %+v, %v; want ErrNoReservation", tc.group, tc.id, tc.now, got, err)
		}
	}
	if _, err := read("a", "", base); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("read an empty id: %v, want ErrInvalid", err)
	}
	// The expired release was read as gone, and not applied: the next
	// settlement applies it, once.
	at := base.Add(2 * time.Minute)
	if left := left(t, s, "a", c, at); left != 40 {
		t.Fatalf("after reads past the release's expiry: %d left, want 40", left)
	}
	wantSettled(t, "settle after the release's expiry", settle(t, s, counter.SettleRef{Group: "a", ID: "r", Used: 10, Now: at}), 90, 0)
	if got, err := read("a", "r", at); err != nil || !got.Settled || got.Used != 10 || got.Charges[0].Amount != 30 {
		t.Fatalf("read a settled reservation: %+v, %v; want settled with 10 of 30", got, err)
	}
	c.Cost = 1
	if left := left(t, s, "a", c, at); left != 90 {
		t.Fatalf("after the release's expiry: %d left, want 90", left)
	}
	if _, err := read("a", "r", at.Add(counter.SettledKept)); !errors.Is(err, counter.ErrNoReservation) {
		t.Errorf("read once its outcome is no longer kept: %v, want ErrNoReservation", err)
	}
}

// settleRolled settles after the window charged has rolled: a fixed
// window's give-back is lost with its window, and an excess goes to the
// current one; a sliding window's give-back goes to the previous window
// while it still weighs.
func settleRolled(t *testing.T, b Backend) {
	s := open(t, b)
	next := base.Truncate(time.Hour).Add(time.Hour + 10*time.Minute)
	for _, id := range []string{"back", "more"} {
		r := reservation(id, budget())
		r.TTL = time.Hour
		reserve(t, s, r)
	}
	wantSettled(t, "a give-back in the next window", settle(t, s, counter.SettleRef{ID: "back", Used: 0, Now: next}), 100, 0)
	wantSettled(t, "an excess in the next window", settle(t, s, counter.SettleRef{ID: "more", Used: 50, Now: next}), 80, 0)

	sl := budget()
	sl.Key, sl.Algorithm = "sliding", limit.SlidingWindow
	r := reservation("s", sl)
	r.Request.Group, r.TTL = "sliding", time.Hour
	reserve(t, s, r)
	// Ten minutes into the next window, the previous one weighs 5/6: 30
	// charged weighs 25, 6 used weigh 5.
	wantSettled(t, "a sliding give-back in the next window", settle(t, s, counter.SettleRef{Group: "sliding", ID: "s", Used: 6, Now: next}), 95, 0)
}

// reserveEachAlgorithm reserves and settles on each algorithm: what is
// left once settled is limit's arithmetic on the counter.
func reserveEachAlgorithm(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			it := budget()
			it.Algorithm = alg
			r := reservation("r", it)
			r.Request.Group = alg.String()
			res := reserve(t, s, r)
			ok, st := limit.Admit(alg, limit.State{}, base.UnixMicro(), 30, 100, it.Window)
			if !ok || !res.Allowed {
				t.Fatalf("reserve 30 of 100: %+v", res)
			}
			at := base.Add(30 * time.Second)
			for _, used := range []int64{12, 12} {
				got := settle(t, s, counter.SettleRef{Group: alg.String(), ID: "r", Used: used, Now: at})
				after := limit.Adjust(alg, st, at.UnixMicro(), used-30, st.Start, 100, it.Window)
				rem, reset := limit.Left(alg, after, at, 100, it.Window)
				if it := got.Items[0]; it.Remaining != rem || !it.ResetAt.Equal(reset) || it.Overdrawn != 0 || it.Algorithm != alg {
					t.Fatalf("settled 12 of 30: %+v, want %d left, whole at %s", got, rem, reset)
				}
			}
		})
	}
}

// reserveGroupLimit caps a group's live reservations: at the cap a
// reservation is refused as GroupFull (its ceilings counted, its policies
// not), and a settled or expired one makes room.
func reserveGroupLimit(t *testing.T, b Backend) {
	s := open(t, b)
	ceiling := item("quota", limit.FixedWindow, 100, limit.Every(time.Hour))
	one := budget()
	one.Cost = 1
	capped := func(id string, at time.Time) counter.Reservation {
		r := reservation(id, ceiling, one)
		r.Request.Group, r.Request.Ceilings, r.Request.Now, r.GroupLimit = "capped", 1, at, 2
		return r
	}
	reserve(t, s, capped("a", base))
	reserve(t, s, capped("b", base.Add(time.Second)))
	res := reserve(t, s, capped("c", base.Add(time.Second)))
	if res.Allowed || !res.GroupFull || !res.Result.Allowed {
		t.Fatalf("a third reservation of a group capped at 2: %+v", res)
	}
	if got := left(t, s, "capped", ceiling, base); got != 97 {
		t.Errorf("the ceiling: %d left, want 97 (counted three times)", got)
	}
	if got := left(t, s, "capped", one, base); got != 98 {
		t.Errorf("the budget: %d left, want 98 (charged twice)", got)
	}
	other := capped("c", base)
	other.Request.Group = "other"
	if res := reserve(t, s, other); !res.Allowed {
		t.Fatalf("another group: %+v", res)
	}
	settle(t, s, counter.SettleRef{Group: "capped", ID: "a", Used: 1, Now: base.Add(time.Second)})
	if res := reserve(t, s, capped("c", base.Add(time.Second))); !res.Allowed {
		t.Fatalf("after a settlement: %+v", res)
	}
	if res := reserve(t, s, capped("d", base.Add(time.Second))); !res.GroupFull {
		t.Fatalf("at the cap again: %+v", res)
	}
	// "b" expires a minute after it was made.
	if res := reserve(t, s, capped("d", base.Add(time.Minute+time.Second))); !res.Allowed {
		t.Fatalf("after an expiry: %+v", res)
	}
}

func invalidReservations(t *testing.T, b Backend) {
	s := open(t, b)
	ctx := context.Background()
	ok := reservation("id", budget())
	bad := map[string]func(r *counter.Reservation){
		"peek":                func(r *counter.Reservation) { r.Request.Mode = counter.Peek },
		"no items":            func(r *counter.Reservation) { r.Request.Items = nil },
		"only ceilings":       func(r *counter.Reservation) { r.Request.Ceilings = 1 },
		"a concurrency item":  func(r *counter.Reservation) { r.Request.Items[0].Algorithm = limit.Concurrency },
		"no id":               func(r *counter.Reservation) { r.ID = "" },
		"long id":             func(r *counter.Reservation) { r.ID = strings.Repeat("i", counter.MaxKeyLen+1) },
		"ttl too short":       func(r *counter.Reservation) { r.TTL = counter.MinReserveTTL - time.Microsecond },
		"ttl too long":        func(r *counter.Reservation) { r.TTL = counter.MaxReserveTTL + time.Microsecond },
		"negative group cap":  func(r *counter.Reservation) { r.GroupLimit = -1 },
		"bad group":           func(r *counter.Reservation) { r.Request.Group = "a:b" },
		"cost above MaxLimit": func(r *counter.Reservation) { r.Request.Items[0].Cost = limit.MaxLimit + 1 },
	}
	for name, f := range bad {
		r := ok
		r.Request.Items = []counter.Item{budget()}
		f(&r)
		if _, err := s.Reserve(ctx, r); !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("reserve, %s: got %v, want ErrInvalid", name, err)
		}
	}
	for name, ref := range map[string]counter.SettleRef{
		"no id":          {Now: base},
		"negative used":  {ID: "id", Used: -1, Now: base},
		"used too large": {ID: "id", Used: limit.MaxLimit + 1, Now: base},
		"bad group":      {Group: "a b", ID: "id", Now: base},
	} {
		if _, err := s.Settle(ctx, ref); !errors.Is(err, counter.ErrInvalid) {
			t.Errorf("settle, %s: got %v, want ErrInvalid", name, err)
		}
	}
	if got := left(t, s, "", budget(), base); got != 100 {
		t.Errorf("left after invalid reservations: %d, want 100", got)
	}
}

// reserveThreeInstances races reservations and settlements of random
// amounts on one budget through three instances at one instant: a
// reservation held from the start and settled last reads the counter, which
// holds exactly what was settled (no give-back lost, nothing counted twice),
// and that never exceeds the limit by more than the excesses settled.
func reserveThreeInstances(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	const lim = 500
	it := counter.Item{Key: "race", Algorithm: limit.FixedWindow, Limit: lim, Window: limit.Every(time.Hour), Cost: 1}
	r := counter.Reservation{Request: counter.Request{Group: "race", Items: []counter.Item{it}, Now: base}, ID: "probe", TTL: time.Hour}
	reserve(t, stores[0], r)
	var mu sync.Mutex
	var used, excess, settled int64
	var wg sync.WaitGroup
	for w := range 30 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for n := range 20 {
				r := r
				r.ID = fmt.Sprintf("w%d-%d", w, n)
				r.Request.Items = []counter.Item{it}
				r.Request.Items[0].Cost = rng.Int64N(20) + 1
				res, err := stores[(w+n)%3].Reserve(context.Background(), r)
				if err != nil {
					t.Errorf("reserve %s: %v", r.ID, err)
					return
				}
				if !res.Allowed {
					continue
				}
				u := rng.Int64N(2*r.Request.Items[0].Cost + 1)
				if _, err := stores[(w+n+1)%3].Settle(context.Background(), counter.SettleRef{Group: "race", ID: r.ID, Used: u, Now: base}); err != nil {
					t.Errorf("settle %s: %v", r.ID, err)
					return
				}
				mu.Lock()
				used += u
				excess += max(0, u-r.Request.Items[0].Cost)
				settled++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got := settle(t, stores[1], counter.SettleRef{Group: "race", ID: "probe", Used: 1, Now: base})
	count := lim - got.Items[0].Remaining + got.Items[0].Overdrawn
	if count != used+1 {
		t.Fatalf("%d settlements of %d units in all (and the probe's 1): the budget counts %d", settled, used, count)
	}
	if count > lim+excess+1 {
		t.Fatalf("%d counted, over the limit %d by more than the %d settled in excess", count, lim, excess)
	}
	if settled < 10 {
		t.Fatalf("only %d reservations of 600 were settled", settled)
	}
}

// reservationsMatchModel pushes random streams of reservations,
// settlements, releases, checks and clock jumps (expiring reservations)
// through the store and ReserveModel side by side: every answer must be
// the same.
func reservationsMatchModel(t *testing.T, b Backend) {
	s := open(t, b)
	rapid.Check(t, func(rt *rapid.T) {
		group := fmt.Sprintf("g%d", rand.Uint64())
		m := NewReserveModel()
		var defs []counter.Item
		for i := range rapid.IntRange(1, 3).Draw(rt, "counters") {
			alg := limit.Algorithm(rapid.IntRange(1, 3).Draw(rt, "alg"))
			win := limit.Every(rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}).Draw(rt, "window"))
			if alg == limit.FixedWindow && rapid.Bool().Draw(rt, "month") {
				win = drawMonth(rt)
			}
			defs = append(defs, counter.Item{Key: fmt.Sprintf("k%d", i), Algorithm: alg, Limit: rapid.Int64Range(1, 100).Draw(rt, "limit"), Window: win})
		}
		items := func() []counter.Item {
			var out []counter.Item
			for range rapid.IntRange(1, 3).Draw(rt, "items") {
				it := defs[rapid.IntRange(0, len(defs)-1).Draw(rt, "which")]
				it.Cost = rapid.Int64Range(1, it.Limit+5).Draw(rt, "cost")
				it.Advisory = rapid.IntRange(0, 5).Draw(rt, "advisory") == 0
				out = append(out, it)
			}
			return out
		}
		var ids []string
		now := base.Add(time.Duration(rapid.Int64Range(0, int64(30*24*time.Hour)).Draw(rt, "start"))).Truncate(time.Microsecond)
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, time.Microsecond, time.Second, 20 * time.Second, time.Minute, time.Hour, 2 * time.Hour}).Draw(rt, "jump"))
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1:
				r := counter.Reservation{Request: counter.Request{Group: group, Items: items(), Now: now}, TTL: rapid.SampledFrom([]time.Duration{time.Millisecond, 30 * time.Second, time.Minute, time.Hour}).Draw(rt, "ttl")}
				r.Request.Ceilings = rapid.IntRange(0, len(r.Request.Items)-1).Draw(rt, "ceilings")
				r.OnExpiryRelease = rapid.Bool().Draw(rt, "release")
				r.GroupLimit = rapid.Int64Range(0, 3).Draw(rt, "group limit")
				r.ID = fmt.Sprintf("r%d", step)
				if len(ids) > 0 && rapid.IntRange(0, 9).Draw(rt, "reuse") == 0 {
					r.ID = rapid.SampledFrom(ids).Draw(rt, "reused")
				}
				got, gerr := s.Reserve(context.Background(), r)
				want, werr := m.Reserve(r, now)
				if (gerr == nil) != (werr == nil) || gerr != nil && !errors.Is(gerr, counter.ErrInvalid) {
					rt.Fatalf("step %d reserve %+v: error %v, want %v", step, r, gerr, werr)
				}
				if gerr != nil {
					continue
				}
				if got.Allowed != want.Allowed || got.GroupFull != want.GroupFull || !got.ExpiresAt.Equal(want.ExpiresAt) {
					rt.Fatalf("step %d reserve %+v: %+v, want %+v", step, r, got, want)
				}
				sameResult(rt, step, r.Request, got.Result, want.Result)
				if got.Allowed {
					ids = append(ids, r.ID)
				}
			case 2:
				ref := counter.SettleRef{Group: group, ID: "never", Now: now}
				if len(ids) > 0 {
					ref.ID = rapid.SampledFrom(ids).Draw(rt, "id")
				}
				ref.Used = rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 110)).Draw(rt, "used")
				got, gerr := s.Settle(context.Background(), ref)
				want, werr := m.Settle(ref, now)
				if werr != nil {
					if !errors.Is(gerr, werr) {
						rt.Fatalf("step %d settle %+v: error %v, want %v", step, ref, gerr, werr)
					}
					continue
				}
				if gerr != nil {
					rt.Fatalf("step %d settle %+v: %v", step, ref, gerr)
				}
				if got.Repeat != want.Repeat || got.Used != want.Used || !got.Now.Equal(want.Now) || fmt.Sprint(got.Items) != fmt.Sprint(want.Items) {
					rt.Fatalf("step %d settle %+v:\n got  %+v\n want %+v", step, ref, got, want)
				}
			default:
				req := counter.Request{Group: group, Items: items(), Now: now}
				if rapid.Bool().Draw(rt, "peek") {
					req.Mode = counter.Peek
				}
				sameResult(rt, step, req, check(rt, s, req), m.Check(req, now))
			}
		}
	})
}

// reservedSums sums the live reservations per key, as a second instance
// sees them: not the settled, not the expired (released or not), not
// another group's; a key held by none is 0, and a key asked twice is
// answered twice.
func reservedSums(t *testing.T, b Backend) {
	newStore := opener(t, b)
	s, other := newStore(), newStore()
	small := budget()
	small.Cost = 20
	side := counter.Item{Key: "seconds", Algorithm: limit.SlidingWindow, Limit: 1000, Window: limit.Every(time.Minute), Cost: 7}
	for _, r := range []counter.Reservation{
		reservation("a", budget()),
		reservation("b", small),
		reservation("c", side),
		reservation("settled", small),
		{Request: counter.Request{Items: []counter.Item{small}, Now: base}, ID: "short", TTL: time.Second},
		{Request: counter.Request{Items: []counter.Item{side}, Now: base}, ID: "freed", TTL: time.Second, OnExpiryRelease: true},
		{Request: counter.Request{Group: "elsewhere", Items: []counter.Item{budget()}, Now: base}, ID: "a", TTL: time.Minute},
	} {
		if res := reserve(t, s, r); !res.Allowed {
			t.Fatalf("reserve %s: %+v", r.ID, res)
		}
	}
	settle(t, s, counter.SettleRef{ID: "settled", Used: 5, Now: base})
	keys := []string{"tokens", "seconds", "nothing", "tokens"}
	for _, c := range []struct {
		name string
		at   time.Time
		want []int64
	}{
		{"while all live", base, []int64{70, 14, 0, 70}},
		{"once two expired", base.Add(time.Second), []int64{50, 7, 0, 50}},
		{"once all expired", base.Add(time.Minute), []int64{0, 0, 0, 0}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := other.ReservedSums(ctx, "", keys, c.at)
		cancel()
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: reserved sums %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	// Reading wrote nothing: the budget holds what was charged.
	if got := left(t, s, "", budget(), base); got != 100-30-20-5-20 {
		t.Errorf("left after reading the sums: %d, want %d", got, 100-30-20-5-20)
	}
	ctx := context.Background()
	if _, err := s.ReservedSums(ctx, "bad group!", keys, base); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("a malformed group: %v, want ErrInvalid", err)
	}
	if _, err := s.ReservedSums(ctx, "", []string{""}, base); !errors.Is(err, counter.ErrInvalid) {
		t.Errorf("an empty key: %v, want ErrInvalid", err)
	}
	if got, err := s.ReservedSums(ctx, "", nil, base); err != nil || len(got) != 0 {
		t.Errorf("no keys: %v, %v; want none", got, err)
	}
}
