package redis

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/counter"
)

// Leases are kept in three keys per group (leaselib.lua), named
// prefix{group}!lx, !ids and !exp: the '!' after the hash tag sets them
// apart from every counter key, which is prefix{group}:key. Each operation
// is one script on the group's keys alone, so on a cluster it runs on the
// node of the group's slot, as its checks do. An acquire decides its
// ceilings with the checks' own arithmetic (checklib.lua) inside its own
// script (acquire.lua).

var (
	//go:embed leaselib.lua
	leaseLibLua string
	//go:embed acquire.lua
	acquireTailLua string
	//go:embed leaseops.lua
	leaseOpsLua string
)

// The lease scripts, put together from their parts.
var (
	acquireLua = leaseLibLua + checkLibLua + acquireTailLua
	acquireSHA = goredis.NewScript(acquireLua).Hash()
	opsLua     = leaseLibLua + leaseOpsLua
	opsSHA     = goredis.NewScript(opsLua).Hash()
)

// leaseKeys returns the group's three lease keys.
func (s *Store) leaseKeys(group string) []string {
	if group == "" {
		group = noGroup
	}
	head := s.prefix + "{" + group + "}!"
	return []string{head + "lx", head + "ids", head + "exp"}
}

// instant is a script's now argument: empty for the server's clock.
func instant(now time.Time) any {
	if now.IsZero() {
		return ""
	}
	return now.UnixMicro()
}

// queued runs one of the lease scripts through the lanes of the checks
// (coalesce.go), pipelined with them on the lanes' few connections, under the
// store's timeout (or ctx's earlier deadline): a burst of lease operations
// waits its turn in the lane rather than holding a connection each. keys
// share the group's hash tag.
func (s *Store) queued(ctx context.Context, body, sha string, group string, keys []string, args ...any) (any, error) {
	j := &job{done: make(chan struct{}, 1), group: group, keys: keys, lua: &luaCall{body: body, sha: sha, args: args}}
	s.deadlines(ctx, j)
	if err := s.call(ctx, j); err != nil {
		if ctx.Err() == nil && !time.Now().Before(j.deadline) {
			err = context.DeadlineExceeded
		}
		return nil, err
	}
	return j.lua.reply, nil
}

// Acquire implements counter.Store in one script. Errors wrap
// counter.ErrInvalid (a malformed request, an id in use) or
// counter.ErrUnavailable.
func (s *Store) Acquire(ctx context.Context, a counter.Acquire) (counter.Acquired, error) {
	if err := counter.ValidateAcquire(a); err != nil {
		return counter.Acquired{}, err
	}
	creq := a.CeilingRequest()
	keys := make([]string, 0, len(creq.Items)+3)
	for _, it := range creq.Items {
		keys = append(keys, s.key(a.Group, it.Key))
	}
	keys = append(keys, s.leaseKeys(a.Group)...)
	v, err := s.queued(ctx, acquireLua, acquireSHA, a.Group, keys, appendRequest(nil, creq), a.ID, a.Key, a.Tally, a.Limit, a.TTL.Microseconds(), a.GroupLimit)
	if err != nil {
		if goredis.HasErrorPrefix(err, "tollgate: lease id in use") {
			return counter.Acquired{}, fmt.Errorf("acquire lease: id in use: %w", counter.ErrInvalid)
		}
		return counter.Acquired{}, failed(ctx, "acquire lease", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != 5 {
		return counter.Acquired{}, fmt.Errorf("acquire lease: %w: %w", counter.ErrUnavailable, errReply)
	}
	ceilings, _ := reply[0].(string)
	us, seen, err := decode(ceilings, nil, len(a.Ceilings))
	if err != nil {
		return counter.Acquired{}, fmt.Errorf("acquire lease: %w: %w", counter.ErrUnavailable, err)
	}
	now := time.UnixMicro(us).UTC()
	if !a.Now.IsZero() {
		now = a.Now.Truncate(time.Microsecond)
	}
	tail := reply[1:]
	taken, ok1 := tail[0].(int64)
	inFlight, ok2 := tail[1].(int64)
	exp, ok3 := tail[2].(int64)
	full, ok4 := tail[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return counter.Acquired{}, fmt.Errorf("acquire lease: %w: %w", counter.ErrUnavailable, errReply)
	}
	res := counter.Acquired{Allowed: taken == 1, GroupFull: full == 1, InFlight: inFlight, Now: now, Ceilings: counter.Result{Allowed: true, Now: now}}
	if exp != 0 {
		res.ExpiresAt = time.UnixMicro(exp).UTC()
	}
	if len(a.Ceilings) > 0 {
		s.verify(ctx, creq, seen, now)
		res.Ceilings = counter.Answer(creq, seen, now)
	}
	return res, nil
}

// Renew implements counter.Store.
func (s *Store) Renew(ctx context.Context, ref counter.LeaseRef) (time.Time, error) {
	if err := counter.ValidateRef(ref, true); err != nil {
		return time.Time{}, err
	}
	v, err := s.queued(ctx, opsLua, opsSHA, ref.Group, s.leaseKeys(ref.Group), "renew", instant(ref.Now), ref.ID, ref.TTL.Microseconds())
	if err != nil {
		return time.Time{}, failed(ctx, "renew lease", err)
	}
	exp, ok := v.(int64)
	if !ok {
		return time.Time{}, fmt.Errorf("renew lease: %w: %w", counter.ErrUnavailable, errReply)
	}
	if exp == 0 {
		return time.Time{}, fmt.Errorf("renew lease: %w", counter.ErrNoLease)
	}
	return time.UnixMicro(exp).UTC(), nil
}

// Release implements counter.Store.
func (s *Store) Release(ctx context.Context, ref counter.LeaseRef) error {
	if err := counter.ValidateRef(ref, false); err != nil {
		return err
	}
	v, err := s.queued(ctx, opsLua, opsSHA, ref.Group, s.leaseKeys(ref.Group), "release", instant(ref.Now), ref.ID)
	if err != nil {
		return failed(ctx, "release lease", err)
	}
	if live, ok := v.(int64); !ok {
		return fmt.Errorf("release lease: %w: %w", counter.ErrUnavailable, errReply)
	} else if live != 1 {
		return fmt.Errorf("release lease: %w", counter.ErrNoLease)
	}
	return nil
}

// Held implements counter.Store.
func (s *Store) Held(ctx context.Context, group string, tallies []string, now time.Time) ([]int64, error) {
	if err := counter.ValidateHeld(group, tallies, now); err != nil {
		return nil, err
	}
	args := make([]any, 0, 2+len(tallies))
	args = append(args, "held", instant(now))
	for _, t := range tallies {
		args = append(args, t)
	}
	v, err := s.queued(ctx, opsLua, opsSHA, group, s.leaseKeys(group), args...)
	if err != nil {
		return nil, failed(ctx, "held leases", err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) != len(tallies) {
		return nil, fmt.Errorf("held leases: %w: %w", counter.ErrUnavailable, errReply)
	}
	out := make([]int64, len(tallies))
	for i, r := range reply {
		if out[i], ok = r.(int64); !ok {
			return nil, fmt.Errorf("held leases: %w: %w", counter.ErrUnavailable, errReply)
		}
	}
	return out, nil
}

// Reset implements counter.Store: the counter's key and the key's leases,
// in one script, through the lanes like Held and ReservedSums: a server busy
// with other tenants' checks is waited for as the checks wait for it, in
// the group's turn (TestCallsOutsideTheLanesWaitForABusyServer).
func (s *Store) Reset(ctx context.Context, group, key string) error {
	if err := counter.ValidateReset(group, key); err != nil {
		return err
	}
	keys := append(s.leaseKeys(group), s.key(group, key))
	if _, err := s.queued(ctx, opsLua, opsSHA, group, keys, "reset", "", key); err != nil {
		return failed(ctx, "reset counter", err)
	}
	return nil
}
