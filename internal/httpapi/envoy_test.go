package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/tollgate/tollgate/internal/policy/envoyconf"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func init() {
	// kin-openapi reads application/yaml and application/x-yaml bodies;
	// text/yaml, which the routes take too, the same way.
	openapi3filter.RegisterBodyDecoder("text/yaml", openapi3filter.YamlBodyDecoder)
}

// sendFile sends body to the API with key as contentType ("" sends none),
// checks request and answer against openapi.json, and returns the answer.
func (a *tenantAPI) sendFile(key, method, target, contentType string, body []byte) answer {
	a.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(string(body)))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, req)
	resp := rec.Result()
	respBody, _ := io.ReadAll(resp.Body)
	checkOpenAPI(a.t, req, body, resp, respBody)
	return answer{status: resp.StatusCode, header: resp.Header, body: respBody}
}

// tenantID returns the id of the tenant of a live key.
func (a *tenantAPI) tenantID(key string) string {
	a.t.Helper()
	r := a.do(key, http.MethodGet, "/v1/usage", "")
	wantStatus(a.t.(*testing.T), r, http.StatusOK)
	id, _ := r.json(a.t.(*testing.T))["tenant_id"].(string)
	if id == "" {
		a.t.Fatalf("usage without tenant_id: %s", r.body)
	}
	return id
}

// edgeFile is README Example 1's kind of file for domain d, with comments
// and a CRLF, which a GET must answer as sent.
func edgeFile(d string) []byte {
	return []byte("# the edge proxy's limits\r\ndomain: " + d + `
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10   # per client address
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`)
}

// TestEnvoyDomainRoutes: a tenant uploads a file under a domain in each of
// the YAML media types, reads it back byte for byte, lists and deletes it;
// the Catalog of the instance that took the change serves it at once.
func TestEnvoyDomainRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	tid := a.tenantID(live)
	if _, err := a.envoy.For(ctx, tid); err != nil { // cached before the upload
		t.Fatal(err)
	}

	wantStatus(t, a.do(live, http.MethodGet, "/v1/envoy/domains", ""), http.StatusOK)
	if got := string(a.do(live, http.MethodGet, "/v1/envoy/domains", "").body); got != `{"domains":[]}`+"\n" {
		t.Errorf("an empty list: %s", got)
	}
	r := a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", edgeFile("edge"))
	wantStatus(t, r, http.StatusOK)
	var put struct {
		Domain    string    `json:"domain"`
		Rules     int       `json:"rules"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	if err := json.Unmarshal(r.body, &put); err != nil || put.Domain != "edge" || put.Rules != 2 || put.CreatedAt.IsZero() {
		t.Errorf("PUT answered %s (%v)", r.body, err)
	}
	ds, err := a.envoy.For(ctx, tid)
	if c, ok := ds.Lookup("edge"); err != nil || !ok || len(c.Rules) != 2 {
		t.Errorf("the instance's Catalog after the PUT: %v, %v", ok, err)
	}

	r = a.sendFile(live, http.MethodGet, "/v1/envoy/domains/edge", "", nil)
	wantStatus(t, r, http.StatusOK)
	if string(r.body) != string(edgeFile("edge")) || r.header.Get("Content-Type") != "application/yaml" {
		t.Errorf("GET answered %q as %q, want the file as uploaded, application/yaml", r.body, r.header.Get("Content-Type"))
	}

	// The other media types, a charset, and a domain that needs escaping.
	for _, tc := range []struct{ target, domain, contentType string }{
		{"/v1/envoy/domains/api", "api", "text/yaml"},
		{"/v1/envoy/domains/a%20b%3Fc", "a b?c", "application/x-yaml; charset=utf-8"},
	} {
		src := edgeFile(tc.domain)
		if tc.domain == "a b?c" {
			src = []byte("domain: \"a b?c\"\n")
		}
		wantStatus(t, a.sendFile(live, http.MethodPut, tc.target, tc.contentType, src), http.StatusOK)
		if got := a.sendFile(live, http.MethodGet, tc.target, "", nil); string(got.body) != string(src) {
			t.Errorf("GET %s: %q", tc.target, got.body)
		}
	}
	r = a.do(live, http.MethodGet, "/v1/envoy/domains", "")
	var list struct {
		Domains []struct {
			Domain string `json:"domain"`
			Rules  int    `json:"rules"`
		} `json:"domains"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || fmt.Sprint(list.Domains) != "[{a b?c 0} {api 2} {edge 2}]" {
		t.Errorf("list: %s (%v)", r.body, err)
	}

	// Replaced: created_at kept.
	r = a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", []byte("domain: edge\n"))
	wantStatus(t, r, http.StatusOK)
	var re struct {
		Rules     int       `json:"rules"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	if json.Unmarshal(r.body, &re); re.Rules != 0 || !re.CreatedAt.Equal(put.CreatedAt) || !re.UpdatedAt.After(put.UpdatedAt) {
		t.Errorf("replace answered %s, want created_at %v kept", r.body, put.CreatedAt)
	}

	wantStatus(t, a.sendFile(live, http.MethodDelete, "/v1/envoy/domains/edge", "", nil), http.StatusNoContent)
	ds, err = a.envoy.For(ctx, tid)
	if _, ok := ds.Lookup("edge"); err != nil || ok {
		t.Errorf("the instance's Catalog after the DELETE still serves edge (%v)", err)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		r := a.sendFile(live, m, "/v1/envoy/domains/edge", "", nil)
		wantStatus(t, r, http.StatusNotFound)
		if d := r.json(t)["detail"]; d != `domain "edge" not found` {
			t.Errorf("%s after delete: detail %v", m, d)
		}
	}
}

// TestEnvoyDomainRoutesRefuse: what a PUT may not store is answered with
// its reason before anything is stored: a file with an error at line N
// names line N, a domain that cannot be a path segment names the field, a
// body not sent as YAML is 415, one past 64 KiB 413, and the tenant's
// bounds (100 domains, 1,000 rules) 400.
func TestEnvoyDomainRoutesRefuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	tid := a.tenantID(live)

	bad := []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      unit: minute\n")
	r := a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", bad)
	wantStatus(t, r, http.StatusBadRequest)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Errors []struct {
			Line   int    `json:"line"`
			Reason string `json:"reason"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || r.header.Get("Content-Type") != "application/problem+json" ||
		p.Type != problemBase+"invalid-configuration" || p.Title != "Invalid configuration" ||
		!strings.HasPrefix(p.Detail, "line 7: ") || len(p.Errors) != 1 || p.Errors[0].Line != 7 || "line 7: "+p.Errors[0].Reason != p.Detail {
		t.Errorf("a file with an error at line 7: %s", r.body)
	}
	r = a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", edgeFile("api"))
	if wantStatus(t, r, http.StatusBadRequest); !strings.Contains(r.json(t)["detail"].(string), `"api" is not the domain "edge"`) {
		t.Errorf("a file of another domain: %s", r.body)
	}

	for _, target := range []string{"/v1/envoy/domains/a%2Fb", "/v1/envoy/domains/%2E%2E", "/v1/envoy/domains/caf%C3%A9"} {
		for _, m := range []string{http.MethodPut, http.MethodGet, http.MethodDelete} {
			r := a.sendFile(live, m, target, "application/yaml", edgeFile("x"))
			if wantStatus(t, r, http.StatusBadRequest); r.json(t)["field"] != "domain" {
				t.Errorf("%s %s: %s", m, target, r.body)
			}
		}
	}
	for _, ct := range []string{"", "application/json", "text/plain", "application/yaml-ish", "yaml"} {
		r := a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", ct, edgeFile("edge"))
		if wantStatus(t, r, http.StatusUnsupportedMediaType); !strings.Contains(string(r.body), "application/yaml") {
			t.Errorf("Content-Type %q: %s", ct, r.body)
		}
	}
	// 64 KiB is taken (a comment pads it), one byte more is not.
	pad := func(n int) []byte {
		src := []byte("domain: edge\n#")
		return append(append(src, strings.Repeat("x", n-len(src)-1)...), '\n')
	}
	wantStatus(t, a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", pad(envoyconf.MaxSource)), http.StatusOK)
	for _, n := range []int{envoyconf.MaxSource + 1, 10 * envoyconf.MaxSource} {
		r := a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", pad(n))
		wantStatus(t, r, http.StatusRequestEntityTooLarge)
	}

	// Bounds: 99 domains of one rule each beside edge, and one more.
	if _, err := a.pool.Exec(ctx, `INSERT INTO envoy_domains (tenant_id, domain, source, rules)
		SELECT $1, 'd' || i, 'domain: d' || i, 1 FROM generate_series(1, 99) AS i`, tid); err != nil {
		t.Fatal(err)
	}
	r = a.sendFile(live, http.MethodPut, "/v1/envoy/domains/d100", "application/yaml", []byte("domain: d100\n"))
	if wantStatus(t, r, http.StatusBadRequest); !strings.Contains(string(r.body), "at most 100 domains") {
		t.Errorf("the 101st domain: %s", r.body)
	}
	if _, err := a.pool.Exec(ctx, `UPDATE envoy_domains SET rules = 10 WHERE tenant_id = $1 AND domain <> 'edge'`, tid); err != nil {
		t.Fatal(err)
	}
	// 990 held by the others: edge may hold 10 rules, not 11.
	rules := func(n int) []byte {
		var b strings.Builder
		b.WriteString("domain: edge\ndescriptors:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: minute, requests_per_unit: 5}}\n", i)
		}
		return []byte(b.String())
	}
	wantStatus(t, a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", rules(10)), http.StatusOK)
	r = a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", rules(11))
	if wantStatus(t, r, http.StatusBadRequest); !strings.Contains(string(r.body), "at most 1000 rate_limit rules together: this file has 11 and the other domains 990") {
		t.Errorf("rules past 1,000 summed: %s", r.body)
	}
	if got := a.sendFile(live, http.MethodGet, "/v1/envoy/domains/edge", "", nil); string(got.body) != string(rules(10)) {
		t.Errorf("after the refusals edge holds %q", got.body)
	}
}

// TestEnvoyDomainRoutesKeepTenantsApart: another tenant neither lists,
// reads nor deletes a tenant's domain: to it the domain does not exist.
func TestEnvoyDomainRoutesKeepTenantsApart(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	acme, _ := a.tenant(tenant.PlanPro)
	other, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.sendFile(acme, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", edgeFile("edge")), http.StatusOK)
	if got := string(a.do(other, http.MethodGet, "/v1/envoy/domains", "").body); got != `{"domains":[]}`+"\n" {
		t.Errorf("another tenant's list: %s", got)
	}
	wantStatus(t, a.sendFile(other, http.MethodGet, "/v1/envoy/domains/edge", "", nil), http.StatusNotFound)
	wantStatus(t, a.sendFile(other, http.MethodDelete, "/v1/envoy/domains/edge", "", nil), http.StatusNotFound)
	// Its own edge is its own.
	wantStatus(t, a.sendFile(other, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", []byte("domain: edge\n")), http.StatusOK)
	if got := a.sendFile(acme, http.MethodGet, "/v1/envoy/domains/edge", "", nil); string(got.body) != string(edgeFile("edge")) {
		t.Errorf("acme's edge after the other tenant's: %q", got.body)
	}
}

// TestEnvoyTestKeysAreReadOnly: as for policies, a test key reads the
// tenant's files but changes none: 403 before its body is looked at.
func TestEnvoyTestKeysAreReadOnly(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	wantStatus(t, a.sendFile(live, http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", edgeFile("edge")), http.StatusOK)
	wantStatus(t, a.do(test, http.MethodGet, "/v1/envoy/domains", ""), http.StatusOK)
	if r := a.sendFile(test, http.MethodGet, "/v1/envoy/domains/edge", "", nil); r.status != http.StatusOK || string(r.body) != string(edgeFile("edge")) {
		t.Errorf("a test key's GET: %d %q", r.status, r.body)
	}
	for _, w := range []struct {
		method, target, contentType string
		body                        []byte
	}{
		{http.MethodPut, "/v1/envoy/domains/edge", "application/yaml", []byte("domain: edge\n")},
		{http.MethodPut, "/v1/envoy/domains/new", "text/plain", []byte("domain: new\n")},
		{http.MethodDelete, "/v1/envoy/domains/edge", "", nil},
	} {
		r := a.sendFile(test, w.method, w.target, w.contentType, w.body)
		wantStatus(t, r, http.StatusForbidden)
		if got := r.json(t)["type"]; got != problemBase+"test-key-read-only" {
			t.Errorf("%s %s: problem type %v", w.method, w.target, got)
		}
	}
	if r := a.sendFile(live, http.MethodGet, "/v1/envoy/domains/edge", "", nil); string(r.body) != string(edgeFile("edge")) {
		t.Errorf("the live file after the test key's writes: %q", r.body)
	}
	wantStatus(t, a.sendFile(live, http.MethodGet, "/v1/envoy/domains/new", "", nil), http.StatusNotFound)
}
