package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestDemoReusesItsKeys: `serve --demo` started twice on the same data
// folder prints the same keys and leaves the demo tenant with one live and
// one test key, kept in a file only its owner reads; once the database
// refuses a kept key (revoked), the next start makes a new pair.
func TestDemoReusesItsKeys(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	cfg := Config{DataDir: t.TempDir(), PublicURL: "http://localhost:8080"}
	log := slog.New(slog.DiscardHandler)
	seed := func() (live, printed string) {
		t.Helper()
		var out bytes.Buffer
		live, err := seedDemo(ctx, pool, cfg, log, &out)
		if err != nil {
			t.Fatal(err)
		}
		return live, out.String()
	}
	demoKeyIDs := func() (active, all int) {
		t.Helper()
		store := pgstore.NewTenants(pool)
		ts, err := store.Tenants(ctx)
		if err != nil || len(ts) != 1 {
			t.Fatalf("tenants %+v, %v; want the demo tenant", ts, err)
		}
		ks, err := store.Keys(ctx, ts[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if k.RevokedAt == nil {
				active++
			}
			if !strings.HasPrefix(k.Name, "demo ") {
				t.Errorf("demo key %s named %q", k.ID, k.Name)
			}
		}
		return active, len(ks)
	}

	first, printed1 := seed()
	second, printed2 := seed()
	if first != second || printed1 != printed2 {
		t.Fatalf("the second start printed other keys:\n%s\n---\n%s", printed1, printed2)
	}
	if active, all := demoKeyIDs(); active != 2 || all != 2 {
		t.Fatalf("after two starts: %d active keys of %d, want 2 of 2", active, all)
	}
	path := filepath.Join(cfg.DataDir, "demo-keys.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", path, err, fi.Mode())
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), first) {
		t.Fatalf("%s does not keep the live key", path)
	}

	if _, err := pool.Exec(ctx, "UPDATE api_keys SET revoked_at = now() WHERE name = 'demo live key'"); err != nil {
		t.Fatal(err)
	}
	third, _ := seed()
	if third == first {
		t.Fatal("a revoked kept key was reused")
	}
	if active, all := demoKeyIDs(); active != 3 || all != 4 {
		// The revoked live key, the old test key (still valid) and the new pair.
		t.Fatalf("after the revocation: %d active keys of %d, want 3 of 4", active, all)
	}
	fourth, _ := seed()
	if fourth != third {
		t.Fatal("the new pair was not kept for the next start")
	}
	// A kept file from another database (another demo tenant) is not trusted.
	if err := os.WriteFile(path, []byte(`{"tenant_id":"00000000-0000-0000-0000-000000000000","live_key":"x","test_key":"y"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if fifth, _ := seed(); fifth == fourth || fifth == "x" {
		t.Fatalf("a foreign kept file gave %q", fifth)
	}
}
