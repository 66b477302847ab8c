package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// demoTenantName names the tenant `serve --demo` seeds and reuses.
const demoTenantName = "Demo: Acme sign-in"

// demoPolicies is a real app's sign-in protection (DESIGN §7).
var demoPolicies = []struct{ name, body string }{
	{"sign-in-ip", `{"limit":10,"window":"1m","algorithm":"sliding_window","alert_after":20}`},
	// Check before trying (peek), count on failure (consume).
	{"failed-sign-in-account", `{"limit":8,"window":"15m","algorithm":"fixed_window","fail_mode":"closed"}`},
	{"sign-up-ip", `{"limit":8,"window":"10m","algorithm":"sliding_window"}`},
	{"code-lookup-ip", `{"limit":30,"window":"1m","algorithm":"token_bucket"}`},
	{"invites-member", `{"limit":6,"window":"10m","algorithm":"fixed_window"}`},
	{"error-reports", `{"limit":100,"window":"1m","algorithm":"fixed_window","scope":"global"}`},
}

// seedDemo makes sure the demo tenant exists with the demo policies and has
// a live and a test key, and prints them with a curl line that works. Keys
// are shown once and only their hashes are stored, so the raw keys are kept
// in the data folder (demoKeysFile, mode 0600) and reused at the next start
// while the database still accepts them; otherwise new ones are made.
func seedDemo(ctx context.Context, pool *pgxpool.Pool, cfg Config, log *slog.Logger, stdout io.Writer) (liveKey string, err error) {
	tenants := pgstore.NewTenants(pool)
	t, keys, err := demoTenant(ctx, tenants, demoKeysPath(cfg), log)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	liveRaw, testRaw := keys.Live, keys.Test
	policies := pgstore.NewPolicies(pool)
	for _, dp := range demoPolicies {
		p, err := policy.Parse(dp.name, []byte(dp.body))
		if err != nil {
			return "", fmt.Errorf("demo policy %s: %w", dp.name, err)
		}
		if _, err := policies.PutPolicy(ctx, t.ID, p); err != nil {
			return "", fmt.Errorf("demo policy %s: %w", dp.name, err)
		}
	}
	base := strings.TrimRight(cfg.PublicURL, "/")
	fmt.Fprintf(stdout, `
Tollgate demo tenant %q (%s), plan pro, with the sign-in policy set.
  live key: %s
  test key: %s

Try it:
  curl -s -X POST %s/v1/check -H 'Authorization: Bearer %s' \
    -H 'Content-Type: application/json' \
    -d '{"items":[{"policy":"sign-in-ip","subject":"203.0.113.7"}]}'

`, demoTenantName, t.ID, liveRaw, testRaw, base, liveRaw)
	return liveRaw, nil
}

// demoKeysFile, in the data folder, keeps the demo tenant's raw keys.
const demoKeysFile = "demo-keys.json"

func demoKeysPath(cfg Config) string { return filepath.Join(cfg.DataDir, demoKeysFile) }

// demoKeys are the demo tenant's raw keys as kept in demoKeysFile.
type demoKeys struct {
	TenantID string `json:"tenant_id"`
	Live     string `json:"live_key"`
	Test     string `json:"test_key"`
}

// demoTenant returns the demo tenant, created when missing, and its keys:
// those kept at path when the database still accepts them for it, else a
// new pair, stored and kept at path.
func demoTenant(ctx context.Context, tenants *pgstore.Tenants, path string, log *slog.Logger) (tenant.Tenant, demoKeys, error) {
	all, err := tenants.Tenants(ctx)
	if err != nil {
		return tenant.Tenant{}, demoKeys{}, err
	}
	var t tenant.Tenant
	for _, x := range all {
		if x.Name == demoTenantName {
			t = x
		}
	}
	if t.ID != "" {
		if kept, ok := keptDemoKeys(ctx, tenants, path, t.ID); ok {
			log.InfoContext(ctx, "demo: reusing the demo tenant's keys", "file", path)
			return t, kept, nil
		}
	}
	liveRaw, live, err := tenant.NewKey(false)
	if err != nil {
		return tenant.Tenant{}, demoKeys{}, err
	}
	testRaw, test, err := tenant.NewKey(true)
	if err != nil {
		return tenant.Tenant{}, demoKeys{}, err
	}
	live.Name, test.Name = "demo live key", "demo test key"
	if t.ID == "" {
		if t, err = tenants.CreateTenant(ctx, demoTenantName, tenant.PlanPro, live, test); err != nil {
			return tenant.Tenant{}, demoKeys{}, err
		}
	} else {
		for _, k := range []tenant.Key{live, test} {
			k.TenantID = t.ID
			if _, err := tenants.CreateKey(ctx, k); err != nil {
				return tenant.Tenant{}, demoKeys{}, err
			}
		}
	}
	keys := demoKeys{TenantID: t.ID, Live: liveRaw, Test: testRaw}
	if err := keepDemoKeys(path, keys); err != nil {
		// The demo runs all the same; the next start makes new keys.
		log.WarnContext(ctx, "demo: cannot keep the demo keys for the next start", "file", path, "err", err)
	}
	return t, keys, nil
}

// keptDemoKeys reads the keys kept at path and reports whether they are
// still the demo tenant's, each accepted as a key of its mode (not revoked,
// not expired).
func keptDemoKeys(ctx context.Context, tenants *pgstore.Tenants, path, tenantID string) (demoKeys, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return demoKeys{}, false
	}
	var kept demoKeys
	if json.Unmarshal(b, &kept) != nil || kept.TenantID != tenantID {
		return demoKeys{}, false
	}
	dir := tenant.NewDirectory(tenant.DirectoryConfig{Store: tenants, Logger: slog.New(slog.DiscardHandler)})
	for raw, test := range map[string]bool{kept.Live: false, kept.Test: true} {
		k, tn, err := dir.Authenticate(ctx, raw)
		if err != nil || tn.ID != tenantID || k.Test != test {
			return demoKeys{}, false
		}
	}
	return kept, true
}

// keepDemoKeys writes keys to path, readable by its owner only, whole or
// not at all.
func keepDemoKeys(path string, keys demoKeys) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), demoKeysFile+".*") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// demoTraffic sends a little live traffic to this server until ctx ends: a
// few sign-ins a second from a handful of addresses, one of them a
// credential stuffer that is refused and raises an alert, so that a newcomer
// sees moving charts, refusals and an alert.
func demoTraffic(ctx context.Context, base, key string, log *slog.Logger) {
	client := &http.Client{Timeout: 2 * time.Second}
	send := func(item string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/check", strings.NewReader(`{"items":[`+item+`]}`))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	tick := time.NewTicker(400 * time.Millisecond)
	defer tick.Stop()
	log.InfoContext(ctx, "demo traffic started")
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// The stuffer: one address, far over 10 sign-ins a minute.
		send(`{"policy":"sign-in-ip","subject":"198.51.100.66"}`)
		if n%3 == 0 {
			send(fmt.Sprintf(`{"policy":"sign-in-ip","subject":"203.0.113.%d"}`, rand.IntN(40)))
		}
		if n%7 == 0 {
			send(fmt.Sprintf(`{"policy":"code-lookup-ip","subject":"192.0.2.%d"}`, rand.IntN(5)))
		}
		if n%11 == 0 {
			send(`{"policy":"error-reports"}`)
		}
	}
}
