package redis

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// Reservations are kept in three keys per group (reserve.lua), named
// prefix{group}!rv, !rl and !rs beside the lease keys: one script reserves
// (deciding the request with checklib.lua's decide and recording what it
// charged) or settles, on the group's keys and counters alone, so on a
// cluster it runs on the node of the group's slot. It goes through the
// checks' lanes as a lease operation does (queued).

//go:embed reserve.lua
var reserveTailLua string

var (
	reserveLua = checkLibLua + reserveTailLua
	reserveSHA = goredis.NewScript(reserveLua).Hash()
)

// reserveKeys returns the group's three reservation keys.
func (s *Store) reserveKeys(group string) []string {
	head := s.prefix + "{" + cmp.Or(group, noGroup) + "}!"
	return []string{head + "rv", head + "rl", head + "rs"}
}

// Reserve implements counter.Store in one script. Errors wrap
// counter.ErrInvalid (a malformed request, an id in use) or
// counter.ErrUnavailable.
func (s *Store) Reserve(ctx context.Context, r counter.Reservation) (counter.Reserved, error) {
	if err := counter.ValidateReserve(r); err != nil {
		return counter.Reserved{}, err
	}
	req := r.Request
	keys := make([]string, 0, len(req.Items)+3)
	for _, it := range req.Items {
		keys = append(keys, s.key(req.Group, it.Key))
	}
	keys = append(keys, s.reserveKeys(req.Group)...)
	release := 0
	if r.OnExpiryRelease {
		release = 1
	}
	v, err := s.queued(ctx, reserveLua, reserveSHA, req.Group, keys, "reserve", appendRequest(nil, req), r.ID, r.TTL.Microseconds(), release, r.GroupLimit)
	if err != nil {
		if goredis.HasErrorPrefix(err, "tollgate: reservation id in use") {
			return counter.Reserved{}, fmt.Errorf("reserve: %w", counter.ErrReservationExists)
		}
		return counter.Reserved{}, failed(ctx, "reserve", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 4 {
		return counter.Reserved{}, fmt.Errorf("reserve: %w: %w", counter.ErrUnavailable, errReply)
	}
	checked, _ := reply[0].(string)
	held, ok1 := reply[1].(int64)
	full, ok2 := reply[2].(int64)
	exp, ok3 := reply[3].(int64)
	us, seen, err := decode(checked, nil, len(req.Items))
	if err != nil || !ok1 || !ok2 || !ok3 {
		return counter.Reserved{}, fmt.Errorf("reserve: %w: %w", counter.ErrUnavailable, errReply)
	}
	now := time.UnixMicro(us).UTC()
	if !req.Now.IsZero() {
		now = req.Now.Truncate(time.Microsecond)
	}
	if full == 1 {
		req.Mode = counter.Peek
	}
	s.verify(ctx, req, seen, now)
	res := counter.Reserved{Result: counter.Answer(req, seen, now), Allowed: held == 1, GroupFull: full == 1, Overdrawn: counter.Overdrafts(req, seen, now)}
	if res.Allowed {
		res.ExpiresAt = time.UnixMicro(exp).UTC()
	}
	return res, nil
}

// Settle implements counter.Store in one script.
func (s *Store) Settle(ctx context.Context, ref counter.SettleRef) (counter.Settlement, error) {
	if err := counter.ValidateSettle(ref); err != nil {
		return counter.Settlement{}, err
	}
	v, err := s.queued(ctx, reserveLua, reserveSHA, ref.Group, s.reserveKeys(ref.Group), "settle", instant(ref.Now), ref.ID, ref.Used, counter.SettledKept.Microseconds(), ref.KeptLimit)
	if err != nil {
		return counter.Settlement{}, failed(ctx, "settle reservation", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w: %w", counter.ErrUnavailable, errReply)
	}
	status, _ := reply[0].(int64)
	if status == 0 {
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w", counter.ErrNoReservation)
	}
	rec, _ := reply[len(reply)-1].(string)
	out, err := s.settlement(ref.Group, rec)
	if err != nil || len(reply) != 2 || status > 3 {
		return counter.Settlement{}, fmt.Errorf("settle reservation: %w: %w", counter.ErrUnavailable, errReply)
	}
	if status == 3 {
		return counter.Settlement{}, fmt.Errorf("settle reservation with %d: settled with %d: %w", ref.Used, out.Used, counter.ErrSettled)
	}
	out.Repeat = status == 2
	return out, nil
}

// Reservation implements counter.Store in one script, which writes
// nothing.
func (s *Store) Reservation(ctx context.Context, group, id string, now time.Time) (counter.Held, error) {
	if err := counter.ValidateRead(group, id, now); err != nil {
		return counter.Held{}, fmt.Errorf("read reservation: %w", err)
	}
	v, err := s.queued(ctx, reserveLua, reserveSHA, group, s.reserveKeys(group), "read", instant(now), id)
	if err != nil {
		return counter.Held{}, failed(ctx, "read reservation", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) > 1 {
		return counter.Held{}, fmt.Errorf("read reservation: %w: %w", counter.ErrUnavailable, errReply)
	}
	if len(reply) == 0 {
		return counter.Held{}, fmt.Errorf("read reservation: %w", counter.ErrNoReservation)
	}
	rec, _ := reply[0].(string)
	r, err := s.record(group, rec)
	if err != nil {
		return counter.Held{}, fmt.Errorf("read reservation: %w: %w", counter.ErrUnavailable, err)
	}
	return counter.Held{Charges: r.charges, ExpiresAt: time.UnixMicro(r.exp).UTC(), Settled: r.settled, Used: r.used}, nil
}

// settlement reads a settled record of reserve.lua's in group.
func (s *Store) settlement(group, rec string) (counter.Settlement, error) {
	r, err := s.record(group, rec)
	if err != nil || !r.settled {
		return counter.Settlement{}, errReply
	}
	at := time.UnixMicro(r.at).UTC()
	out := counter.Settlement{Used: r.used, Now: at, Items: make([]counter.SettledItem, len(r.charges))}
	for i, c := range r.charges {
		out.Items[i] = c.Settled(r.after[i], at)
	}
	return out, nil
}

// record is a reservation record of reserve.lua's, decoded: the
// counters' states after a settlement are zero until then.
type record struct {
	settled       bool
	exp, used, at int64
	charges       []counter.Charge
	after         []limit.State
}

// record decodes a reservation record of reserve.lua's in group.
func (s *Store) record(group, rec string) (record, error) {
	const header, charge = 27, 1 + 4*8 + 32 + 2
	if len(rec) < header || rec[0] > 1 {
		return record{}, errReply
	}
	n := int(rec[2])
	r := record{settled: rec[0] == 1, exp: int64(f64(rec[3:])), used: int64(f64(rec[11:])), at: int64(f64(rec[19:])),
		charges: make([]counter.Charge, n), after: make([]limit.State, n)}
	head := s.key(group, "")
	b := rec[header:]
	for i := range n {
		if len(b) < charge {
			return record{}, errReply
		}
		kl := int(binary.LittleEndian.Uint16([]byte(b[charge-2 : charge])))
		if len(b) < charge+kl || !strings.HasPrefix(b[charge:charge+kl], head) {
			return record{}, errReply
		}
		r.charges[i] = counter.Charge{
			Key:       b[charge+len(head) : charge+kl],
			Algorithm: limit.Algorithm(b[0]),
			Limit:     int64(f64(b[1:])),
			Window:    limit.WindowFromMicros(int64(f64(b[9:]))),
			Amount:    int64(f64(b[17:])),
			Charged:   int64(f64(b[25:])),
		}
		r.after[i] = unpackState(b[33:])
		b = b[charge+kl:]
	}
	if len(b) != 0 {
		return record{}, errReply
	}
	return r, nil
}

// ReservedSums implements counter.Store in one script that only reads, sent
// through the lanes as Reset is, so that a busy server is waited for as the
// checks wait for it.
func (s *Store) ReservedSums(ctx context.Context, group string, keys []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateReservedSums(group, keys, now); err != nil {
		return nil, err
	}
	args := make([]any, 0, len(keys)+2)
	args = append(args, "reserved", instant(now))
	for _, k := range keys {
		args = append(args, s.key(group, k))
	}
	v, err := s.queued(ctx, reserveLua, reserveSHA, group, s.reserveKeys(group)[:2], args...)
	if err != nil {
		return nil, failed(ctx, "reserved sums", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != len(keys) {
		return nil, fmt.Errorf("reserved sums: %w: %w", counter.ErrUnavailable, errReply)
	}
	out := make([]int64, len(keys))
	for i, r := range reply {
		if out[i], ok = r.(int64); !ok {
			return nil, fmt.Errorf("reserved sums: %w: %w", counter.ErrUnavailable, errReply)
		}
	}
	return out, nil
}

// Charge implements counter.Store in one script on the group's counters
// (reserve.lua's charge), through the checks' lanes as a settlement goes.
func (s *Store) Charge(ctx context.Context, req counter.Request) (counter.Charged, error) {
	if err := counter.ValidateCharge(req); err != nil {
		return counter.Charged{}, err
	}
	keys := make([]string, len(req.Items))
	for i, it := range req.Items {
		keys[i] = s.key(req.Group, it.Key)
	}
	v, err := s.queued(ctx, reserveLua, reserveSHA, req.Group, keys, "charge", appendRequest(nil, req))
	if err != nil {
		return counter.Charged{}, failed(ctx, "charge", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 2 {
		return counter.Charged{}, fmt.Errorf("charge: %w: %w", counter.ErrUnavailable, errReply)
	}
	us, ok1 := reply[0].(int64)
	states, ok2 := reply[1].(string)
	if !ok1 || !ok2 || len(states) != stateLen*len(req.Items) {
		return counter.Charged{}, fmt.Errorf("charge: %w: %w", counter.ErrUnavailable, errReply)
	}
	after := make([]limit.State, len(req.Items))
	for i := range after {
		after[i] = unpackState(states[stateLen*i:])
	}
	now := time.UnixMicro(us).UTC()
	if !req.Now.IsZero() {
		now = req.Now.Truncate(time.Microsecond)
	}
	return counter.ChargedOf(req, after, now), nil
}
