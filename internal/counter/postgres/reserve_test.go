package postgres_test

import (
	"context"
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
