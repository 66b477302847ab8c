package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool returns a pool on a new, migrated database of the test's own (New),
// closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolAt(t, New(t))
}

// PoolAt returns a pool on the database at dsn, closed when the test ends.
func PoolAt(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Tenant inserts a tenant on plan, without keys, and returns its id. The
// row is written directly, so tests of what sits beside pgstore's tenant
// store (usage, audit, policies, webhooks) need not go through it.
func Tenant(t testing.TB, pool *pgxpool.Pool, plan string) string {
	t.Helper()
	var id string
	err := pool.QueryRow(context.Background(),
		"INSERT INTO tenants (name, plan) VALUES ('test tenant', $1) RETURNING id::text", plan).Scan(&id)
	if err != nil {
		t.Fatalf("pgtest: tenant on plan %s: %v", plan, err)
	}
	return id
}
