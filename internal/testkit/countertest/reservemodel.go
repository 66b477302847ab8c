package countertest

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// ReserveModel is the reference of reservations (counter.Reserver) beside
// Model's of checks, on the same counters: a reservation is a Check of its
// request that, allowed, records its charges (counter.Charges); a
// settlement applies limit.Adjust to each charge once; an expired
// reservation is dealt with at the next Reserve or Settle of its group, in
// order of expiry, a release giving its amounts back at its expiry instant.
// It is not safe for concurrent use.
type ReserveModel struct {
	*Model
	held map[[2]string]*modelReservation
}

type modelReservation struct {
	exp     int64
	release bool
	charges []counter.Charge
	settled bool
	used    int64
	at      int64
	after   []limit.State
	keep    int64
}

// NewReserveModel returns a model with no counters and no reservations.
func NewReserveModel() *ReserveModel {
	return &ReserveModel{Model: NewModel(), held: map[[2]string]*modelReservation{}}
}

// Reserve decides r at instant now (r.Request.Now is not read).
func (m *ReserveModel) Reserve(r counter.Reservation, now time.Time) (counter.Reserved, error) {
	if err := counter.ValidateReserve(r); err != nil {
		return counter.Reserved{}, err
	}
	us := now.UnixMicro()
	req := r.Request
	m.expire(req.Group, us)
	if _, ok := m.held[[2]string{req.Group, r.ID}]; ok {
		return counter.Reserved{}, fmt.Errorf("model: %w", counter.ErrReservationExists)
	}
	live := int64(0)
	for k, v := range m.held {
		if k[0] == req.Group && !v.settled {
			live++
		}
	}
	full := r.GroupLimit > 0 && live >= r.GroupLimit
	if full {
		req.Mode = counter.Peek
	}
	seen := m.decide(req, now)
	res := counter.Reserved{Result: counter.Answer(req, seen, now), GroupFull: full, Overdrawn: counter.Overdrafts(req, seen, now)}
	if !res.Result.Allowed || full {
		return res, nil
	}
	v := &modelReservation{exp: us + r.TTL.Microseconds(), release: r.OnExpiryRelease, charges: counter.Charges(r, seen, us)}
	m.held[[2]string{req.Group, r.ID}] = v
	res.Allowed, res.ExpiresAt = true, time.UnixMicro(v.exp).UTC()
	return res, nil
}

// Settle settles ref at instant now (ref.Now is not read).
func (m *ReserveModel) Settle(ref counter.SettleRef, now time.Time) (counter.Settlement, error) {
	if err := counter.ValidateSettle(ref); err != nil {
		return counter.Settlement{}, err
	}
	us := now.UnixMicro()
	m.expire(ref.Group, us)
	v, ok := m.held[[2]string{ref.Group, ref.ID}]
	switch {
	case !ok:
		return counter.Settlement{}, counter.ErrNoReservation
	case v.settled && v.used != ref.Used:
		return counter.Settlement{}, counter.ErrSettled
	case !v.settled:
		v.settled, v.used, v.at = true, ref.Used, us
		v.after = m.adjust(ref.Group, v.charges, us, func(c counter.Charge) int64 { return ref.Used - c.Amount })
		v.keep = max(v.exp, us+counter.SettledKept.Microseconds())
		ok = false
	}
	at := time.UnixMicro(v.at).UTC()
	out := counter.Settlement{Used: v.used, Repeat: ok, Now: at}
	for i, c := range v.charges {
		out.Items = append(out.Items, c.Settled(v.after[i], at))
	}
	return out, nil
}

func (m *ReserveModel) adjust(group string, charges []counter.Charge, us int64, delta func(counter.Charge) int64) []limit.State {
	var after []limit.State
	for _, c := range charges {
		k := [2]string{group, c.Key}
		m.states[k] = limit.Adjust(c.Algorithm, m.states[k], us, delta(c), c.Charged, c.Limit, c.Window)
		after = append(after, m.states[k])
	}
	return after
}

// expire deals with group's reservations due at us, in order of expiry
// (then id), and forgets the settled ones no longer kept.
func (m *ReserveModel) expire(group string, us int64) {
	var due [][2]string
	for k, v := range m.held {
		switch {
		case k[0] != group:
		case v.settled && v.keep <= us:
			delete(m.held, k)
		case !v.settled && v.exp <= us:
			due = append(due, k)
		}
	}
	slices.SortFunc(due, func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(m.held[a].exp, m.held[b].exp), cmp.Compare(a[1], b[1]))
	})
	for _, k := range due {
		if v := m.held[k]; v.release {
			m.adjust(group, v.charges, v.exp, func(c counter.Charge) int64 { return -c.Amount })
		}
		delete(m.held, k)
	}
}
