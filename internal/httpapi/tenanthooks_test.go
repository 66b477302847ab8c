package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// testWebhooks is the webhooks service on pool, https only.
func testWebhooks(t testing.TB, pool *pgxpool.Pool) *webhooks.Service {
	t.Helper()
	sealer, err := webhooks.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return &webhooks.Service{Store: pgstore.NewWebhooks(pool), Sealer: sealer}
}

// TestWebhookRoutes: a live key registers, reads, tests, rotates,
// disables, enables and deletes an endpoint, every answer as the
// document says; the secret is shown at creation and rotation only.
func TestWebhookRoutes(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	other, _ := a.tenant(tenant.PlanPro)

	r := a.do(live, "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/tollgate","events":["key.revoked","alert.triggered"]}`)
	wantStatus(t, r, http.StatusCreated)
	ep := r.json(t)
	id, _ := ep["id"].(string)
	if secret, _ := ep["secret"].(string); !strings.HasPrefix(secret, "whsec_") || r.header.Get("Location") != "/v1/webhooks/"+id {
		t.Fatalf("created %v, Location %q", ep, r.header.Get("Location"))
	}
	got := a.do(live, "GET", "/v1/webhooks/"+id, "")
	wantStatus(t, got, http.StatusOK)
	if _, shown := got.json(t)["secret"]; shown {
		t.Error("GET shows the secret")
	}
	wantStatus(t, a.do(other, "GET", "/v1/webhooks/"+id, ""), http.StatusNotFound)
	wantStatus(t, a.do(other, "DELETE", "/v1/webhooks/"+id, ""), http.StatusNotFound)
	wantStatus(t, a.do(live, "GET", "/v1/webhooks/not-a-uuid", ""), http.StatusNotFound)
	if l := a.do(live, "GET", "/v1/webhooks", "").json(t)["webhooks"].([]any); len(l) != 1 {
		t.Errorf("list: %v", l)
	}
	wantStatus(t, a.do(live, "POST", "/v1/webhooks/"+id+"/test", ""), http.StatusAccepted)
	log := a.do(live, "GET", "/v1/webhooks/"+id+"/deliveries", "")
	wantStatus(t, log, http.StatusOK)
	ds := log.json(t)["deliveries"].([]any)
	if len(ds) != 1 || ds[0].(map[string]any)["event_type"] != "test.ping" {
		t.Fatalf("delivery log %v, want the test.ping", ds)
	}
	did := ds[0].(map[string]any)["id"].(string)
	wantStatus(t, a.do(live, "POST", "/v1/webhooks/"+id+"/deliveries/"+did+"/resend", ""), http.StatusConflict)
	rot := a.do(live, "POST", "/v1/webhooks/"+id+"/rotate", "")
	wantStatus(t, rot, http.StatusOK)
	if rot.json(t)["secret"] == ep["secret"] {
		t.Error("rotate kept the secret")
	}
	off := a.do(live, "POST", "/v1/webhooks/"+id+"/disable", "")
	wantStatus(t, off, http.StatusOK)
	if m := off.json(t); m["enabled"] != false || m["disabled_reason"] != "disabled by the tenant" {
		t.Errorf("disabled: %v", m)
	}
	usage := a.do(live, "GET", "/v1/usage", "").json(t)
	if d, _ := usage["webhooks_disabled"].([]any); len(d) != 1 {
		t.Errorf("usage webhooks_disabled %v, want the endpoint", usage["webhooks_disabled"])
	}
	wantStatus(t, a.do(live, "POST", "/v1/webhooks/"+id+"/enable", ""), http.StatusOK)
	wantStatus(t, a.do(live, "DELETE", "/v1/webhooks/"+id, ""), http.StatusNoContent)
	wantStatus(t, a.do(live, "GET", "/v1/webhooks/"+id, ""), http.StatusNotFound)
}

// TestWebhookRoutesRefuseBadInput: clear 4xx problems, nothing stored.
func TestWebhookRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	for _, c := range []struct {
		body, field string
	}{
		{`{"url":"http://hooks.example.com/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://127.0.0.1/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://169.254.169.254/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://[64:ff9b::a9fe:a9fe]/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://[2002:7f00:1::]/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://2130706433/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://127.1/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://0x7f000001/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://0177.0.0.1/","events":["key.revoked"]}`, "url"},
		{`{"url":"https://127.0.0.1./","events":["key.revoked"]}`, "url"},
		{`{"url":"https://hooks.example.com/` + strings.Repeat("a", 2100) + `","events":["key.revoked"]}`, ""},
		{`{"url":"https://hooks.example.com/","events":[]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":["everything"]}`, "events"},
		{`{"url":"https://hooks.example.com/","events":["key.revoked"],"extra":1}`, ""},
	} {
		r := a.do(live, "POST", "/v1/webhooks", c.body)
		wantStatus(t, r, http.StatusBadRequest)
		if f, _ := r.json(t)["field"].(string); c.field != "" && f != c.field {
			t.Errorf("%.80s: field %q, want %q", c.body, f, c.field)
		}
	}
	body := `{"url":"https://hooks.example.com/","events":["plan.changed"]}`
	r := a.do(test, "POST", "/v1/webhooks", body)
	wantStatus(t, r, http.StatusForbidden)
	wantStatus(t, a.do(test, "GET", "/v1/webhooks", ""), http.StatusOK)
	for range webhooks.MaxEndpoints {
		wantStatus(t, a.do(live, "POST", "/v1/webhooks", body), http.StatusCreated)
	}
	r = a.do(live, "POST", "/v1/webhooks", body)
	wantStatus(t, r, http.StatusConflict)
	if ty := r.json(t)["type"]; ty != "https://tollgate.dev/problems/too-many-webhooks" {
		t.Errorf("sixth endpoint: problem %v", ty)
	}
}

// TestWebhookTestSendsAreLimited: a tenant's test sends are limited to 10
// a minute across its endpoints, then answered 429 with Retry-After and a
// problem that says so, costing no outbox row; another tenant's are not
// touched.
func TestWebhookTestSendsAreLimited(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	other, _ := a.tenant(tenant.PlanPro)
	body := `{"url":"https://hooks.example.com/","events":["key.revoked"]}`
	ids := []string{
		a.do(live, "POST", "/v1/webhooks", body).json(t)["id"].(string),
		a.do(live, "POST", "/v1/webhooks", body).json(t)["id"].(string),
	}
	for i := range 10 {
		wantStatus(t, a.do(live, "POST", "/v1/webhooks/"+ids[i%2]+"/test", ""), http.StatusAccepted)
	}
	r := a.do(live, "POST", "/v1/webhooks/"+ids[0]+"/test", "")
	wantProblem(t, r, http.StatusTooManyRequests, "/webhook-tests-limited")
	// A sliding window of a minute: the sends of this one weigh on the
	// next, so the wait may pass a minute, never two.
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 120 {
		t.Errorf("Retry-After %q, want 1 to 120 seconds", r.header.Get("Retry-After"))
	}
	var rows int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 10 {
		t.Errorf("%d deliveries in the outbox, want the 10 test sends answered 202", rows)
	}
	oid := a.do(other, "POST", "/v1/webhooks", body).json(t)["id"].(string)
	wantStatus(t, a.do(other, "POST", "/v1/webhooks/"+oid+"/test", ""), http.StatusAccepted)
}

// TestWebhookOutboxBound: once 1,000 deliveries wait for an endpoint, a
// test send and the resend of a settled delivery are refused, 429 with a
// problem that says why; once one is settled, they are queued again.
func TestWebhookOutboxBound(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	id := a.do(live, "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/","events":["key.revoked"]}`).json(t)["id"].(string)
	exec := func(sql string) {
		t.Helper()
		if _, err := a.pool.Exec(context.Background(), sql, id); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	events := func(n int) string {
		return `INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
			SELECT e.tenant_id, 'key.revoked', '{}', 'test:' || gen_random_uuid()
			FROM webhook_endpoints AS e, generate_series(1, ` + strconv.Itoa(n) + `) WHERE e.id = $1`
	}
	exec(events(1))
	exec(`UPDATE webhook_deliveries SET status = 'delivered', next_attempt_at = NULL WHERE endpoint_id = $1`)
	var settled string
	if err := a.pool.QueryRow(context.Background(), `SELECT id::text FROM webhook_deliveries WHERE endpoint_id = $1`, id).Scan(&settled); err != nil {
		t.Fatal(err)
	}
	exec(events(1000))
	wantProblem(t, a.do(live, "POST", "/v1/webhooks/"+id+"/test", ""), http.StatusTooManyRequests, "/webhook-outbox-full")
	wantProblem(t, a.do(live, "POST", "/v1/webhooks/"+id+"/deliveries/"+settled+"/resend", ""), http.StatusTooManyRequests, "/webhook-outbox-full")
	exec(`UPDATE webhook_deliveries SET status = 'delivered', next_attempt_at = NULL
		WHERE id = (SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending' LIMIT 1)`)
	wantStatus(t, a.do(live, "POST", "/v1/webhooks/"+id+"/deliveries/"+settled+"/resend", ""), http.StatusAccepted)
	wantProblem(t, a.do(live, "POST", "/v1/webhooks/"+id+"/test", ""), http.StatusTooManyRequests, "/webhook-outbox-full")
}
