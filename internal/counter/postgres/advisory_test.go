package postgres_test

// Advisory items seen from the database: the rows a refused one leaves,
// the function of the version before them, and migration 000006's way back.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	// Registers the pgx5:// scheme.
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgtest"
	"github.com/tollgate/tollgate/migrations"
)

// connect opens a connection of the test's own, closed when it ends.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestRefusedAdvisoryKeepsItsRow refuses an advisory item in a request that
// is kept whole, and another among kept ceilings: the row of each keeps its
// state and its expiry to the microsecond, although an item with a window
// of a second would have given it another expiry.
func TestRefusedAdvisoryKeepsItsRow(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	s := open(t, postgres.Config{DSN: dsn, Timeout: 10 * time.Second})
	conn := connect(t, dsn)
	month := counter.Item{Key: "shadow", Algorithm: limit.FixedWindow, Limit: 5, Window: limit.Month, Cost: 1}
	mustCheck(t, s, counter.Request{Items: []counter.Item{month}, Now: base})
	row := func() string {
		t.Helper()
		var st, cn, pv int64
		var tt float64
		var exp time.Time
		if err := conn.QueryRow(context.Background(), "SELECT start, count, prev, tat, expires_at FROM counters WHERE key LIKE '%/shadow'").Scan(&st, &cn, &pv, &tt, &exp); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(st, cn, pv, tt, exp.UTC().Format(time.RFC3339Nano))
	}
	before := row()

	// On the same key, a second's window and a cost above its limit: refused.
	refused := counter.Item{Key: "shadow", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Second), Cost: 2, Advisory: true}
	enforced, spent := fixed("enforced", 10, limit.Every(time.Hour)), fixed("spent", 1, limit.Every(time.Hour))
	mustCheck(t, s, counter.Request{Items: []counter.Item{spent}, Now: base})
	for _, req := range []counter.Request{
		// Kept whole.
		{Items: []counter.Item{enforced, refused}, Now: base},
		// The ceilings kept, the policy refused.
		{Ceilings: 2, Items: []counter.Item{enforced, refused, spent}, Now: base},
	} {
		res := mustCheck(t, s, req)
		if !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
			t.Fatalf("%+v: got %+v, want the enforced item allowed and the advisory one refused", req, res)
		}
		if after := row(); after != before {
			t.Fatalf("%+v: the refused advisory item's row went from %s to %s", req, before, after)
		}
	}
}

// TestFunctionWithoutAdvisory calls tollgate_check with 000003's ten
// arguments, as a Tollgate server of the version before advisory items does
// while a deployment rolls out: it still answers, in two tiers.
func TestFunctionWithoutAdvisory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, pgtest.New(t))
	hour := limit.Every(time.Hour).Micros()
	// Request 1 is the ceiling a (limit 2) and the policy b (limit 1, cost
	// 2: refused), so a alone is kept; request 2 is a alone, and sees it.
	rows, err := conn.Query(ctx, `SELECT allowed, seen_count FROM tollgate_check($1::text[], $2::integer[],
		$3::integer[], $4::smallint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::boolean[], $9::integer[], $10::bigint)`,
		[]string{"a", "b"}, []int32{1, 1, 2}, []int32{1, 2, 1}, []int16{1, 1, 1}, []int64{2, 1, 2},
		[]int64{hour, hour, hour}, []int64{1, 2, 1}, []bool{true, true}, []int32{1, 0}, base.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var allowed bool
		var count int64
		if err := rows.Scan(&allowed, &count); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(allowed, count))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"true 0", "false 0", "true 1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("items (allowed, count seen): got %v, want %v", got, want)
	}
	var a, b int64
	if err := conn.QueryRow(ctx, "SELECT (SELECT count FROM counters WHERE key = 'a'), (SELECT count FROM counters WHERE key = 'b')").Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != 2 || b != 0 {
		t.Fatalf("counts after: a %d, b %d; want 2 (the ceiling of each request) and 0", a, b)
	}
}

// TestAdvisoryMigrationDown migrates a new database to 000003, then to
// 000006 and back down to 000005: every tollgate_check left is again
// 000003's, as pg_get_functiondef prints it, and the one of 000006 is gone.
func TestAdvisoryMigrationDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.New(t)
	conn := connect(t, dsn)
	name := fmt.Sprintf("tollgate_test_down_%016x", rand.Uint64())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	target := u.String()
	u.Scheme = "pgx5"
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	db := connect(t, target)
	functions := func() map[string]string {
		t.Helper()
		rows, err := db.Query(ctx, "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc AS p WHERE p.proname = 'tollgate_check'")
		if err != nil {
			t.Fatal(err)
		}
		defs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var d [2]string
			return d, r.Scan(&d[0], &d[1])
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range defs {
			out[d[0]] = d[1]
		}
		return out
	}

	if err := m.Migrate(3); err != nil {
		t.Fatalf("migrate to 3: %v", err)
	}
	want := functions()
	if len(want) != 2 {
		t.Fatalf("after 000003: %d functions, want the nine- and ten-argument ones", len(want))
	}
	if err := m.Migrate(6); err != nil {
		t.Fatalf("migrate to 6: %v", err)
	}
	up := functions()
	if len(up) != 3 {
		t.Fatalf("after 000006: functions %v, want three", keys(up))
	}
	for sig, def := range up {
		if def == want[sig] {
			t.Errorf("after 000006: %s is still 000003's", sig)
		}
	}
	if err := m.Migrate(5); err != nil {
		t.Fatalf("migrate down to 5: %v", err)
	}
	got := functions()
	if len(got) != len(want) {
		t.Fatalf("after 000006 down: functions %v, want %v", keys(got), keys(want))
	}
	for sig, def := range want {
		if got[sig] != def {
			t.Errorf("after 000006 down, %s:\n%s\nwant 000003's:\n%s", sig, got[sig], def)
		}
	}
}

// keys lists a map's keys, for messages.
func keys(m map[string]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(ks, "; ")
}
