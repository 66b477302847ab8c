package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// cli runs tollgate with args against the database at dsn and returns what
// it printed on stdout.
func cli(t *testing.T, dsn string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_DEV": "1"})
	err := run(context.Background(), args, env, &stdout, &stderr)
	if strings.Contains(stderr.String(), "tg_live_") || strings.Contains(stderr.String(), "tg_test_") {
		t.Errorf("tollgate %s logged a key:\n%s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), err
}

// cliJSON runs tollgate with args, which must succeed and print exactly one
// JSON object with exactly the fields of want, which it fills.
func cliJSON(t *testing.T, dsn string, want any, args ...string) {
	t.Helper()
	out, err := cli(t, dsn, args...)
	if err != nil {
		t.Fatalf("tollgate %s: %v", strings.Join(args, " "), err)
	}
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("tollgate %s printed %q, want one line", strings.Join(args, " "), out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(want); err != nil {
		t.Fatalf("tollgate %s printed %q: %v", strings.Join(args, " "), out, err)
	}
	var fields map[string]any
	json.Unmarshal([]byte(out), &fields)
	b, _ := json.Marshal(want)
	var wantFields map[string]any
	json.Unmarshal(b, &wantFields)
	if len(fields) != len(wantFields) {
		t.Fatalf("tollgate %s printed fields %v, want exactly %v", strings.Join(args, " "), fields, wantFields)
	}
}

var (
	uuidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	liveShape = regexp.MustCompile(`^tg_live_[0-9A-Za-z]{12}_[0-9A-Za-z]{32}$`)
	testShape = regexp.MustCompile(`^tg_test_[0-9A-Za-z]{12}_[0-9A-Za-z]{32}$`)
)

type created struct {
	TenantID string `json:"tenant_id"`
	LiveKey  string `json:"live_key"`
	TestKey  string `json:"test_key"`
}

type keyCreated struct {
	KeyID     string `json:"key_id"`
	Key       string `json:"key"`
	Name      string `json:"name"`
	ExpiresAt string `json:"expires_at"`
}

type keyRevoked struct {
	KeyID     string `json:"key_id"`
	RevokedAt string `json:"revoked_at"`
}

type planPrinted struct {
	Name           string  `json:"name"`
	IPPerMinute    int64   `json:"ip_per_minute"`
	QuotaPerMinute int64   `json:"quota_per_minute"`
	QuotaPerHour   int64   `json:"quota_per_hour"`
	MonthlyChecks  *int64  `json:"monthly_checks"`
	Purchasable    bool    `json:"purchasable"`
	StripePriceID  *string `json:"stripe_price_id"`
}

// directory reads the database at dsn as serve does.
func directory(t *testing.T, dsn string) *tenant.Directory {
	t.Helper()
	return tenant.NewDirectory(tenant.DirectoryConfig{Store: pgstore.NewTenants(pgtest.PoolAt(t, dsn))})
}

func TestTenantAndKeyCommands(t *testing.T) {
	dsn := pgtest.New(t)
	ctx := context.Background()

	var acme created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme, Inc.", "--plan", "pro")
	if !uuidShape.MatchString(acme.TenantID) || !liveShape.MatchString(acme.LiveKey) || !testShape.MatchString(acme.TestKey) {
		t.Fatalf("tenants create printed %+v", acme)
	}
	d := directory(t, dsn)
	for _, raw := range []string{acme.LiveKey, acme.TestKey} {
		k, tn, err := d.Authenticate(ctx, raw)
		if err != nil {
			t.Fatalf("a key tenants create printed: %v", err)
		}
		if tn.ID != acme.TenantID || tn.Name != "Acme, Inc." || tn.Plan != "pro" || k.Test != (raw == acme.TestKey) {
			t.Fatalf("key %s: tenant %+v, test %v", raw[:20], tn, k.Test)
		}
	}

	var basic created
	cliJSON(t, dsn, &basic, "tenants", "create", "--name", "Basic")
	if _, tn, err := d.Authenticate(ctx, basic.LiveKey); err != nil || tn.Plan != "starter" {
		t.Fatalf("without --plan: plan %q, %v; want starter", tn.Plan, err)
	}

	var live, test keyCreated
	cliJSON(t, dsn, &live, "keys", "create", "--tenant", acme.TenantID)
	cliJSON(t, dsn, &test, "keys", "create", "--test", "--tenant", acme.TenantID)
	if !strings.HasPrefix(live.KeyID, "key_") || !liveShape.MatchString(live.Key) || !testShape.MatchString(test.Key) {
		t.Fatalf("keys create printed %+v and %+v", live, test)
	}
	k, tn, err := d.Authenticate(ctx, live.Key)
	if err != nil || k.ID != live.KeyID || tn.ID != acme.TenantID {
		t.Fatalf("the new key: %+v of %s, %v", k, tn.ID, err)
	}

	before := time.Now().Add(-time.Second)
	var revoked keyRevoked
	cliJSON(t, dsn, &revoked, "keys", "revoke", live.KeyID)
	at, err := time.Parse(time.RFC3339Nano, revoked.RevokedAt)
	if revoked.KeyID != live.KeyID || err != nil || at.Before(before) || at.After(time.Now()) {
		t.Fatalf("keys revoke printed %+v (%v)", revoked, err)
	}
	// A fresh instance (this test runs no listener) sees the revocation.
	if _, _, err := directory(t, dsn).Authenticate(ctx, live.Key); !errors.Is(err, tenant.ErrUnauthorized) {
		t.Fatalf("revoked key: got %v, want ErrUnauthorized", err)
	}
	var again keyRevoked
	cliJSON(t, dsn, &again, "keys", "revoke", live.KeyID)
	if again.RevokedAt != revoked.RevokedAt {
		t.Fatalf("revoking twice moved revoked_at from %s to %s", revoked.RevokedAt, again.RevokedAt)
	}
}

func TestPlanCommands(t *testing.T) {
	dsn := pgtest.New(t)

	var p planPrinted
	cliJSON(t, dsn, &p, "plans", "set-price", "pro", "price_1ProMonthly")
	if p.Name != "pro" || p.StripePriceID == nil || *p.StripePriceID != "price_1ProMonthly" || p.IPPerMinute != 60000 {
		t.Fatalf("plans set-price printed %+v", p)
	}

	p = planPrinted{}
	cliJSON(t, dsn, &p, "plans", "set", "starter", "--ip-per-minute", "900", "--monthly-checks", "unlimited")
	if p.Name != "starter" || p.IPPerMinute != 900 || p.QuotaPerMinute != 1200 || p.QuotaPerHour != 30000 || p.MonthlyChecks != nil || p.StripePriceID != nil {
		t.Fatalf("plans set printed %+v", p)
	}
	p = planPrinted{}
	cliJSON(t, dsn, &p, "plans", "set", "--quota-per-minute", "50", "--quota-per-hour", "500", "starter", "--monthly-checks", "2000")
	if p.IPPerMinute != 900 || p.QuotaPerMinute != 50 || p.QuotaPerHour != 500 || p.MonthlyChecks == nil || *p.MonthlyChecks != 2000 {
		t.Fatalf("plans set printed %+v", p)
	}

	out, err := cli(t, dsn, "plans", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "PLAN ") {
		t.Fatalf("plans list: a header and 5 plans, got:\n%s", out)
	}
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	for plan, want := range map[string][]string{
		"starter":    {"starter", "900", "50", "500", "2000", "yes", "-"},
		"pro":        {"pro", "60000", "120000", "5000000", "50000000", "yes", "price_1ProMonthly"},
		"enterprise": {"enterprise", "600000", "1200000", "50000000", "unlimited", "yes", "-"},
		"growth":     {"growth", "60000", "120000", "5000000", "50000000", "no", "-"},
	} {
		if strings.Join(rows[plan], " ") != strings.Join(want, " ") {
			t.Errorf("plans list row %s: got %q, want %q", plan, rows[plan], want)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	dsn := pgtest.New(t)
	var acme created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme")
	cases := []struct {
		name      string
		args      []string
		wantUsage bool
		want      string
	}{
		{"tenants without subcommand", []string{"tenants"}, true, "want the subcommand create"},
		{"tenants unknown subcommand", []string{"tenants", "delete"}, true, "want the subcommand create"},
		{"tenant without name", []string{"tenants", "create"}, true, "name: must be 1 to 200 characters"},
		{"tenant name too long", []string{"tenants", "create", "--name", strings.Repeat("n", 201)}, true, "name: must be 1 to 200"},
		{"tenant unknown flag", []string{"tenants", "create", "--name", "x", "--colour", "red"}, true, "flag provided but not defined: -colour"},
		{"tenant unknown plan", []string{"tenants", "create", "--name", "x", "--plan", "gold"}, false, `"gold": no such plan; want one of starter, growth, pro, enterprise, enterprise_dedicated`},
		{"key without tenant", []string{"keys", "create"}, true, "--tenant is required"},
		{"key of unknown tenant", []string{"keys", "create", "--tenant", "00000000-0000-0000-0000-000000000000"}, false, "no tenant 00000000-0000-0000-0000-000000000000"},
		{"key of malformed tenant", []string{"keys", "create", "--tenant", "acme"}, false, "no tenant acme"},
		{"revoke without id", []string{"keys", "revoke"}, true, "want one KEY_ID"},
		{"revoke unknown key", []string{"keys", "revoke", "key_nope"}, false, "no key key_nope"},
		{"keys unknown subcommand", []string{"keys", "rotate"}, true, "want the subcommand create, revoke or list"},
		{"key expired at birth", []string{"keys", "create", "--tenant", acme.TenantID, "--expires", "-1h"}, true, "--expires: expires_at: must be in the future"},
		{"key expiry in the past", []string{"keys", "create", "--tenant", acme.TenantID, "--expires", "2001-01-01"}, true, "must be in the future"},
		{"key expiry not a time", []string{"keys", "create", "--tenant", acme.TenantID, "--expires", "soon"}, true, `"soon" is neither a duration`},
		{"key expiry in a thousand centuries", []string{"keys", "create", "--tenant", acme.TenantID, "--expires", "99999999d"}, true, "neither a duration"},
		{"key name blank", []string{"keys", "create", "--tenant", acme.TenantID, "--name", " "}, true, "--name: must not be blank"},
		{"key name too long", []string{"keys", "create", "--tenant", acme.TenantID, "--name", strings.Repeat("n", 101)}, true, "--name: must be 1 to 100 characters"},
		{"list keys without tenant", []string{"keys", "list"}, true, "--tenant is required"},
		{"list keys of unknown tenant", []string{"keys", "list", "--tenant", "00000000-0000-0000-0000-000000000000"}, false, "no tenant 00000000-0000-0000-0000-000000000000"},
		{"list keys of malformed tenant", []string{"keys", "list", "--tenant", "acme"}, false, "no tenant acme"},
		{"tenants list with an argument", []string{"tenants", "list", "acme"}, true, `unexpected "acme"`},
		{"plans without subcommand", []string{"plans"}, true, "want the subcommand"},
		{"set without limits", []string{"plans", "set", "starter"}, true, "nothing to change"},
		{"set zero", []string{"plans", "set", "starter", "--ip-per-minute", "0"}, true, "want a positive integer"},
		{"set words", []string{"plans", "set", "starter", "--monthly-checks", "lots"}, true, "want a positive integer"},
		{"set unknown plan", []string{"plans", "set", "gold", "--ip-per-minute", "5"}, false, `no plan "gold"`},
		{"set-price without price", []string{"plans", "set-price", "pro"}, true, "want PLAN and STRIPE_PRICE_ID"},
		{"set-price blank", []string{"plans", "set-price", "pro", " "}, true, "stripe_price_id: must be printable"},
		{"set-price unknown plan", []string{"plans", "set-price", "gold", "price_x"}, false, `no plan "gold"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := cli(t, dsn, c.args...)
			if err == nil {
				t.Fatalf("tollgate %s: no error", strings.Join(c.args, " "))
			}
			if out != "" {
				t.Errorf("printed %q on stdout with an error", out)
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("got %q, want one line containing %q", msg, c.want)
			}
			if errors.Is(err, errUsage) != c.wantUsage {
				t.Errorf("usage error (exit 2): got %v, want %v", errors.Is(err, errUsage), c.wantUsage)
			}
		})
	}
}

// TestListCommands: `tenants list` and `keys list` print tables an operator
// reads, with the plan that applies and never a key's secret.
func TestListCommands(t *testing.T) {
	dsn := pgtest.New(t)
	var acme, basic created
	cliJSON(t, dsn, &acme, "tenants", "create", "--name", "Acme, Inc.", "--plan", "pro")
	cliJSON(t, dsn, &basic, "tenants", "create", "--name", "Basic")
	var revoked keyRevoked
	var extra, named keyCreated
	cliJSON(t, dsn, &extra, "keys", "create", "--tenant", acme.TenantID)
	cliJSON(t, dsn, &revoked, "keys", "revoke", extra.KeyID)
	before := time.Now()
	cliJSON(t, dsn, &named, "keys", "create", "--tenant", acme.TenantID, "--name", "checkout service", "--expires", "90d")
	expiry, err := time.Parse(time.RFC3339, named.ExpiresAt)
	if err != nil || named.Name != "checkout service" || expiry.Before(before.AddDate(0, 0, 90).Truncate(time.Second)) || expiry.After(time.Now().AddDate(0, 0, 90)) {
		t.Fatalf("keys create --name --expires 90d printed %+v (%v)", named, err)
	}
	var dated keyCreated
	cliJSON(t, dsn, &dated, "keys", "create", "--tenant", acme.TenantID, "--expires", "2099-12-31")
	if dated.ExpiresAt != "2099-12-31T00:00:00Z" || dated.Name != "" {
		t.Fatalf("keys create --expires 2099-12-31 printed %+v", dated)
	}

	out, err := cli(t, dsn, "tenants", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TENANT ID") {
		t.Fatalf("tenants list printed:\n%s", out)
	}
	for _, want := range []struct{ id, name, plan string }{{acme.TenantID, "Acme, Inc.", "pro"}, {basic.TenantID, "Basic", "starter"}} {
		if !regexp.MustCompile(`(?m)^` + want.id + `\s+` + regexp.QuoteMeta(want.name) + `\s+` + want.plan + `\s+` + want.plan + `\s+active\s+\d{4}-\d\d-\d\dT`).MatchString(out) {
			t.Errorf("tenants list lacks %s (%s, %s):\n%s", want.name, want.id, want.plan, out)
		}
	}

	out, err = cli(t, dsn, "keys", "list", "--tenant", acme.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !regexp.MustCompile(`^KEY ID +NAME +MODE`).MatchString(lines[0]) {
		t.Fatalf("keys list printed:\n%s", out)
	}
	for _, raw := range []string{acme.LiveKey, acme.TestKey, extra.Key, named.Key, dated.Key} {
		if strings.Contains(out, raw) || strings.Contains(out, raw[len(raw)-32:]) {
			t.Errorf("keys list shows a secret:\n%s", out)
		}
		if !strings.Contains(out, raw[:len(raw)-32]+"…") {
			t.Errorf("keys list lacks the key that begins %s:\n%s", raw[:len(raw)-32], out)
		}
	}
	// Columns: id, name, mode, key, created, expires, last used, revoked.
	if !regexp.MustCompile(`(?m)^` + extra.KeyID + `\s+-\s+live\s+\S+\s+\S+\s+-\s+-\s+` + regexp.QuoteMeta(revoked.RevokedAt[:19])).MatchString(out) {
		t.Errorf("keys list: the revoked key %s is not shown revoked at %s:\n%s", extra.KeyID, revoked.RevokedAt, out)
	}
	if !regexp.MustCompile(`(?m)^` + named.KeyID + `\s+checkout service\s+live\s+\S+\s+\S+\s+` + regexp.QuoteMeta(named.ExpiresAt) + `\s+-\s+-$`).MatchString(out) {
		t.Errorf("keys list: the key %s is not shown named, expiring at %s:\n%s", named.KeyID, named.ExpiresAt, out)
	}
	if !regexp.MustCompile(`(?m)\sfirst live key\s+live\s+tg_live_`).MatchString(out) || !regexp.MustCompile(`(?m)\sfirst test key\s+test\s+tg_test_`).MatchString(out) {
		t.Errorf("keys list: the keys tenants create made are not named first live key and first test key:\n%s", out)
	}
	if n := len(regexp.MustCompile(`\stest\s+tg_test_`).FindAllString(out, -1)); n != 1 {
		t.Errorf("keys list: %d test keys, want 1:\n%s", n, out)
	}
}
