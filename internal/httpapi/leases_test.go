package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// wantFieldProblem fails unless r is a problem of status and, when field is not
// empty, names it.
func wantFieldProblem(t *testing.T, r answer, status int, field string) {
	t.Helper()
	wantStatus(t, r, status)
	if field != "" {
		if got := r.json(t)["field"]; got != field {
			t.Errorf("problem field %v, want %q: %s", got, field, r.body)
		}
	}
}

// TestLeaseRoutes takes, renews and releases leases of a concurrency policy
// through the real router, every request and answer checked against the
// document.
func TestLeaseRoutes(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	r := a.do(live, "PUT", "/v1/policies/jobs", `{"limit":2,"algorithm":"concurrency"}`)
	wantStatus(t, r, http.StatusOK)
	if m := r.json(t); m["window"] != nil || m["algorithm"] != "concurrency" {
		t.Fatalf("concurrency policy: %s", r.body)
	}
	wantStatus(t, a.do(live, "PUT", "/v1/policies/rate", `{"limit":2,"window":"1m"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/all", `{"limit":1,"algorithm":"concurrency","scope":"global"}`), http.StatusOK)

	body := `{"policy":"jobs","subject":"alice","ttl":"30s"}`
	var ids []string
	for i := range 2 {
		r := a.do(live, "POST", "/v1/leases", body)
		wantStatus(t, r, http.StatusOK)
		m := r.json(t)
		exp, err := time.Parse(time.RFC3339, m["expires_at"].(string))
		if m["allowed"] != true || m["in_flight"] != float64(i+1) || m["limit"] != 2.0 || err != nil ||
			time.Until(exp) > 30*time.Second || time.Until(exp) < 20*time.Second {
			t.Fatalf("lease %d: %s", i+1, r.body)
		}
		if r.header.Get("RateLimit-Policy") == "" {
			t.Errorf("lease %d without RateLimit fields", i+1)
		}
		ids = append(ids, m["lease_id"].(string))
	}
	r = a.do(live, "POST", "/v1/leases", body)
	wantStatus(t, r, http.StatusOK)
	if m := r.json(t); m["allowed"] != false || m["lease_id"] != nil || m["in_flight"] != 2.0 || m["retry_after_ms"].(float64) < 20000 {
		t.Fatalf("third of 2: %s", r.body)
	}
	// A global policy takes no subject; the default ttl is a minute.
	r = a.do(live, "POST", "/v1/leases", `{"policy":"all"}`)
	if exp, _ := time.Parse(time.RFC3339, r.json(t)["expires_at"].(string)); time.Until(exp) < 50*time.Second {
		t.Errorf("default ttl: %s", r.body)
	}

	r = a.do(live, "POST", "/v1/leases/"+ids[0]+"/renew", `{"ttl":"1h"}`)
	wantStatus(t, r, http.StatusOK)
	if exp, err := time.Parse(time.RFC3339, r.json(t)["expires_at"].(string)); err != nil || time.Until(exp) < 59*time.Minute {
		t.Errorf("renew for an hour: %s", r.body)
	}
	wantStatus(t, a.do(live, "POST", "/v1/leases/"+ids[0]+"/renew", ""), http.StatusOK)
	wantStatus(t, a.do(live, "DELETE", "/v1/leases/"+ids[0], ""), http.StatusNoContent)
	// Gone: a second release, a renewal.
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/leases/"+ids[0], ""), http.StatusNotFound, "")
	wantFieldProblem(t, a.do(live, "POST", "/v1/leases/"+ids[0]+"/renew", `{"ttl":"30s"}`), http.StatusNotFound, "")
	if r := a.do(live, "POST", "/v1/leases", body); r.json(t)["allowed"] != true {
		t.Fatalf("after a release: %s", r.body)
	}

	// Test keys may take, renew and release leases of their own, apart
	// from the live key's.
	r = a.do(test, "POST", "/v1/leases", body)
	wantStatus(t, r, http.StatusOK)
	tid := r.json(t)["lease_id"].(string)
	wantStatus(t, a.do(test, "POST", "/v1/leases/"+tid+"/renew", `{"ttl":"10s"}`), http.StatusOK)
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/leases/"+tid, ""), http.StatusNotFound, "")
	wantFieldProblem(t, a.do(test, "DELETE", "/v1/leases/"+ids[1], ""), http.StatusNotFound, "")
	wantStatus(t, a.do(test, "DELETE", "/v1/leases/"+tid, ""), http.StatusNoContent)
	// And another tenant cannot touch them.
	other, _ := a.tenant(tenant.PlanPro)
	wantFieldProblem(t, a.do(other, "DELETE", "/v1/leases/"+ids[1], ""), http.StatusNotFound, "")
}

// TestLeaseRoutesRefuseBadInput: 400s naming the field, for the lease
// routes and for a check of a concurrency policy.
func TestLeaseRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/jobs", `{"limit":2,"algorithm":"concurrency"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/rate", `{"limit":2,"window":"1m"}`), http.StatusOK)
	for _, tc := range []struct{ body, field string }{
		{`{"subject":"s"}`, "policy"},
		{`{"policy":"nope","subject":"s"}`, "policy"},
		{`{"policy":"rate","subject":"s"}`, "policy"},
		{`{"policy":"jobs"}`, "subject"},
		{`{"policy":"jobs","subject":"` + strings.Repeat("s", 513) + `"}`, "subject"},
		{`{"policy":"jobs","subject":"s","ttl":"0.5s"}`, "ttl"},
		{`{"policy":"jobs","subject":"s","ttl":"2h"}`, "ttl"},
		{`{"policy":"jobs","subject":"s","ttl":30}`, "ttl"},
		{`{"policy":"jobs","subject":"s","ttl":"soon"}`, "ttl"},
		{`{"policy":"jobs","subject":"s","cost":2}`, ""},
		{`not json`, "body"},
		{``, "body"},
	} {
		wantFieldProblem(t, a.do(live, "POST", "/v1/leases", tc.body), http.StatusBadRequest, tc.field)
	}
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/leases/not-an-id", ""), http.StatusBadRequest, "id")
	wantFieldProblem(t, a.do(live, "POST", "/v1/leases/ls_0123/renew", `{"ttl":"1m"}`), http.StatusBadRequest, "id")
	wantFieldProblem(t, a.do(live, "POST", "/v1/leases/ls_0123456789abcdef0123456789abcdef/renew", `{"ttl":"1d"}`), http.StatusBadRequest, "ttl")
	wantFieldProblem(t, a.do(live, "POST", "/v1/leases/ls_0123456789abcdef0123456789abcdef/renew", `{"for":"1m"}`), http.StatusBadRequest, "")
	// A well-formed id that names nothing.
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/leases/ls_0123456789abcdef0123456789abcdef", ""), http.StatusNotFound, "")
	// A concurrency policy is not checked.
	r := a.do(live, "POST", "/v1/check", `{"items":[{"policy":"jobs","subject":"s"}]}`)
	wantFieldProblem(t, r, http.StatusBadRequest, "items[0].policy")
	if !strings.Contains(r.json(t)["detail"].(string), "/v1/leases") {
		t.Errorf("check of a concurrency policy: %s, want it to point at /v1/leases", r.body)
	}
	// No key: 401 before anything is read.
	wantStatus(t, a.do("", "POST", "/v1/leases", `{"policy":"jobs","subject":"s"}`), http.StatusUnauthorized)
	wantStatus(t, a.do("", "DELETE", "/v1/leases/ls_0123456789abcdef0123456789abcdef", ""), http.StatusUnauthorized)
}

// TestResetRoute resets a subject's counter, for the key's kind, and
// writes it to the audit log with the key's id.
func TestResetRoute(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/login", `{"limit":1,"window":"1h"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/jobs", `{"limit":1,"algorithm":"concurrency"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/errors", `{"limit":1,"window":"1h","scope":"global"}`), http.StatusOK)
	check := func(key string) bool {
		t.Helper()
		r := a.do(key, "POST", "/v1/check", `{"items":[{"policy":"login","subject":"alice@example.com"}]}`)
		wantStatus(t, r, http.StatusOK)
		return r.json(t)["allowed"] == true
	}
	for _, k := range []string{live, test} {
		if !check(k) || check(k) {
			t.Fatal("the first check must allow, the second refuse")
		}
	}
	wantStatus(t, a.do(live, "DELETE", "/v1/policies/login/subjects/alice@example.com", ""), http.StatusNoContent)
	if !check(live) {
		t.Error("live check after a live reset: refused")
	}
	if check(test) {
		t.Error("test check after a live reset: allowed, the sandbox was reset too")
	}
	// A test key may reset, and resets the sandbox.
	wantStatus(t, a.do(test, "DELETE", "/v1/policies/login/subjects/alice@example.com", ""), http.StatusNoContent)
	if !check(test) || check(live) {
		t.Error("after a test key's reset: want the sandbox reset and the live counter not")
	}
	// A concurrency policy's leases of the subject go.
	r := a.do(live, "POST", "/v1/leases", `{"policy":"jobs","subject":"a/b"}`)
	id := r.json(t)["lease_id"].(string)
	wantStatus(t, a.do(live, "DELETE", "/v1/policies/jobs/subjects/a%2Fb", ""), http.StatusNoContent)
	wantStatus(t, a.do(live, "DELETE", "/v1/leases/"+id, ""), http.StatusNotFound)
	if r := a.do(live, "POST", "/v1/leases", `{"policy":"jobs","subject":"a/b"}`); r.json(t)["allowed"] != true {
		t.Errorf("lease after a reset: %s", r.body)
	}

	wantFieldProblem(t, a.do(live, "DELETE", "/v1/policies/nope/subjects/alice", ""), http.StatusNotFound, "")
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/policies/errors/subjects/alice", ""), http.StatusBadRequest, "subject")
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/policies/Bad/subjects/alice", ""), http.StatusBadRequest, "name")
	wantFieldProblem(t, a.do(live, "DELETE", "/v1/policies/login/subjects/"+strings.Repeat("s", 513), ""), http.StatusBadRequest, "subject")

	a.auditMu.Lock()
	defer a.auditMu.Unlock()
	if len(a.audits) != 3 {
		t.Fatalf("%d audit entries for 3 resets: %+v", len(a.audits), a.audits)
	}
	for i, e := range a.audits {
		d := e.detail
		if e.kind != "counter_reset" || d["key_id"] == "" || d["subject_key"] == "" || strings.Contains(d["subject_key"].(string), "alice") {
			t.Errorf("audit entry %d: %+v", i, e)
		}
	}
	if a.audits[0].detail["sandbox"] != false || a.audits[1].detail["sandbox"] != true || a.audits[0].detail["key_id"] == a.audits[1].detail["key_id"] {
		t.Errorf("audit entries of the live and the test key: %+v %+v", a.audits[0], a.audits[1])
	}
}

// TestResetRefusesWhatCheckRefuses: a subject a check refuses is refused by
// a reset and a lease too, with a 400 problem naming the field: NUL, bytes
// that are not UTF-8, a subject too long. The reset's subject is a path
// segment, escaped; a raw "/" would end it (and proxies merge "//" and
// resolve "..", turning it into another subject), so it is refused, naming
// the field, and "%2F" is the way to write it.
func TestResetRefusesWhatCheckRefuses(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/login", `{"limit":1,"window":"1h"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/jobs", `{"limit":1,"algorithm":"concurrency"}`), http.StatusOK)
	for _, tc := range []struct {
		name        string
		check       string // the subject in a JSON body, quoted
		reset       string // the subject as a path segment
		field, body string // the fields a check and a lease are refused by
	}{
		{"NUL", `"a\u0000b"`, "a%00b", "items[0].subject", "subject"},
		{"NUL alone", `"\u0000"`, "%00", "items[0].subject", "subject"},
		// Bytes that are not UTF-8 are found in the JSON text, before any
		// field is read from it: they are the body's fault.
		{"not UTF-8", "\"a\xffb\"", "a%FFb", "body", "body"},
		{"a lone continuation byte", "\"\x80\"", "%80", "body", "body"},
		// An escaped half of a UTF-16 pair is read as U+FFFD too; in a
		// path it can only be written as the bytes that are not UTF-8.
		{"an escaped lone surrogate", `"a\ud800"`, "a%ED%A0%80", "body", "body"},
		{"too long", `"` + strings.Repeat("s", 513) + `"`, strings.Repeat("s", 513), "items[0].subject", "subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantFieldProblem(t, a.do(live, "POST", "/v1/check", `{"items":[{"policy":"login","subject":`+tc.check+`}]}`), http.StatusBadRequest, tc.field)
			wantFieldProblem(t, a.do(live, "POST", "/v1/leases", `{"policy":"jobs","subject":`+tc.check+`}`), http.StatusBadRequest, tc.body)
			wantFieldProblem(t, a.do(live, "DELETE", "/v1/policies/login/subjects/"+tc.reset, ""), http.StatusBadRequest, "subject")
		})
	}
	wantStatus(t, a.do(live, "DELETE", "/v1/policies/login/subjects/a%2Fb", ""), http.StatusNoContent)
	for _, p := range []string{"a/b", "a/", "/a", "a/../b", "a%2Fb/c"} {
		// Not served through the document's check: no operation has such
		// a path, which is the point.
		req := httptest.NewRequest("DELETE", "/v1/policies/login/subjects/"+p, nil)
		req.Header.Set("Authorization", "Bearer "+live)
		rec := httptest.NewRecorder()
		a.e.ServeHTTP(rec, req)
		wantFieldProblem(t, answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}, http.StatusBadRequest, "subject")
	}
	a.auditMu.Lock()
	defer a.auditMu.Unlock()
	if len(a.audits) != 1 {
		t.Errorf("%d resets audited, want 1 (a%%2Fb): %+v", len(a.audits), a.audits)
	}
}
