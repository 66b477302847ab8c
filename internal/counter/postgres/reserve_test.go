package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestPruneSweepsReservations prunes, in statements smaller than their
// number, the reservations due over a minute ago by the database's clock,
// in groups nobody touches again: an expired one that releases gives its
// amount back, one that does not keeps it charged, a settled one no longer
// kept goes; a live one stays.
func TestPruneSweepsReservations(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, PruneRows: 2, Timeout: 5 * time.Second})
	ctx := context.Background()
	// Hours ago, at the start of an hour, on a sliding window of a day: it
	// counts the same two minutes on, and its counter is not pruned.
	at := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	budget := counter.Item{Key: "tokens", Algorithm: limit.SlidingWindow, Limit: 100, Window: limit.Every(24 * time.Hour), Cost: 30}
	reserve := func(group, id string, release bool, now time.Time) {
		t.Helper()
		r := counter.Reservation{Request: counter.Request{Group: group, Items: []counter.Item{budget}, Now: now}, ID: id, TTL: time.Minute, OnExpiryRelease: release}
		if res, err := s.Reserve(ctx, r); err != nil || !res.Allowed {
			t.Fatalf("reserve %s: %+v, %v", id, res, err)
		}
	}
	for i := range 3 {
		reserve(fmt.Sprint("release-", i), "r", true, at)
		reserve(fmt.Sprint("keep-", i), "r", false, at)
	}
	reserve("settled", "r", false, at)
	if _, err := s.Settle(ctx, counter.SettleRef{Group: "settled", ID: "r", Used: 30, Now: at}); err != nil {
		t.Fatal(err)
	}
	reserve("live", "r", false, time.Now())
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	var groups []string
	rows, err := connect(t, dsn).Query(ctx, "SELECT grp FROM reservations ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(groups) != "[live]" {
		t.Errorf("reservations after pruning: %v, want [live]", groups)
	}
	peek := counter.Request{Mode: counter.Peek, Items: []counter.Item{budget}, Now: at.Add(2 * time.Minute)}
	for i := range 3 {
		for group, want := range map[string]int64{"release-": 100, "keep-": 70} {
			peek.Group = fmt.Sprint(group, i)
			if got := mustCheck(t, s, peek).Decisions[0].Remaining; got != want {
				t.Errorf("%s after pruning: %d left, want %d", peek.Group, got, want)
			}
		}
	}
}

// TestReserveAtTheBoundSkipsTheGroupsLock holds a group's reservations lock
// (the advisory lock tollgate_reserve and tollgate_settle take) from outside
// the store once the group holds its bound: a reservation past the bound is
// refused as GroupFull, its items peeked, without waiting for the lock.
// Before, every reservation took the lock first, so a flood past the bound
// queued on it as if each could be held, in front of the group's
// settlements (the fault suite's reservations-postgres phase: 400 to 1,350
// refusals a phase, each a turn of the lock).
func TestReserveAtTheBoundSkipsTheGroupsLock(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	budget := counter.Item{Key: "tokens", Algorithm: limit.FixedWindow, Limit: 100, Window: limit.Every(time.Hour), Cost: 10}
	reserve := func(id string) (counter.Reserved, error) {
		return s.Reserve(ctx, counter.Reservation{Request: counter.Request{Group: "g", Items: []counter.Item{budget}}, ID: id, TTL: time.Minute, GroupLimit: 2})
	}
	for _, id := range []string{"a", "b"} {
		if res, err := reserve(id); err != nil || !res.Allowed {
			t.Fatalf("reserve %s: %+v, %v", id, res, err)
		}
	}
	lock := connect(t, dsn)
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('tollgate reserve ' || 'g', 0))"); err != nil {
		t.Fatal(err)
	}
	res, err := reserve("c")
	if err != nil || res.Allowed || !res.GroupFull {
		t.Fatalf("a reservation past the bound with the group's lock held elsewhere: %+v, %v; want refused, GroupFull", res, err)
	}
	if d := res.Result.Decisions; len(d) != 1 || d[0].Remaining != 80 {
		t.Errorf("the refusal's peek: %+v, want 80 remaining", res.Result)
	}
	// An id in use is still told so, under the lock, once it is free.
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended('tollgate reserve ' || 'g', 0))"); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve("a"); !errors.Is(err, counter.ErrReservationExists) {
		t.Errorf("reserve a again at the bound: %v, want ErrReservationExists", err)
	}
	// Settled, a reservation leaves room again.
	if _, err := s.Settle(ctx, counter.SettleRef{Group: "g", ID: "a", Used: 10}); err != nil {
		t.Fatal(err)
	}
	if res, err := reserve("d"); err != nil || !res.Allowed {
		t.Errorf("reserve after a settlement: %+v, %v", res, err)
	}

	// A group at its cap with one of its reservations due is refused only
	// once the due one has expired, giving back what it releases: the
	// refusal's peek sees the give-back. (The property test of countertest
	// found the first version of the lock-free refusal answering from before
	// the expiry.)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	at := func(id string, ttl time.Duration, limit int64, now time.Time) (counter.Reserved, error) {
		return s.Reserve(ctx, counter.Reservation{Request: counter.Request{Group: "h", Items: []counter.Item{budget}, Now: now},
			ID: id, TTL: ttl, OnExpiryRelease: true, GroupLimit: limit})
	}
	for _, id := range []string{"due", "live"} {
		ttl := map[string]time.Duration{"due": time.Millisecond, "live": time.Hour}[id]
		if res, err := at(id, ttl, 2, t0); err != nil || !res.Allowed {
			t.Fatalf("reserve %s: %+v, %v", id, res, err)
		}
	}
	res, err = at("next", time.Hour, 1, t0.Add(time.Second))
	if err != nil || res.Allowed || !res.GroupFull {
		t.Errorf("a reservation past a cap of 1 beside one live and one due: %+v, %v; want refused, GroupFull", res, err)
	} else if d := res.Result.Decisions; len(d) != 1 || d[0].Remaining != 90 {
		t.Errorf("the refusal's peek: %+v, want 90 remaining (the due one's 10 given back)", res.Result)
	}
}
