package postgres_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// BenchmarkLeases: countertest.BenchLeases on a store that waits up to 5 s.
//
//	DATABASE_URL=… go test -run '^$' -bench Leases ./internal/counter/postgres
func BenchmarkLeases(b *testing.B) {
	s := open(b, postgres.Config{DSN: pgtest.New(b), Timeout: 5 * time.Second})
	countertest.BenchLeases(b, s)
}
