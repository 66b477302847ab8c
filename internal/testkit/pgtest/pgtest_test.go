package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var first string
	t.Run("migrated", func(t *testing.T) {
		conn := connect(t, pgtest.New(t))
		var plans int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM plans").Scan(&plans); err != nil {
			t.Fatalf("count plans: %v", err)
		}
		if plans != 5 {
			t.Errorf("plans = %d rows, want 5", plans)
		}
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&first); err != nil {
			t.Fatalf("current_database: %v", err)
		}
	})

	conn := connect(t, pgtest.New(t))
	var second string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&second); err != nil {
		t.Fatalf("current_database: %v", err)
	}
	if first == "" || first == second {
		t.Errorf("two New calls gave databases %q and %q, want two different", first, second)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", first).Scan(&exists); err != nil {
		t.Fatalf("look for %s: %v", first, err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", first)
	}
}

// TestNewIsolated writes to one database and looks for the row in another.
func TestNewIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := connect(t, pgtest.New(t)), connect(t, pgtest.New(t))
	if _, err := a.Exec(ctx, "DELETE FROM plans WHERE name = 'starter'"); err != nil {
		t.Fatalf("delete in a: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM plans WHERE name = 'starter'").Scan(&n); err != nil {
		t.Fatalf("count in b: %v", err)
	}
	if n != 1 {
		t.Errorf("after deleting starter in one database, another has %d starter plans, want 1", n)
	}
}

func TestTenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	a, b := pgtest.Tenant(t, pool, "starter"), pgtest.Tenant(t, pool, "pro")
	if a == b {
		t.Fatalf("two tenants share the id %s", a)
	}
	var plan string
	if err := pool.QueryRow(context.Background(), "SELECT plan FROM tenants WHERE id = $1", b).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if plan != "pro" {
		t.Errorf("tenant on plan %q, want pro", plan)
	}
}
