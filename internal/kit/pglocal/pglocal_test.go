package pglocal_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/kit/pglocal"
)

// tempDir returns a new directory, removed after the test, that the user
// postgres can reach when tests run as root: t.TempDir's parent is 0700.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pglocal-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

func start(t *testing.T, dir string) *pglocal.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pglocal.Start(ctx, dir, pglocal.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func query(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, sql).Scan(&got); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return got
}

func exec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	dir, err := pglocal.Find()
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Find = %s, without %s: %v", dir, name, err)
		}
	}
}

// TestRestartKeepsData covers the life of `make run`'s cluster: created on
// the first start, reused with its data on the next.
func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(tempDir(t), "pgdata") // Start creates it.

	c := start(t, dir)
	if got := query(t, c.URL(), "SELECT 1::text"); got != "1" {
		t.Fatalf("SELECT 1 = %q, want 1", got)
	}
	if got := query(t, c.URL(), "SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'postgres'"); got != "UTF8" {
		t.Errorf("encoding = %q, want UTF8", got)
	}
	exec(t, c.URL(), "CREATE TABLE kept AS SELECT 'still here' AS v")

	// A second start while the first runs must refuse, not disturb it.
	if _, err := pglocal.Start(context.Background(), dir, pglocal.Options{}); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Errorf("Start on a running cluster: err = %v, want one saying it is still running", err)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err == nil {
		t.Errorf("postmaster.pid still there after Stop")
	}

	c = start(t, dir)
	if got := query(t, c.URL(), "SELECT v FROM kept"); got != "still here" {
		t.Errorf("after restart, kept row = %q, want %q", got, "still here")
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop after restart: %v", err)
	}
}

func TestEphemeral(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pglocal.Start(ctx, tempDir(t), pglocal.Options{Ephemeral: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	for setting, want := range map[string]string{"fsync": "off", "max_connections": "200", "listen_addresses": "127.0.0.1"} {
		if got := query(t, c.URL(), "SHOW "+setting); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
}

func TestRefusesForeignDir(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pglocal.Start(context.Background(), dir, pglocal.Options{})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Start on a non-empty dir: err = %v, want one saying it is not empty", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "mine" {
		t.Errorf("Start changed a file it does not own")
	}
}

func open(t *testing.T, dir string) *pglocal.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pglocal.Open(ctx, dir, pglocal.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// TestOpenJoinsRunningServer covers an operator command beside `make run`:
// the second Open joins the server the first started, and the server
// outlives whichever process leaves first.
func TestOpenJoinsRunningServer(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(tempDir(t), "pgdata")
	owner := open(t, dir)
	joined := open(t, dir)
	if owner.URL() != joined.URL() {
		t.Fatalf("joined %s, want the running server %s", joined.URL(), owner.URL())
	}
	exec(t, joined.URL(), "CREATE TABLE seen AS SELECT 'by both' AS v")
	if err := joined.Stop(); err != nil {
		t.Fatalf("Stop of the joined cluster: %v", err)
	}
	if got := query(t, owner.URL(), "SELECT v FROM seen"); got != "by both" {
		t.Fatalf("after the joiner left, row = %q", got)
	}

	// The starter leaving first waits for the joiner to release the server.
	joined = open(t, dir)
	stopped := make(chan error, 1)
	go func() { stopped <- owner.Stop() }()
	if got := query(t, joined.URL(), "SELECT v FROM seen"); got != "by both" {
		t.Fatalf("while the starter stops, row = %q", got)
	}
	select {
	case err := <-stopped:
		t.Fatalf("the starter stopped the server (%v) while a joiner used it", err)
	default:
	}
	if err := joined.Stop(); err != nil {
		t.Fatalf("Stop of the joined cluster: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop of the starter: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err == nil {
		t.Errorf("postmaster.pid still there after the last Stop")
	}

	// None runs now: the next Open starts one on the same data.
	again := open(t, dir)
	if got := query(t, again.URL(), "SELECT v FROM seen"); got != "by both" {
		t.Errorf("after a restart, row = %q", got)
	}
}

// TestOpenAtOnce: processes opening the same cluster at the same moment
// share one server instead of racing to start two.
func TestOpenAtOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(tempDir(t), "pgdata")
	const n = 3
	urls := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			c, err := pglocal.Open(context.Background(), dir, pglocal.Options{Logf: t.Logf})
			if err != nil {
				errs <- err
				return
			}
			t.Cleanup(func() { _ = c.Stop() })
			urls <- c.URL()
		}()
	}
	var first string
	for range n {
		select {
		case err := <-errs:
			t.Fatalf("Open: %v", err)
		case u := <-urls:
			if first == "" {
				first = u
			} else if u != first {
				t.Errorf("Open at once gave %s and %s, want one server", first, u)
			}
		}
	}
}
