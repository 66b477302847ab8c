package postgres_test

import (
	"context"
	"math"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestArrayEncoders sends every slice type the store's encoders take, at
// their edges, and reads back what PostgreSQL received.
func TestArrayEncoders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	postgres.RegisterArrayEncoders(conn.TypeMap())
	cases := []struct {
		name string
		cast string
		arg  any
		want *string // nil: NULL
	}{
		{"text", "text[]", []string{"", "a", "é/\u2603", "7:group/key"}, ptr(`{"",a,é/☃,7:group/key}`)},
		{"bigint", "bigint[]", []int64{0, -1, math.MaxInt64, math.MinInt64}, ptr("{0,-1,9223372036854775807,-9223372036854775808}")},
		{"integer", "integer[]", []int32{1, 512, math.MaxInt32, math.MinInt32}, ptr("{1,512,2147483647,-2147483648}")},
		{"smallint", "smallint[]", []int16{1, 3, math.MaxInt16, math.MinInt16}, ptr("{1,3,32767,-32768}")},
		{"boolean", "boolean[]", []bool{true, false}, ptr("{t,f}")},
		{"empty", "bigint[]", []int64{}, ptr("{}")},
		{"nil is NULL", "text[]", []string(nil), nil},
	}
	for _, c := range cases {
		var got *string
		if err := conn.QueryRow(ctx, "SELECT ($1::"+c.cast+")::text", c.arg).Scan(&got); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		switch {
		case got == nil && c.want == nil:
		case got == nil || c.want == nil || *got != *c.want:
			t.Errorf("%s: got %v, want %v", c.name, deref(got), deref(c.want))
		}
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
