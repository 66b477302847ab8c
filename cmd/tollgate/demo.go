package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
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

// seedDemo makes sure the demo tenant exists with the demo policies, gives it
// a fresh pair of keys (keys are shown once, so every run makes new ones) and
// prints them with a curl line that works.
func seedDemo(ctx context.Context, pool *pgxpool.Pool, cfg Config, stdout io.Writer) (liveKey string, err error) {
	tenants := pgstore.NewTenants(pool)
	all, err := tenants.Tenants(ctx)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	liveRaw, live, err := tenant.NewKey(false)
	if err != nil {
		return "", err
	}
	testRaw, test, err := tenant.NewKey(true)
	if err != nil {
		return "", err
	}
	var t tenant.Tenant
	for _, x := range all {
		if x.Name == demoTenantName {
			t = x
		}
	}
	if t.ID == "" {
		if t, err = tenants.CreateTenant(ctx, demoTenantName, tenant.PlanPro, live, test); err != nil {
			return "", fmt.Errorf("demo: %w", err)
		}
	} else {
		for _, k := range []tenant.Key{live, test} {
			k.TenantID = t.ID
			if _, err := tenants.CreateKey(ctx, k); err != nil {
				return "", fmt.Errorf("demo: %w", err)
			}
		}
	}
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
