package redis_test

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/countertest"
)

// BenchmarkLeases: countertest.BenchLeases on a store that waits up to 5 s.
//
//	REDIS_URL=… go test -run '^$' -bench Leases ./internal/counter/redis
func BenchmarkLeases(b *testing.B) {
	countertest.BenchLeases(b, benchStore(b))
}
