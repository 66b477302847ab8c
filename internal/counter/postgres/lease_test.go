package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestPruneDeletesExpiredLeases prunes, in statements smaller than their
// number, the leases that expired over a minute ago by the database's
// clock; the live ones and the ones just expired stay (a minute of grace
// for instances whose clocks run behind the database's).
func TestPruneDeletesExpiredLeases(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, PruneRows: 2, Timeout: 5 * time.Second})
	ctx := context.Background()
	// Each on a key of its own: an acquire forgets its key's expired leases.
	acquire := func(id string, at time.Time) {
		t.Helper()
		res, err := s.Acquire(ctx, counter.Acquire{Group: "g", Key: id, ID: id, Limit: 100, TTL: time.Minute, Now: at})
		if err != nil || !res.Allowed {
			t.Fatalf("acquire %s: %+v, %v", id, res, err)
		}
	}
	now := time.Now()
	for i := range 5 {
		acquire(fmt.Sprint("old-", i), now.Add(-time.Hour))
	}
	acquire("just-expired", now.Add(-90*time.Second))
	acquire("live", now)
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	var ids []string
	rows, err := conn.Query(ctx, "SELECT convert_from(id, 'UTF8') FROM leases ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[just-expired live]" {
		t.Errorf("leases after pruning: %v, want [just-expired live]", ids)
	}
}
