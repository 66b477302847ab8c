package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
)

// DefaultMaxLeases bounds the live leases of a store made with MaxLeases
// zero.
const DefaultMaxLeases = 100_000

// lease is one lease; its key and tally are joined to its group.
type lease struct {
	id, key, tally string // group + "\x00" + …
	group          string
	exp            int64 // Unix µs: gone at exp
}

// leases is the store's leases, under one lock: byID finds a lease, byKey,
// byTally and byGroup count one key's, one tally's and one group's. Expired leases stay until an
// Acquire of their key or Prune sees them; nothing counts them meanwhile.
type leases struct {
	byID    map[string]*lease
	byKey   map[string]map[*lease]struct{}
	byTally map[string]map[*lease]struct{}
	byGroup map[string]map[*lease]struct{}
	max     int
}

func (ls *leases) init(max int) {
	ls.byID = map[string]*lease{}
	ls.byKey = map[string]map[*lease]struct{}{}
	ls.byTally = map[string]map[*lease]struct{}{}
	ls.byGroup = map[string]map[*lease]struct{}{}
	ls.max = max
}

func (ls *leases) add(l *lease) {
	ls.byID[l.id] = l
	join(ls.byKey, l.key, l)
	join(ls.byGroup, l.group, l)
	if l.tally != "" {
		join(ls.byTally, l.tally, l)
	}
}

func (ls *leases) drop(l *lease) {
	delete(ls.byID, l.id)
	leave(ls.byKey, l.key, l)
	leave(ls.byGroup, l.group, l)
	if l.tally != "" {
		leave(ls.byTally, l.tally, l)
	}
}

func join(m map[string]map[*lease]struct{}, k string, l *lease) {
	set := m[k]
	if set == nil {
		set = map[*lease]struct{}{}
		m[k] = set
	}
	set[l] = struct{}{}
}

func leave(m map[string]map[*lease]struct{}, k string, l *lease) {
	if set := m[k]; set != nil {
		delete(set, l)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

// live counts the live leases of one key or tally at now, dropping the
// expired ones it meets when drop is set, and returns the earliest expiry
// among the live ones (zero when none).
func (ls *leases) live(set map[*lease]struct{}, now int64, drop bool) (n, earliest int64) {
	for l := range set {
		if l.exp <= now {
			if drop {
				ls.drop(l)
			}
			continue
		}
		n++
		if earliest == 0 || l.exp < earliest {
			earliest = l.exp
		}
	}
	return n, earliest
}

// prune drops every expired lease and returns how many; s.leaseMu is held.
func (ls *leases) prune(now int64) int {
	n := 0
	for _, l := range ls.byID {
		if l.exp <= now {
			ls.drop(l)
			n++
		}
	}
	return n
}

func (s *Store) clock(now time.Time) time.Time {
	if now.IsZero() {
		now = s.now()
	}
	return now.Truncate(time.Microsecond)
}

// Acquire implements counter.Store: the ceilings as a Check of them, then
// the lease under the store's lease lock. It fails with counter.ErrInvalid
// for a malformed request or an id in use, and with counter.ErrUnavailable
// when the store holds MaxLeases live leases already.
func (s *Store) Acquire(ctx context.Context, a counter.Acquire) (counter.Acquired, error) {
	if err := counter.ValidateAcquire(a); err != nil {
		return counter.Acquired{}, err
	}
	now := s.clock(a.Now)
	a.Now = now
	res := counter.Acquired{Now: now, Ceilings: counter.Result{Allowed: true, Now: now}}
	if len(a.Ceilings) > 0 {
		var err error
		if res.Ceilings, err = s.Check(ctx, a.CeilingRequest()); err != nil {
			return counter.Acquired{}, err
		}
		if !res.Ceilings.Allowed {
			return res, nil
		}
	}
	us := now.UnixMicro()
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	ls := &s.leases
	id := a.Group + "\x00" + a.ID
	if l, ok := ls.byID[id]; ok {
		if l.exp > us {
			return counter.Acquired{}, fmt.Errorf("lease id in use: %w", counter.ErrInvalid)
		}
		ls.drop(l)
	}
	key := a.Group + "\x00" + a.Key
	n, earliest := ls.live(ls.byKey[key], us, true)
	if n >= a.Limit {
		res.InFlight, res.ExpiresAt = n, time.UnixMicro(earliest).UTC()
		return res, nil
	}
	if g := ls.byGroup[a.Group]; a.GroupLimit > 0 && int64(len(g)) >= a.GroupLimit {
		// Expired leases are dropped only once the group looks full.
		if held, _ := ls.live(g, us, true); held >= a.GroupLimit {
			res.GroupFull, res.InFlight = true, n
			if n > 0 {
				res.ExpiresAt = time.UnixMicro(earliest).UTC()
			}
			return res, nil
		}
	}
	if len(ls.byID) >= ls.max && ls.prune(us) == 0 {
		return counter.Acquired{}, fmt.Errorf("acquire lease: %d leases held, the most this store keeps: %w", ls.max, counter.ErrUnavailable)
	}
	l := &lease{id: id, key: key, group: a.Group, exp: us + a.TTL.Microseconds()}
	if a.Tally != "" {
		l.tally = a.Group + "\x00" + a.Tally
	}
	ls.add(l)
	res.Allowed, res.InFlight, res.ExpiresAt = true, n+1, time.UnixMicro(l.exp).UTC()
	return res, nil
}

// find returns the live lease ref names, dropping it when expired;
// s.leaseMu is held.
func (s *Store) find(ref counter.LeaseRef, now int64) (*lease, error) {
	l, ok := s.leases.byID[ref.Group+"\x00"+ref.ID]
	if !ok {
		return nil, fmt.Errorf("lease: %w", counter.ErrNoLease)
	}
	if l.exp <= now {
		s.leases.drop(l)
		return nil, fmt.Errorf("lease: %w", counter.ErrNoLease)
	}
	return l, nil
}

// Renew implements counter.Store.
func (s *Store) Renew(_ context.Context, ref counter.LeaseRef) (time.Time, error) {
	if err := counter.ValidateRef(ref, true); err != nil {
		return time.Time{}, err
	}
	now := s.clock(ref.Now).UnixMicro()
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	l, err := s.find(ref, now)
	if err != nil {
		return time.Time{}, fmt.Errorf("renew %w", err)
	}
	l.exp = now + ref.TTL.Microseconds()
	return time.UnixMicro(l.exp).UTC(), nil
}

// Release implements counter.Store.
func (s *Store) Release(_ context.Context, ref counter.LeaseRef) error {
	if err := counter.ValidateRef(ref, false); err != nil {
		return err
	}
	now := s.clock(ref.Now).UnixMicro()
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	l, err := s.find(ref, now)
	if err != nil {
		return fmt.Errorf("release %w", err)
	}
	s.leases.drop(l)
	return nil
}

// Held implements counter.Store.
func (s *Store) Held(_ context.Context, group string, tallies []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateHeld(group, tallies, now); err != nil {
		return nil, err
	}
	us := s.clock(now).UnixMicro()
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	out := make([]int64, len(tallies))
	for i, t := range tallies {
		out[i], _ = s.leases.live(s.leases.byTally[group+"\x00"+t], us, false)
	}
	return out, nil
}

// Reset implements counter.Store: the counter and the leases of key.
func (s *Store) Reset(_ context.Context, group, key string) error {
	if err := counter.ValidateReset(group, key); err != nil {
		return err
	}
	k := group + "\x00" + key
	d := s.digestOf([]byte(k))
	sh := &s.shards[s.shardOf(d)]
	sh.mu.Lock()
	if i := sh.find(d); i >= 0 {
		sh.removeAt(i)
	}
	sh.mu.Unlock()
	s.leaseMu.Lock()
	for l := range s.leases.byKey[k] {
		s.leases.drop(l)
	}
	s.leaseMu.Unlock()
	return nil
}
