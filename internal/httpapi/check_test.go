package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/usage"
)

// tenantAPI is the whole /v1 surface as New builds it, over a real gate (the
// in-memory counter store), a real tenant.Directory, policy.Catalog and
// usage.Recorder on a database of the test's own.
type tenantAPI struct {
	t       testing.TB
	e       *echo.Echo
	pool    *pgxpool.Pool
	tenants *pgstore.Tenants
	met     *metrics.Metrics
	// envoy is the Catalog the envoy routes' Service invalidates.
	envoy *envoyconf.Catalog
	// audits are the entries Config.Audit was given.
	auditMu sync.Mutex
	audits  []auditEntry
}

// auditEntry is one call of Config.Audit.
type auditEntry struct {
	tenantID, kind string
	detail         map[string]any
}

// usageOf answers /v1/usage as the serve wiring does: metering from the
// Recorder, tenants and plans from the Directory.
type usageOf struct {
	rec *usage.Recorder
	dir *tenant.Directory
}

func (u usageOf) Usage(ctx context.Context, id string, now time.Time) (usage.Report, error) {
	return u.rec.Usage(ctx, id, now)
}
func (u usageOf) Tenant(ctx context.Context, id string) (tenant.Tenant, error) {
	return u.dir.Tenant(ctx, id)
}
func (u usageOf) Plan(ctx context.Context, name string) (tenant.Plan, error) {
	return u.dir.Plan(ctx, name)
}

// newTenantAPI builds the API on a database of its own; store is the
// counter store, or nil for the in-memory one.
func newTenantAPI(t testing.TB, dsn string, store counter.Store) *tenantAPI {
	t.Helper()
	return newTenantAPIWith(t, dsn, apiOptions{store: store})
}

// apiOptions are what a test may choose of newTenantAPIWith's API.
type apiOptions struct {
	// store is the counter store (nil: the in-memory one) and storeName
	// its name in the metrics ("memory" when store is nil).
	store     counter.Store
	storeName string
	// log receives the API's log lines (nil: nowhere).
	log *slog.Logger
	// clientIP says whom the API believes about client addresses (the
	// zero value: the TCP peer is the client).
	clientIP ClientIPConfig
	// tenantMaxReservations bounds a tenant's live reservations (0: the
	// gate's default).
	tenantMaxReservations int64
}

// newTenantAPIWith builds the API on a database of its own, wired as serve
// wires it: one set of metrics fed by the gate and the HTTP layer and
// served at /metrics, with the usage recorder's backlog.
func newTenantAPIWith(t testing.TB, dsn string, o apiOptions) *tenantAPI {
	t.Helper()
	pool := pgtest.PoolAt(t, dsn)
	log := o.log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tenants := pgstore.NewTenants(pool)
	dir := tenant.NewDirectory(tenant.DirectoryConfig{Store: tenants, Logger: log})
	policies := pgstore.NewPolicies(pool)
	catalog := policy.NewCatalog(policies, policy.CatalogConfig{})
	rec, err := usage.NewRecorder(usage.Config{Store: pgstore.NewUsage(pool), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	// Per policy too, as the service counts: the allocation tests count
	// what it costs a check.
	prec, err := usage.NewPolicyRecorder(usage.PolicyConfig{Store: pgstore.NewUsage(pool), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	store := o.store
	if store == nil {
		store = memory.New(memory.Config{})
		o.storeName = "memory"
	}
	t.Cleanup(func() { store.Close() })
	local := memory.New(memory.Config{})
	t.Cleanup(func() { local.Close() })
	met := metrics.New()
	if err := met.Backlog(metrics.QueueUsageRows, rec.Pending); err != nil {
		t.Fatal(err)
	}
	g, err := gate.New(gate.Config{
		Store: store, Local: local, Tenants: dir, Policies: catalog, Observer: admission.Observers{rec, prec}, Logger: log,
		Metrics: met, StoreName: o.storeName, TenantMaxReservations: o.tenantMaxReservations,
		Pepper: []byte("httpapi-test-pepper-0123456789abcdef"),
	})
	if err != nil {
		t.Fatal(err)
	}
	envoyDomains := pgstore.NewEnvoyDomains(pool)
	a := &tenantAPI{t: t, pool: pool, tenants: tenants, met: met, envoy: envoyconf.NewCatalog(envoyDomains, envoyconf.CatalogConfig{Logger: log})}
	a.e = New(Config{
		Logger:      log,
		Ready:       pool.Ping,
		Gate:        g,
		Policies:    policy.Service{Store: policies, Catalog: catalog},
		Envoy:       envoyconf.Service{Store: envoyDomains, Catalog: a.envoy},
		Usage:       usageOf{rec, dir},
		Webhooks:    testWebhooks(t, pool),
		ClientIP:    o.clientIP,
		PublicURL:   "https://tollgate.example",
		BillingKey:  []byte("billing-key"),
		LinkLimiter: gate.NewLimiter("billing link limits", nil, local, nil),
		Metrics:     met.Handler(),
		Instruments: met,
		Audit: func(_ context.Context, tenantID, kind string, detail map[string]any) {
			a.auditMu.Lock()
			a.audits = append(a.audits, auditEntry{tenantID, kind, detail})
			a.auditMu.Unlock()
		},
		WebhookTestLimiter: gate.NewLimiter("webhook test limits", nil, local, nil),
	})
	return a
}

// tenant creates a tenant on plan and returns its live and test keys, after
// running each SQL statement of setup on it ($1 is its id) before any
// request can have cached it.
func (a *tenantAPI) tenant(plan string, setup ...string) (live, test string) {
	a.t.Helper()
	live, lk, err := tenant.NewKey(false)
	if err != nil {
		a.t.Fatal(err)
	}
	test, tk, err := tenant.NewKey(true)
	if err != nil {
		a.t.Fatal(err)
	}
	tn, err := a.tenants.CreateTenant(context.Background(), "check test", plan, lk, tk)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, stmt := range setup {
		if _, err := a.pool.Exec(context.Background(), stmt, tn.ID); err != nil {
			a.t.Fatalf("%s: %v", stmt, err)
		}
	}
	return live, test
}

func (a *tenantAPI) do(key, method, target, body string) answer {
	a.t.Helper()
	return serveChecked(a.t, a.e, key, method, target, body)
}

// TestCheckAndUsageMatchTheDocument sends /v1/check and /v1/usage requests
// that draw each kind of answer from the real pipeline, and checks each
// request and answer against openapi.json (serveChecked), besides the status
// the case is about.
func TestCheckAndUsageMatchTheDocument(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	if _, err := a.tenants.SetPlanLimits(context.Background(), tenant.PlanStarter, tenant.PlanLimits{MonthlyChecks: ptr(int64(2))}); err != nil {
		t.Fatal(err)
	}
	pro, proTest := a.tenant(tenant.PlanPro)
	for _, p := range []struct{ name, body string }{
		{"one", `{"limit":1,"window":"1h"}`},
		{"errors", `{"limit":100,"window":"1m","scope":"global","fail_mode":"closed"}`},
		{"dark", `{"limit":1,"window":"1h","algorithm":"token_bucket","shadow":true}`},
		{"open", `{"limit":1000000,"window":"1h"}`},
	} {
		wantStatus(t, a.do(pro, http.MethodPut, "/v1/policies/"+p.name, p.body), http.StatusOK)
	}
	limited, _ := a.tenant(tenant.PlanPro, `UPDATE tenants SET rate_limit_per_minute = 1 WHERE id = $1`)
	wantStatus(t, a.do(limited, http.MethodPut, "/v1/policies/open", `{"limit":1000000,"window":"1h"}`), http.StatusOK)
	starter, _ := a.tenant(tenant.PlanStarter)
	unpaid, _ := a.tenant(tenant.PlanPro, `UPDATE tenants SET billing_status = 'unpaid' WHERE id = $1`)
	enterprise, _ := a.tenant(tenant.PlanEnterprise)
	for _, k := range []string{starter, unpaid} {
		wantStatus(t, a.do(k, http.MethodPut, "/v1/policies/open", `{"limit":1000000,"window":"1h"}`), http.StatusOK)
	}

	check := func(key, body string, status int) answer {
		t.Helper()
		r := a.do(key, http.MethodPost, "/v1/check", body)
		wantStatus(t, r, status)
		return r
	}
	// Allowed, with every kind of item: subject, global, shadow, peek, cost.
	r := check(pro, `{"items":[{"policy":"one","subject":"203.0.113.7"},{"policy":"errors"},{"policy":"dark","subject":"s","cost":1}]}`, 200)
	if m := r.json(t); m["allowed"] != true || r.header.Get("RateLimit-Policy") == "" {
		t.Errorf("allowed check: %s %v", r.body, r.header)
	}
	check(pro, `{"mode":"peek","items":[{"policy":"open","subject":"s","cost":5}]}`, 200)
	check(proTest, `{"mode":"consume","items":[{"policy":"open","subject":"s"}]}`, 200)
	// Refused by the tenant's policy: still 200, and a shadow item that would
	// refuse beside it.
	r = check(pro, `{"items":[{"policy":"one","subject":"203.0.113.7"},{"policy":"dark","subject":"s"}]}`, 200)
	if m := r.json(t); m["allowed"] != false {
		t.Errorf("refused check: %s", r.body)
	}

	// Refused by a ceiling: the per-IP layer, and the allotment.
	check(limited, `{"items":[{"policy":"open","subject":"s"}]}`, 200)
	r = check(limited, `{"items":[{"policy":"open","subject":"s"}]}`, 429)
	if r.header.Get("X-RateLimit-Layer") != "ip" {
		t.Errorf("429 layer %q", r.header.Get("X-RateLimit-Layer"))
	}
	check(starter, `{"items":[{"policy":"open","subject":"s"}]}`, 200)
	check(starter, `{"items":[{"policy":"open","subject":"s"}]}`, 200)
	r = check(starter, `{"items":[{"policy":"open","subject":"s"}]}`, 429)
	if r.header.Get("X-RateLimit-Layer") != "allotment" {
		t.Errorf("429 layer %q", r.header.Get("X-RateLimit-Layer"))
	}
	// A paid tenant held to starter is told to pay.
	check(unpaid, `{"items":[{"policy":"open","subject":"s"}]}`, 200)
	check(unpaid, `{"items":[{"policy":"open","subject":"s"}]}`, 200)
	r = check(unpaid, `{"items":[{"policy":"open","subject":"s"}]}`, 402)
	if m := r.json(t); m["code"] != "payment_required" || !strings.HasPrefix(m["billing_url"].(string), "https://tollgate.example/") {
		t.Errorf("402: %s", r.body)
	}

	// Bad requests and bad keys.
	for _, body := range []string{
		`{"items":[{"policy":"nope","subject":"s"}]}`,
		`{"items":[{"policy":"one"}]}`,
		`{"items":[{"policy":"one","subject":"s","cost":0}]}`,
		`{"mode":"x","items":[{"policy":"one","subject":"s"}]}`,
		`{"items":[]}`,
		`not json`,
	} {
		check(pro, body, 400)
	}
	for _, key := range []string{"", "tg_live_nope", "tg_live_" + strings.Repeat("A", 40)} {
		check(key, `{"items":[{"policy":"one","subject":"s"}]}`, 401)
		wantStatus(t, a.do(key, http.MethodGet, "/v1/usage", ""), 401)
	}

	// Usage: a plan with an allotment, and an unlimited one (null).
	r = a.do(pro, http.MethodGet, "/v1/usage", "")
	wantStatus(t, r, 200)
	if m := r.json(t); m["plan"] != "pro" || m["checks_used"] != 3.0 || m["sandbox_used"] != 1.0 || m["checks_allotment"] != 50000000.0 {
		t.Errorf("usage of pro: %s", r.body)
	}
	r = a.do(enterprise, http.MethodGet, "/v1/usage", "")
	wantStatus(t, r, 200)
	if m := r.json(t); m["checks_allotment"] != nil || m["effective_plan"] != "enterprise" {
		t.Errorf("usage of enterprise: %s", r.body)
	}
	r = a.do(unpaid, http.MethodGet, "/v1/usage", "")
	wantStatus(t, r, 200)
	if m := r.json(t); m["effective_plan"] != "starter" || m["checks_allotment"] != 2.0 || m["billing_status"] != "unpaid" {
		t.Errorf("usage of unpaid pro: %s", r.body)
	}
	// The per-IP layer guards /v1/usage too.
	r = a.do(limited, http.MethodGet, "/v1/usage", "")
	wantStatus(t, r, 200)
	wantStatus(t, a.do(limited, http.MethodGet, "/v1/usage", ""), 429)
}

// TestDegradedCheckMatchesTheDocument cuts the counter store off (a real
// PostgreSQL store behind a proxy) and checks the degraded answers, of a
// fail-open and a fail-closed policy, against the document.
func TestDegradedCheckMatchesTheDocument(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: proxied, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := newTenantAPI(t, dsn, store)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/lenient", `{"limit":10,"window":"1m","fail_mode":"open"}`), 200)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/strict", `{"limit":10,"window":"1m","fail_mode":"closed"}`), 200)
	wantStatus(t, a.do(key, http.MethodPost, "/v1/check", `{"items":[{"policy":"lenient","subject":"s"}]}`), 200)

	proxy.Cut()
	r := a.do(key, http.MethodPost, "/v1/check", `{"items":[{"policy":"lenient","subject":"s"},{"policy":"strict","subject":"s"}]}`)
	wantStatus(t, r, 200)
	var ans struct {
		Allowed, Degraded bool
		Items             []struct{ Allowed, Degraded bool }
	}
	if err := json.Unmarshal(r.body, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Allowed || !ans.Degraded || len(ans.Items) != 2 || !ans.Items[0].Allowed || ans.Items[1].Allowed ||
		!ans.Items[0].Degraded || !ans.Items[1].Degraded || r.header.Get("X-RateLimit-Degraded") != "true" {
		t.Errorf("degraded answer: %s %v", r.body, r.header)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSystemOfRecordDownIs503: with the database that holds keys and
// policies out of reach, a check whose tenant is not cached yet cannot be
// decided: 503 with Retry-After, in the API's problem form, never a 500.
func TestSystemOfRecordDownIs503(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	a := newTenantAPI(t, proxied, nil)
	cold, _ := a.tenant(tenant.PlanPro)
	warm, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(warm, http.MethodPut, "/v1/policies/p", `{"limit":10,"window":"1m"}`), 200)
	wantStatus(t, a.do(cold, http.MethodPut, "/v1/policies/p", `{"limit":10,"window":"1m"}`), 200)
	body := `{"items":[{"policy":"p","subject":"s"}]}`
	wantStatus(t, a.do(warm, http.MethodPost, "/v1/check", body), 200)

	proxy.Cut()
	r := a.do(cold, http.MethodPost, "/v1/check", body)
	wantStatus(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "unavailable") {
		t.Errorf("cold tenant with the database down: %v %s", r.header, r.body)
	}
	// A tenant already cached is still answered.
	wantStatus(t, a.do(warm, http.MethodPost, "/v1/check", body), 200)
}

// TestExpiredKeyIs401: a key past its expiry is refused as a revoked key is,
// 401, with a problem detail saying it expired and when; the tenant's other
// keys still work.
func TestExpiredKeyIs401(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro, `UPDATE api_keys SET expires_at = '2025-01-02T03:04:05Z' WHERE tenant_id = $1 AND NOT test`)
	for _, r := range []answer{
		a.do(live, http.MethodPost, "/v1/check", `{"items":[{"policy":"one","subject":"s"}]}`),
		a.do(live, http.MethodGet, "/v1/usage", ""),
	} {
		wantStatus(t, r, http.StatusUnauthorized)
		m := r.json(t)
		if m["type"] != problemBase+"unauthorized" || !strings.Contains(fmt.Sprint(m["detail"]), "expired at 2025-01-02T03:04:05Z") {
			t.Errorf("expired key: %s, want the unauthorized problem saying when the key expired", r.body)
		}
	}
	wantStatus(t, a.do(test, http.MethodGet, "/v1/usage", ""), http.StatusOK)
}

// TestLoneSurrogateEscapes: a \u escape of half a UTF-16 pair is found
// wherever it is in the JSON text, and nothing else is taken for one: an
// escaped backslash before "u", a whole pair, an escape that is no
// surrogate, or a malformed escape (encoding/json's to refuse).
func TestLoneSurrogateEscapes(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		text string
		lone bool
	}{
		"a high half":                        {`"\ud800"`, true},
		"a high half, upper case":            {`"\uD83D"`, true},
		"a low half":                         {`"\udc00"`, true},
		"the last low half":                  {`"\udfff"`, true},
		"a high half then a letter":          {`"\ud800A"`, true},
		"a high half then another":           {`"\ud800\ud800"`, true},
		"a high half then an escape":         {`"\ud800\n"`, true},
		"a high half then \\u0041":           {`"\ud800\u0041"`, true},
		"a high half at the end":             {`"a\ud83d`, true},
		"a low half then a high half":        {`"\ude00\ud83d"`, true},
		"a pair, then a lone half":           {`"\ud83d\ude00\udc00"`, true},
		"after an escaped quote":             {`{"a":"\"","b":"\udc00"}`, true},
		"a pair":                             {`"\ud83d\ude00"`, false},
		"the widest pair":                    {`"\udbff\udfff"`, false},
		"two pairs":                          {`"\ud83d\ude00\ud83d\ude01"`, false},
		"no surrogate":                       {`"\u00e9\ufffd\ud7ff\ue000"`, false},
		"an escaped backslash, then u":       {`"\\ud800"`, false},
		"two escaped backslashes":            {`"\\\\ud800"`, false},
		"a malformed escape":                 {`"\ud80"`, false},
		"not hex":                            {`"\udxyz"`, false},
		"a backslash at the end":             {`"\`, false},
		"a backslash before the u of a pair": {`"\\\ud83d\ude00"`, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := loneSurrogate([]byte(c.text)); got != c.lone {
				t.Errorf("loneSurrogate(%s) = %t, want %t", c.text, got, c.lone)
			}
		})
	}
}

// TestEscapedLoneSurrogatesAreRefused: encoding/json reads an escaped lone
// surrogate as U+FFFD, so "\ud800", "\udc00" and "\ufffd" would be one
// subject; every JSON body of /v1 refuses one, as it refuses bytes that
// are not UTF-8, with a 400 naming the body. A whole pair is a character
// like any other.
func TestEscapedLoneSurrogatesAreRefused(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/login", `{"limit":1,"window":"1h"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/jobs", `{"limit":1,"algorithm":"concurrency"}`), http.StatusOK)
	for _, s := range []string{`\ud800`, `\udc00`, `\ud800\u0041`, `a\udbff`} {
		for _, r := range []struct{ method, target, body string }{
			{"POST", "/v1/check", `{"items":[{"policy":"login","subject":"` + s + `"}]}`},
			{"POST", "/v1/check/batch", `{"checks":[{"items":[{"policy":"login","subject":"` + s + `"}]}]}`},
			{"POST", "/v1/leases", `{"policy":"jobs","subject":"` + s + `"}`},
			{"POST", "/v1/leases/00000000-0000-0000-0000-000000000000/renew", `{"ttl":"30s` + s + `"}`},
			{"PUT", "/v1/policies/other", `{"limit":1,"window":"1h","fail_mode":"` + s + `"}`},
			{"PUT", "/v1/policies/login/overrides/a%EF%BF%BD", `{"limit":5,"pattern":"a` + s + `"}`},
			{"POST", "/v1/webhooks", `{"url":"https://hooks.example.com/` + s + `","events":["key.revoked"]}`},
		} {
			t.Run(r.target+" "+s, func(t *testing.T) {
				wantFieldProblem(t, a.do(live, r.method, r.target, r.body), http.StatusBadRequest, "body")
			})
		}
	}
	// "\ufffd" and a whole pair are text: counted, each on its own.
	for _, s := range []string{`\ufffd`, `\ud83d\ude00`, `😀`} {
		r := a.do(live, "POST", "/v1/check", `{"items":[{"policy":"login","subject":"`+s+`"}]}`)
		wantStatus(t, r, http.StatusOK)
		if want := s != `😀`; r.json(t)["allowed"] != want {
			t.Errorf("subject %s: %s, want allowed %t (the escaped pair and the raw character are one subject)", s, r.body, want)
		}
	}
}
