package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// DefaultMaxReservations bounds the reservations of a store made with
// MaxReservations zero.
const DefaultMaxReservations = 100_000

// reservation is one reservation, live or settled.
type reservation struct {
	id      string
	exp     int64 // Unix µs: gone at exp unless settled
	release bool
	charges []counter.Charge
	// Once settled: what was used, when, the counters' states after it
	// (one per charge), and until when the outcome is kept.
	settled bool
	used    int64
	at      int64
	after   []limit.State
	keep    int64
}

// reservations is the store's reservations, by group then id, under
// s.reserveMu, which is taken before any shard's lock.
type reservations struct {
	byGroup map[string]map[string]*reservation
	n, max  int
}

// Reserve implements counter.Store: the request is checked and the
// reservation recorded under the store's reservation lock, after the
// group's expired reservations are dealt with. It fails with
// counter.ErrInvalid for a malformed request or an id in use, and with
// counter.ErrUnavailable when the store holds MaxReservations already.
func (s *Store) Reserve(_ context.Context, r counter.Reservation) (counter.Reserved, error) {
	if err := counter.ValidateReserve(r); err != nil {
		return counter.Reserved{}, err
	}
	req := r.Request
	now := s.clock(req.Now)
	us := now.UnixMicro()
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	rs := &s.reservations
	s.expire(req.Group, us)
	g := rs.byGroup[req.Group]
	if _, ok := g[r.ID]; ok {
		return counter.Reserved{}, fmt.Errorf("reserve: %w", counter.ErrReservationExists)
	}
	full := false
	if r.GroupLimit > 0 {
		live := int64(0)
		for _, v := range g {
			if !v.settled {
				live++
			}
		}
		full = live >= r.GroupLimit
	}
	if !full && rs.n >= rs.max {
		s.pruneReservations(us)
		if rs.n >= rs.max {
			return counter.Reserved{}, fmt.Errorf("reserve: %d reservations held, the most this store keeps: %w", rs.max, counter.ErrUnavailable)
		}
	}
	if full {
		// The ceilings count as a check's; the policies are not charged.
		req.Mode = counter.Peek
	}
	seen := s.decide(req, us, nil)
	res := counter.Reserved{Result: counter.Answer(req, seen, now), GroupFull: full, Overdrawn: counter.Overdrafts(req, seen, now)}
	if !res.Result.Allowed || full {
		return res, nil
	}
	v := &reservation{id: r.ID, exp: us + r.TTL.Microseconds(), release: r.OnExpiryRelease, charges: counter.Charges(r, seen, us)}
	if g == nil {
		g = map[string]*reservation{}
		rs.byGroup[req.Group] = g
	}
	g[r.ID] = v
	rs.n++
	res.Allowed, res.ExpiresAt = true, time.UnixMicro(v.exp).UTC()
	return res, nil
}

// Settle implements counter.Store.
func (s *Store) Settle(_ context.Context, ref counter.SettleRef) (counter.Settlement, error) {
	if err := counter.ValidateSettle(ref); err != nil {
		return counter.Settlement{}, err
	}
	us := s.clock(ref.Now).UnixMicro()
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	s.expire(ref.Group, us)
	v, ok := s.reservations.byGroup[ref.Group][ref.ID]
	if !ok {
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w", counter.ErrNoReservation)
	}
	if v.settled {
		if v.used != ref.Used {
			return counter.Settlement{}, fmt.Errorf("settle reservation with %d: settled with %d: %w", ref.Used, v.used, counter.ErrSettled)
		}
		return settlement(v, true), nil
	}
	v.settled, v.used, v.at = true, ref.Used, us
	v.after = s.adjust(ref.Group, v.charges, us, ref.Used, false)
	v.keep = max(v.exp, us+counter.SettledKept.Microseconds())
	s.trimKept(ref.Group, ref.ID, ref.KeptLimit)
	return settlement(v, false), nil
}

// trimKept forgets group's oldest settled outcomes (by keep, then id) past
// limit, but never the one of id (limit zero: none). s.reserveMu is held.
// It scans the group, as expire does.
func (s *Store) trimKept(group, id string, limit int64) {
	if limit <= 0 {
		return
	}
	g := s.reservations.byGroup[group]
	var kept []*reservation
	for _, v := range g {
		if v.settled {
			kept = append(kept, v)
		}
	}
	over := int64(len(kept)) - limit
	if over <= 0 {
		return
	}
	slices.SortFunc(kept, func(a, b *reservation) int { return cmp.Or(cmp.Compare(a.keep, b.keep), cmp.Compare(a.id, b.id)) })
	for _, v := range kept {
		if over == 0 {
			break
		}
		if v.id == id {
			continue
		}
		delete(g, v.id)
		s.reservations.n--
		over--
	}
}

// Reservation implements counter.Store.
func (s *Store) Reservation(_ context.Context, group, id string, now time.Time) (counter.Held, error) {
	if err := counter.ValidateRead(group, id, now); err != nil {
		return counter.Held{}, fmt.Errorf("read reservation: %w", err)
	}
	us := s.clock(now).UnixMicro()
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	v, ok := s.reservations.byGroup[group][id]
	if !ok || v.settled && v.keep <= us || !v.settled && v.exp <= us {
		return counter.Held{}, fmt.Errorf("read reservation: %w", counter.ErrNoReservation)
	}
	return counter.Held{Charges: slices.Clone(v.charges), ExpiresAt: time.UnixMicro(v.exp).UTC(), Settled: v.settled, Used: v.used}, nil
}

// settlement answers for the settled reservation v.
func settlement(v *reservation, repeat bool) counter.Settlement {
	at := time.UnixMicro(v.at).UTC()
	out := counter.Settlement{Items: make([]counter.SettledItem, len(v.charges)), Used: v.used, Repeat: repeat, Now: at}
	for i, c := range v.charges {
		out.Items[i] = c.Settled(v.after[i], at)
	}
	return out
}

// adjust applies used in place of each charge's amount to its counter in
// group at us (limit.Adjust), in order, and returns the states it leaves;
// release gives each amount back instead. s.reserveMu is held; adjust
// takes the shards' locks.
func (s *Store) adjust(group string, charges []counter.Charge, us, used int64, release bool) []limit.State {
	req := counter.Request{Group: group, Items: make([]counter.Item, len(charges))}
	for i, c := range charges {
		req.Items[i].Key = c.Key
	}
	keys, idx := s.digests(req, nil, nil)
	locked := s.lock(slices.Clone(idx))
	defer s.unlock(locked)
	work := make([]pending, 0, len(charges))
	after := make([]limit.State, len(charges))
	for i, c := range charges {
		delta := used - c.Amount
		if release {
			delta = -c.Amount
		}
		st := limit.Adjust(c.Algorithm, s.state(work, idx[i], keys[i]), us, delta, c.Charged, c.Limit, c.Window)
		work = append(work, pending{idx[i], keys[i], st, limit.Expiry(c.Algorithm, st, c.Window)})
		after[i] = st
	}
	s.store(work, group, us)
	return after
}

// expire settles group's reservations that expired unsettled by us, in
// order of expiry: a release gives its amounts back at its expiry instant,
// the others keep them; and it forgets the settled outcomes no longer
// kept. s.reserveMu is held.
func (s *Store) expire(group string, us int64) {
	rs := &s.reservations
	g := rs.byGroup[group]
	var due []*reservation
	for id, v := range g {
		switch {
		case v.settled && v.keep <= us:
			delete(g, id)
			rs.n--
		case !v.settled && v.exp <= us:
			due = append(due, v)
		}
	}
	slices.SortFunc(due, func(a, b *reservation) int {
		return cmp.Or(cmp.Compare(a.exp, b.exp), cmp.Compare(a.id, b.id))
	})
	for _, v := range due {
		if v.release {
			s.adjust(group, v.charges, v.exp, 0, true)
		}
		delete(g, v.id)
		rs.n--
	}
	if len(g) == 0 {
		delete(rs.byGroup, group)
	}
}

// pruneReservations expires every group's reservations by us and returns
// how many are gone. s.reserveMu is held.
func (s *Store) pruneReservations(us int64) int {
	n := s.reservations.n
	for group := range s.reservations.byGroup {
		s.expire(group, us)
	}
	return n - s.reservations.n
}

// ReservedSums implements counter.Store under the store's reservation
// lock.
func (s *Store) ReservedSums(_ context.Context, group string, keys []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateReservedSums(group, keys, now); err != nil {
		return nil, err
	}
	us := s.clock(now).UnixMicro()
	out := make([]int64, len(keys))
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	for _, v := range s.reservations.byGroup[group] {
		if v.settled || v.exp <= us {
			continue
		}
		for _, c := range v.charges {
			for i, k := range keys {
				if k == c.Key {
					out[i] += c.Amount
				}
			}
		}
	}
	return out, nil
}

// Charge implements counter.Store: each item's cost is added with
// limit.Adjust under its shard's lock, in order.
func (s *Store) Charge(_ context.Context, req counter.Request) (counter.Charged, error) {
	if err := counter.ValidateCharge(req); err != nil {
		return counter.Charged{}, err
	}
	now := s.clock(req.Now)
	us := now.UnixMicro()
	keys, idx := s.digests(req, nil, nil)
	locked := s.lock(slices.Clone(idx))
	defer s.unlock(locked)
	work := make([]pending, 0, len(req.Items))
	after := make([]limit.State, len(req.Items))
	for i, it := range req.Items {
		st := limit.Adjust(it.Algorithm, s.state(work, idx[i], keys[i]), us, it.Cost, 0, it.Limit, it.Window)
		work = append(work, pending{idx[i], keys[i], st, limit.Expiry(it.Algorithm, st, it.Window)})
		after[i] = st
	}
	s.store(work, req.Group, us)
	return counter.ChargedOf(req, after, now), nil
}
