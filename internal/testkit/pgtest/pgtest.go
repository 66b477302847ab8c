// Package pgtest gives tests a real PostgreSQL database of their own: cloned
// from a migrated template on the server at DATABASE_URL, or, when that is
// unset, on a throwaway server started from the machine's PostgreSQL
// binaries. A test that cannot get a database fails; it never skips.
//
// Only tests import pgtest.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/solo"
	"github.com/tollgate/tollgate/migrations"
)

var (
	once    sync.Once
	baseURL string // the server's maintenance database
	initErr error
	stop    func()
)

// Main runs a package's tests and then stops any server pgtest started.
// Call it from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run runs a package's tests, stops any server pgtest started and returns
// m's exit code, for a TestMain with more to undo before it exits.
func Run(m *testing.M) int {
	release, err := solo.Hold()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer release()
	code := m.Run()
	if stop != nil {
		stop()
	}
	return code
}

// server returns the URL of the maintenance database of the server tests use.
func server() (string, error) {
	once.Do(func() {
		if u := os.Getenv("DATABASE_URL"); u != "" {
			baseURL = u
			return
		}
		baseURL, stop, initErr = startThrowaway()
	})
	return baseURL, initErr
}

// New returns the URL of a new, migrated database that belongs to this test
// alone and is dropped when it ends.
func New(t testing.TB) string {
	t.Helper()
	base, err := server()
	if err != nil {
		t.Fatalf("pgtest: no PostgreSQL for tests: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tmpl, err := template(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: template database: %v", err)
	}
	name := "tollgate_test_" + randomHex(8)
	if err := exec(ctx, base, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec(ctx, base, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(base, name)
}

var (
	tmplMu   sync.Mutex
	tmplName string
)

// template returns the name of a database holding the current migrations,
// creating it once per server: its name carries a digest of the migration
// files, so a changed schema gets a new template, and an advisory lock keeps
// test binaries running in parallel from building it twice.
func template(ctx context.Context, base string) (string, error) {
	tmplMu.Lock()
	defer tmplMu.Unlock()
	if tmplName != "" {
		return tmplName, nil
	}
	name := "tollgate_tmpl_" + migrationsDigest()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7446)"); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7446)")
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		building := name + "_build"
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
			return "", err
		}
		if err := pgstore.Migrate(withDatabase(base, building)); err != nil {
			return "", err
		}
		// Renamed only once complete, so a crash never leaves a half-built template.
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
			return "", err
		}
	}
	tmplName = name
	return name, nil
}

func migrationsDigest() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func exec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns dsn with its database name replaced.
func withDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
