package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// doKeyed is tenantAPI.do with an Idempotency-Key header (none when
// idem is empty), checked against the document as do's requests are.
func (a *tenantAPI) doKeyed(key, idem, method, target, body string) answer {
	a.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	if idem != "" {
		req.Header.Set(idempotencyHeader, idem)
	}
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, req)
	resp := rec.Result()
	respBody, _ := io.ReadAll(resp.Body)
	checkOpenAPI(a.t, req, []byte(body), resp, respBody)
	return answer{status: resp.StatusCode, header: resp.Header, body: respBody}
}

// wantFields fails unless the JSON answer r holds each member of want
// with that value (numbers as float64).
func wantFields(t *testing.T, what string, r answer, want map[string]any) map[string]any {
	t.Helper()
	m := r.json(t)
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s: %s = %v, want %v: %s", what, k, m[k], v, r.body)
		}
	}
	return m
}

// TestReservationRoutes reserves, settles (less, more, again) and releases
// amounts of a budget through the real router, every request and answer
// checked against the document.
func TestReservationRoutes(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	r := a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h","unit":"tokens"}`)
	wantStatus(t, r, http.StatusOK)
	wantFields(t, "policy", r, map[string]any{"unit": "tokens", "on_expiry": "settle"})

	r = a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"alice","amount":40,"ttl":"10m"}`)
	wantStatus(t, r, http.StatusOK)
	m := wantFields(t, "reserve 40", r, map[string]any{"allowed": true, "amount": 40.0, "remaining": 60.0, "limit": 100.0,
		"unit": "tokens", "degraded": false, "retry_after_ms": 0.0})
	exp, err := time.Parse(time.RFC3339, m["expires_at"].(string))
	if err != nil || time.Until(exp) > 10*time.Minute || time.Until(exp) < 9*time.Minute {
		t.Errorf("expires_at of a 10m reservation: %s", r.body)
	}
	if r.header.Get("RateLimit-Policy") == "" {
		t.Errorf("reservation without RateLimit fields")
	}
	id := m["reservation_id"].(string)

	// More than is left: refused whole, nothing charged.
	r = a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"alice","amount":70}`)
	wantStatus(t, r, http.StatusOK)
	m = wantFields(t, "reserve 70 of 60", r, map[string]any{"allowed": false, "remaining": 60.0, "overdrawn": 0.0})
	if m["reservation_id"] != nil || m["retry_after_ms"].(float64) <= 0 {
		t.Errorf("refusal: %s", r.body)
	}

	// Less used than held: the rest goes back; the same settlement again
	// answers the same, another is a conflict.
	r = a.do(live, "POST", "/v1/reservations/"+id+"/settle", `{"used":30}`)
	wantStatus(t, r, http.StatusOK)
	wantFields(t, "settle 30 of 40", r, map[string]any{"reservation_id": id, "amount": 40.0, "used": 30.0, "returned": 10.0,
		"excess": 0.0, "remaining": 70.0, "overdrawn": 0.0, "unit": "tokens", "repeat": false})
	r = a.do(live, "POST", "/v1/reservations/"+id+"/settle", `{"used":30}`)
	wantFields(t, "settle again", r, map[string]any{"used": 30.0, "returned": 10.0, "remaining": 70.0, "repeat": true})
	wantFieldProblem(t, a.do(live, "POST", "/v1/reservations/"+id+"/settle", `{"used":31}`), http.StatusConflict, "")
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/reservations/"+id, ""), http.StatusConflict, "")

	// More used than held: the excess is charged past the limit, and the
	// budget refuses until it recovers.
	r = a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"alice","amount":50}`)
	id2 := wantFields(t, "reserve 50", r, map[string]any{"allowed": true, "remaining": 20.0})["reservation_id"].(string)
	r = a.do(live, "POST", "/v1/reservations/"+id2+"/settle", `{"used":90}`)
	wantFields(t, "settle 90 of 50", r, map[string]any{"excess": 40.0, "returned": 0.0, "remaining": 0.0, "overdrawn": 20.0})
	r = a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"alice","amount":1}`)
	wantFields(t, "reserve when overdrawn", r, map[string]any{"allowed": false, "remaining": 0.0, "overdrawn": 20.0})
	r = a.do(live, "POST", "/v1/check", `{"items":[{"policy":"llm","subject":"alice"}]}`)
	if !strings.Contains(string(r.body), `"allowed":false`) {
		t.Errorf("check when overdrawn: %s", r.body)
	}

	// Released unused: all of it back.
	r = a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"bob","amount":25}`)
	id3 := wantFields(t, "reserve for bob", r, map[string]any{"allowed": true, "remaining": 75.0})["reservation_id"].(string)
	r = a.do(live, "DELETE", "/v1/reservations/"+id3, "")
	wantStatus(t, r, http.StatusOK)
	wantFields(t, "release", r, map[string]any{"amount": 25.0, "used": 0.0, "returned": 25.0, "remaining": 100.0})

	// Unknown ids, and another tenant's or key kind's, are 404.
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/reservations/rs_00000000000000000000000000000000", ""), http.StatusNotFound, "")
	other, _ := a.tenant(tenant.PlanPro)
	wantFieldProblem(t, a.do(other, "POST", "/v1/reservations/"+id3+"/settle", `{"used":1}`), http.StatusNotFound, "")
	wantFieldProblem(t, a.do(test, "POST", "/v1/reservations/"+id2+"/settle", `{"used":90}`), http.StatusNotFound, "")
}

// TestReservationIdempotencyKey: a reservation sent again with the same
// key reserves nothing more and names the same reservation; the key is
// the tenant's and key kind's own.
func TestReservationIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h","on_expiry":"release"}`), http.StatusOK)
	body := `{"policy":"llm","subject":"alice","amount":30}`
	r := a.doKeyed(live, "call-1", "POST", "/v1/reservations", body)
	first := wantFields(t, "first", r, map[string]any{"allowed": true, "remaining": 70.0})
	id := first["reservation_id"].(string)
	// A retry answers as the first did: the amount reserved then (whatever
	// this body says), its expiry, and the budget as it is now.
	for _, retry := range []string{body, `{"policy":"llm","subject":"alice","amount":50}`} {
		r = a.doKeyed(live, "call-1", "POST", "/v1/reservations", retry)
		wantStatus(t, r, http.StatusOK)
		wantFields(t, "retry", r, map[string]any{"allowed": true, "reservation_id": id, "amount": 30.0, "repeat": true,
			"expires_at": first["expires_at"], "remaining": 70.0, "reset_at": first["reset_at"]})
	}
	r = a.doKeyed(live, "call-2", "POST", "/v1/reservations", body)
	id2 := wantFields(t, "another key", r, map[string]any{"allowed": true, "remaining": 40.0})["reservation_id"].(string)
	if id2 == id {
		t.Fatalf("two keys, one id %s", id)
	}
	// The test key's "call-1" is another reservation, in the sandbox.
	r = a.doKeyed(test, "call-1", "POST", "/v1/reservations", body)
	wantFields(t, "test key", r, map[string]any{"allowed": true, "remaining": 70.0, "repeat": nil})
	// Settling with a key (any) is settling; once settled, a retry of the
	// reservation still names it, and reserves nothing.
	r = a.doKeyed(live, "settle-1", "POST", "/v1/reservations/"+id+"/settle", `{"used":30}`)
	wantFields(t, "settle", r, map[string]any{"remaining": 40.0, "repeat": false})
	r = a.doKeyed(live, "settle-1", "POST", "/v1/reservations/"+id+"/settle", `{"used":30}`)
	wantFields(t, "settle again", r, map[string]any{"remaining": 40.0, "repeat": true})
	r = a.doKeyed(live, "call-1", "POST", "/v1/reservations", body)
	wantFields(t, "retry after settling", r, map[string]any{"reservation_id": id, "repeat": true, "amount": 30.0,
		"expires_at": first["expires_at"], "remaining": 40.0})
	r = a.do(live, "DELETE", "/v1/reservations/"+id2, "")
	wantFields(t, "release", r, map[string]any{"remaining": 70.0})
}

// TestReservationTenantBound: a tenant at its bound of live reservations
// is refused with tenant_full, and another tenant is not; its settled
// outcomes are kept up to the same bound, the oldest forgotten past it.
func TestReservationTenantBound(t *testing.T) {
	t.Parallel()
	a := newTenantAPIWith(t, pgtest.New(t), apiOptions{tenantMaxReservations: 3})
	hostile, _ := a.tenant(tenant.PlanPro)
	victim, _ := a.tenant(tenant.PlanPro)
	for _, k := range []string{hostile, victim} {
		wantStatus(t, a.do(k, "PUT", "/v1/policies/llm", `{"limit":1000,"window":"1h"}`), http.StatusOK)
	}
	var ids []string
	for i := range 3 {
		r := a.do(hostile, "POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1}`)
		ids = append(ids, wantFields(t, "hostile", r, map[string]any{"allowed": true})["reservation_id"].(string))
		_ = i
	}
	r := a.do(hostile, "POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1}`)
	wantFields(t, "past the bound", r, map[string]any{"allowed": false, "tenant_full": true, "retry_after_ms": 1000.0, "remaining": 997.0})
	r = a.do(victim, "POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1}`)
	wantFields(t, "another tenant", r, map[string]any{"allowed": true, "remaining": 999.0})
	// A settled reservation is no longer live: room again.
	wantStatus(t, a.do(hostile, "POST", "/v1/reservations/"+ids[0]+"/settle", `{"used":1}`), http.StatusOK)
	r = a.do(hostile, "POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1}`)
	wantFields(t, "after a settlement", r, map[string]any{"allowed": true})
	ids = append(ids, r.json(t)["reservation_id"].(string))
	// Settled outcomes hold a share too: past three kept, the oldest is
	// forgotten (a repeat of it is a 404), the newest repeat.
	for _, id := range ids[1:] {
		wantStatus(t, a.do(hostile, "POST", "/v1/reservations/"+id+"/settle", `{"used":1}`), http.StatusOK)
	}
	wantStatus(t, a.do(hostile, "POST", "/v1/reservations/"+ids[0]+"/settle", `{"used":1}`), http.StatusNotFound)
	r = a.do(hostile, "POST", "/v1/reservations/"+ids[3]+"/settle", `{"used":1}`)
	wantFields(t, "the newest outcome", r, map[string]any{"repeat": true})
}

// TestReservationRoutesRefuseBadInput: 400s naming the field, never a
// 500, for malformed bodies, headers and ids.
func TestReservationRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), memory.New(memory.Config{}))
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/jobs", `{"limit":2,"algorithm":"concurrency"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1m"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/all", `{"limit":100,"window":"1m","scope":"global"}`), http.StatusOK)
	for _, tc := range []struct{ body, field string }{
		{`{"subject":"s","amount":1}`, "policy"},
		{`{"policy":"nope","subject":"s","amount":1}`, "policy"},
		{`{"policy":"jobs","subject":"s","amount":1}`, "policy"},
		{`{"policy":"llm","amount":1}`, "subject"},
		{`{"policy":"llm","subject":"` + strings.Repeat("s", 513) + `","amount":1}`, "subject"},
		{`{"policy":"llm","subject":"a\u0000b","amount":1}`, "subject"},
		{`{"policy":"llm","subject":"s"}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":0}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":-5}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":1000000001}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":99999999999999999999}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":1.5}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":"3"}`, "amount"},
		{`{"policy":"llm","subject":"s","amount":1,"ttl":"0s"}`, "ttl"},
		{`{"policy":"llm","subject":"s","amount":1,"ttl":"25h"}`, "ttl"},
		{`{"policy":"llm","subject":"s","amount":1,"ttl":300}`, "ttl"},
		{`{"policy":"llm","subject":"s","amount":1,"cost":2}`, ""},
		{`{"policy":"llm","subject":"s","amount":1} {}`, "body"},
		{`"\ud800"`, "body"},
		{`not json`, "body"},
		{``, "body"},
	} {
		wantFieldProblem(t, a.do(live, "POST", "/v1/reservations", tc.body), http.StatusBadRequest, tc.field)
	}
	for _, key := range []string{strings.Repeat("k", 256), "caf\u00e9", "tab\there"} {
		wantFieldProblem(t, a.doKeyed(live, key, "POST", "/v1/reservations", `{"policy":"all","amount":1}`), http.StatusBadRequest, idempotencyHeader)
	}
	wantStatus(t, a.doKeyed(live, strings.Repeat("k", 255), "POST", "/v1/reservations", `{"policy":"all","amount":1}`), http.StatusOK)
	for _, tc := range []struct{ method, path, body, field string }{
		{"POST", "/v1/reservations/not-an-id/settle", `{"used":1}`, "id"},
		{"DELETE", "/v1/reservations/rs_XYZ", "", "id"},
		{"POST", "/v1/reservations/rs_00000000000000000000000000000000/settle", `{}`, "used"},
		{"POST", "/v1/reservations/rs_00000000000000000000000000000000/settle", `{"used":-1}`, "used"},
		{"POST", "/v1/reservations/rs_00000000000000000000000000000000/settle", `{"used":"1"}`, "used"},
		{"POST", "/v1/reservations/rs_00000000000000000000000000000000/settle", `[1]`, "body"},
		{"POST", "/v1/reservations/rs_00000000000000000000000000000000/settle", ``, "body"},
	} {
		wantFieldProblem(t, a.do(live, tc.method, tc.path, tc.body), http.StatusBadRequest, tc.field)
	}
	// A policy of leases takes no unit or on_expiry.
	wantFieldProblem(t, a.do(live, "PUT", "/v1/policies/jobs", `{"limit":2,"algorithm":"concurrency","unit":"jobs"}`), http.StatusBadRequest, "unit")
	wantFieldProblem(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":2,"window":"1m","on_expiry":"later"}`), http.StatusBadRequest, "on_expiry")
}
