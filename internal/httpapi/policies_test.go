package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// policyAPI is the policy routes on a real Echo router over a real store on a
// database of the test's own. Its stand-in for the auth middleware takes the
// bearer token as the tenant id.
type policyAPI struct {
	t       *testing.T
	e       *echo.Echo
	pool    *pgxpool.Pool
	catalog *policy.Catalog
	logs    *bytes.Buffer
}

func newPolicyAPI(t *testing.T) *policyAPI {
	t.Helper()
	pool := pgtest.Pool(t)
	store := pgstore.NewPolicies(pool)
	catalog := policy.NewCatalog(store, policy.CatalogConfig{})
	a := &policyAPI{t: t, pool: pool, catalog: catalog}
	a.e, a.logs = newTestEcho(policy.Service{Store: store, Catalog: catalog})
	return a
}

// newTestEcho builds an Echo as New does, with the policy and document
// routes, the auth stand-in, and a logger writing to the returned buffer.
func newTestEcho(svc PolicyService) (*echo.Echo, *bytes.Buffer) {
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(log)
	e.Use(recoverBugs(log))
	registerOpenAPI(e)
	v1 := e.Group("/v1", func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if token, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer "); ok {
				setTenantID(c, token)
			}
			return next(c)
		}
	})
	registerPolicies(v1, svc)
	return e, logs
}

func (a *policyAPI) tenant() string {
	a.t.Helper()
	return pgtest.Tenant(a.t, a.pool, tenant.PlanStarter)
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (r answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", r.status, err, r.body)
	}
	return m
}

// serveChecked sends a request to e as tenant (the bearer token, when not
// empty), checks request and answer against the OpenAPI document with
// checkOpenAPI, and returns the answer.
func serveChecked(t testing.TB, e *echo.Echo, tenant, method, target, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tenant != "" {
		req.Header.Set("Authorization", "Bearer "+tenant)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	resp := rec.Result()
	respBody, _ := io.ReadAll(resp.Body)
	checkOpenAPI(t, req, []byte(body), resp, respBody)
	return answer{status: resp.StatusCode, header: resp.Header, body: respBody}
}

func (a *policyAPI) do(tenant, method, target, body string) answer {
	a.t.Helper()
	return serveChecked(a.t, a.e, tenant, method, target, body)
}

func wantStatus(t *testing.T, r answer, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
}

func TestPolicyRoutes(t *testing.T) {
	t.Parallel()
	a := newPolicyAPI(t)
	tid := a.tenant()

	r := a.do(tid, http.MethodGet, "/v1/policies", "")
	wantStatus(t, r, http.StatusOK)
	if string(r.body) != "{\"policies\":[]}\n" {
		t.Errorf("empty list: %s", r.body)
	}

	r = a.do(tid, http.MethodPut, "/v1/policies/sign-in-ip", `{"limit":10,"window":"60s"}`)
	wantStatus(t, r, http.StatusOK)
	p := r.json(t)
	for k, want := range map[string]any{"name": "sign-in-ip", "limit": 10.0, "window": "1m", "algorithm": "fixed_window",
		"scope": "subject", "fail_mode": "open", "shadow": false, "alert_after": 0.0} {
		if p[k] != want {
			t.Errorf("put answered %s = %v, want %v", k, p[k], want)
		}
	}
	created := p["created_at"]

	// What was read may be sent back, changed.
	p["limit"], p["algorithm"] = 20, "token_bucket"
	back, _ := json.Marshal(p)
	r = a.do(tid, http.MethodPut, "/v1/policies/sign-in-ip", string(back))
	wantStatus(t, r, http.StatusOK)
	if p := r.json(t); p["limit"] != 20.0 || p["algorithm"] != "token_bucket" || p["created_at"] != created {
		t.Errorf("replace answered %s", r.body)
	}
	r = a.do(tid, http.MethodGet, "/v1/policies/sign-in-ip", "")
	wantStatus(t, r, http.StatusOK)
	if p := r.json(t); p["limit"] != 20.0 {
		t.Errorf("get answered %s", r.body)
	}
	wantStatus(t, a.do(tid, http.MethodPut, "/v1/policies/errors", `{"limit":100,"window":"1m","scope":"global","fail_mode":"closed"}`), http.StatusOK)
	r = a.do(tid, http.MethodGet, "/v1/policies", "")
	wantStatus(t, r, http.StatusOK)
	var list struct{ Policies []struct{ Name string } }
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Policies) != 2 ||
		list.Policies[0].Name != "errors" || list.Policies[1].Name != "sign-in-ip" {
		t.Errorf("list answered %s", r.body)
	}

	// Overrides, with patterns that need escaping in a path.
	overrides := "/v1/policies/sign-in-ip/overrides/"
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	for _, o := range []struct{ pattern, body string }{
		{"203.0.113.*", `{"limit":50}`},
		{"user/42", `{"limit":1,"expires_at":"` + exp + `"}`},
		{"100%*", `{"limit":2,"expires_at":null}`},
		{"ünï *", `{"limit":3}`},
		{"50%", `{"limit":4}`}, // a path Go need not escape differently: no RawPath
	} {
		r = a.do(tid, http.MethodPut, overrides+url.PathEscape(o.pattern), o.body)
		wantStatus(t, r, http.StatusOK)
		if got := r.json(t); got["pattern"] != o.pattern {
			t.Errorf("put override %q answered %s", o.pattern, r.body)
		}
	}
	r = a.do(tid, http.MethodGet, overrides+url.PathEscape("user/42"), "")
	wantStatus(t, r, http.StatusOK)
	if o := r.json(t); o["limit"] != 1.0 || o["expires_at"] != exp {
		t.Errorf("get override answered %s, want expires_at %s", r.body, exp)
	}
	r = a.do(tid, http.MethodGet, "/v1/policies/sign-in-ip/overrides", "")
	wantStatus(t, r, http.StatusOK)
	var ol struct{ Overrides []policy.Override }
	if err := json.Unmarshal(r.body, &ol); err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, o := range ol.Overrides {
		pats = append(pats, o.Pattern)
	}
	if strings.Join(pats, " | ") != "100%* | 203.0.113.* | 50% | user/42 | ünï *" {
		t.Errorf("list overrides: %q", pats)
	}

	// The instance that took the change applies it to the next check.
	set, err := a.catalog.For(context.Background(), tid)
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := set.Lookup("sign-in-ip")
	if got := set.LimitFor(pol, "203.0.113.9", time.Now()); got != 50 {
		t.Errorf("LimitFor after the put: %d, want 50", got)
	}
	wantStatus(t, a.do(tid, http.MethodDelete, overrides+url.PathEscape("203.0.113.*"), ""), http.StatusNoContent)
	set, _ = a.catalog.For(context.Background(), tid)
	if got := set.LimitFor(pol, "203.0.113.9", time.Now()); got != 20 {
		t.Errorf("LimitFor after the delete: %d, want the policy's 20", got)
	}

	r = a.do(tid, http.MethodGet, overrides+url.PathEscape("203.0.113.*"), "")
	wantStatus(t, r, http.StatusNotFound)
	if d := r.json(t)["detail"]; d != `override "203.0.113.*" of policy "sign-in-ip" not found` {
		t.Errorf("404 detail %v", d)
	}
	wantStatus(t, a.do(tid, http.MethodDelete, "/v1/policies/sign-in-ip", ""), http.StatusNoContent)
	r = a.do(tid, http.MethodGet, "/v1/policies/sign-in-ip", "")
	wantStatus(t, r, http.StatusNotFound)
	if pr := r.json(t); pr["type"] != "https://tollgate.dev/problems/not-found" || pr["detail"] != `policy "sign-in-ip" not found` {
		t.Errorf("404 answered %s", r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("404 content type %q", ct)
	}
	wantStatus(t, a.do(tid, http.MethodGet, "/v1/policies/sign-in-ip/overrides", ""), http.StatusNotFound)
	wantStatus(t, a.do(tid, http.MethodDelete, "/v1/policies/sign-in-ip", ""), http.StatusNotFound)
}

func TestPolicyRoutesKeepTenantsApart(t *testing.T) {
	t.Parallel()
	a := newPolicyAPI(t)
	mine, theirs := a.tenant(), a.tenant()
	wantStatus(t, a.do(mine, http.MethodPut, "/v1/policies/p", `{"limit":1,"window":"1s"}`), http.StatusOK)
	wantStatus(t, a.do(mine, http.MethodPut, "/v1/policies/p/overrides/x", `{"limit":2}`), http.StatusOK)
	wantStatus(t, a.do(theirs, http.MethodGet, "/v1/policies/p", ""), http.StatusNotFound)
	wantStatus(t, a.do(theirs, http.MethodGet, "/v1/policies/p/overrides/x", ""), http.StatusNotFound)
	wantStatus(t, a.do(theirs, http.MethodPut, "/v1/policies/p/overrides/x", `{"limit":3}`), http.StatusNotFound)
	wantStatus(t, a.do(theirs, http.MethodDelete, "/v1/policies/p", ""), http.StatusNotFound)
	if r := a.do(theirs, http.MethodGet, "/v1/policies", ""); string(r.body) != "{\"policies\":[]}\n" {
		t.Errorf("their list: %s", r.body)
	}
	wantStatus(t, a.do(mine, http.MethodGet, "/v1/policies/p/overrides/x", ""), http.StatusOK)
}

func TestPolicyRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	a := newPolicyAPI(t)
	tid := a.tenant()
	wantStatus(t, a.do(tid, http.MethodPut, "/v1/policies/g", `{"limit":1,"window":"1m","scope":"global"}`), http.StatusOK)
	wantStatus(t, a.do(tid, http.MethodPut, "/v1/policies/p", `{"limit":1,"window":"1m"}`), http.StatusOK)
	tests := []struct {
		name, method, target, body string
		field, detail              string // detail: a substring
	}{
		{"bad JSON", "PUT", "/v1/policies/p", `{"limit":`, "", "not valid JSON"},
		{"not an object", "PUT", "/v1/policies/p", `[]`, "", "JSON object"},
		{"empty body", "PUT", "/v1/policies/p", ``, "", "JSON object"},
		{"unknown field", "PUT", "/v1/policies/p", `{"limit":1,"window":"1m","burst":2}`, "burst", "unknown field"},
		{"limit", "PUT", "/v1/policies/p", `{"limit":0,"window":"1m"}`, "limit", "from 1 to 1000000000"},
		{"window", "PUT", "/v1/policies/p", `{"limit":1,"window":"1y"}`, "window", "month"},
		{"algorithm", "PUT", "/v1/policies/p", `{"limit":1,"window":"1m","algorithm":"leaky"}`, "algorithm", "token_bucket"},
		{"month", "PUT", "/v1/policies/p", `{"limit":1,"window":"month","algorithm":"token_bucket"}`, "window", "fixed_window"},
		{"name in path", "PUT", "/v1/policies/Sign%20In", `{"limit":1,"window":"1m"}`, "name", "a-z"},
		{"name in body", "PUT", "/v1/policies/p", `{"name":"q","limit":1,"window":"1m"}`, "name", "must match"},
		{"too large", "PUT", "/v1/policies/p", `{"limit":1,"window":"1m","x":"` + strings.Repeat("a", policy.MaxBody) + `"}`, "", "at most 16384 bytes"},
		{"name on get", "GET", "/v1/policies/-x", "", "name", "starting with a letter or digit"},
		{"override limit", "PUT", "/v1/policies/p/overrides/a", `{"limit":"5"}`, "limit", "integer"},
		{"override expiry", "PUT", "/v1/policies/p/overrides/a", `{"limit":5,"expires_at":"2001-01-01T00:00:00Z"}`, "expires_at", "in the future"},
		{"override expiry format", "PUT", "/v1/policies/p/overrides/a", `{"limit":5,"expires_at":"soon"}`, "expires_at", "RFC 3339"},
		{"control character", "PUT", "/v1/policies/p/overrides/a%0Ab", `{"limit":5}`, "pattern", "without control"},
		{"double star", "GET", "/v1/policies/p/overrides/a**", "", "pattern", `write one "*"`},
		{"global policy", "PUT", "/v1/policies/g/overrides/a*", `{"limit":5}`, "pattern", `scope "global"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := serveChecked(t, a.e, tid, tt.method, tt.target, tt.body)
			wantStatus(t, r, http.StatusBadRequest)
			p := r.json(t)
			if p["type"] != "https://tollgate.dev/problems/invalid-request" || p["title"] != "Invalid request" || p["status"] != 400.0 {
				t.Errorf("problem %s", r.body)
			}
			if f, _ := p["field"].(string); f != tt.field {
				t.Errorf("field %q, want %q", f, tt.field)
			}
			if d, _ := p["detail"].(string); !strings.Contains(d, tt.detail) {
				t.Errorf("detail %q, want it to contain %q", d, tt.detail)
			}
		})
	}
}

// failingService fails every call the way a dead database would.
type failingService struct{ PolicyService }

func (failingService) ListPolicies(context.Context, string) ([]policy.Policy, error) {
	return nil, errors.New("dial tcp 10.0.0.5:5432: password authentication failed for user tollgate")
}

func TestPolicyRoutesHideInternalErrors(t *testing.T) {
	t.Parallel()
	e, logs := newTestEcho(failingService{})
	r := serveChecked(t, e, "t", http.MethodGet, "/v1/policies", "")
	wantStatus(t, r, http.StatusInternalServerError)
	want := `{"type":"https://tollgate.dev/problems/internal-error","title":"Internal error","status":500}`
	if string(r.body) != want {
		t.Errorf("500 body %s, want %s", r.body, want)
	}
	if !strings.Contains(logs.String(), "password authentication failed") || !strings.Contains(logs.String(), "/v1/policies") {
		t.Errorf("the cause was not logged: %s", logs)
	}
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	t.Parallel()
	e, _ := newTestEcho(failingService{})
	r := serveChecked(t, e, "", http.MethodGet, "/v1/openapi.json", "")
	wantStatus(t, r, http.StatusOK)
	if !bytes.Equal(r.body, openAPIDocument) {
		t.Error("served document differs from the embedded one")
	}
}

// TestOpenAPIDocumentNamesItsLicense: the document served says what the
// repository's LICENSE is, the Apache License 2.0 (an OpenAPI 3.0 license
// object: a name and the licence's URL).
func TestOpenAPIDocumentNamesItsLicense(t *testing.T) {
	t.Parallel()
	e, _ := newTestEcho(failingService{})
	r := serveChecked(t, e, "", http.MethodGet, "/v1/openapi.json", "")
	wantStatus(t, r, http.StatusOK)
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			License *struct {
				Name, URL, Identifier string
			} `json:"license"`
		} `json:"info"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	want := struct{ Name, URL, Identifier string }{"Apache 2.0", "https://www.apache.org/licenses/LICENSE-2.0.html", ""}
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		// 3.1 names the licence by its SPDX identifier.
		want.URL, want.Identifier = "", "Apache-2.0"
	}
	if l := doc.Info.License; l == nil || *l != want {
		t.Errorf("info.license %+v, want %+v", l, want)
	}
}

// TestOpenAPIDocumentsEveryRoute fails when a /v1 route New registers is
// missing from the document.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	_, router := openAPIRouter(t)
	for _, rt := range newTenantAPI(t, pgtest.New(t), nil).e.Routes() {
		if !strings.HasPrefix(rt.Path, "/v1/") || strings.HasSuffix(rt.Path, "*") || rt.Method == echo.RouteNotFound {
			// A group's catch-all, which answers 404.
			continue
		}
		if rt.Path == "/v1/forward-auth/:policy" && rt.Method != http.MethodGet {
			// Any method is answered as GET (proxies may forward the
			// original request's), which the document says of its GET.
			continue
		}
		segs := strings.Split(rt.Path, "/")
		for i, s := range segs {
			if strings.HasPrefix(s, ":") {
				segs[i] = "x"
			}
		}
		req := httptest.NewRequest(rt.Method, strings.Join(segs, "/"), nil)
		if _, _, err := router.FindRoute(req); err != nil {
			t.Errorf("%s %s is not in openapi.json: %v", rt.Method, rt.Path, err)
		}
	}
}

// TestTestKeysAreReadOnly: a test key reads the tenant's policies and
// overrides but changes nothing: every write and every billing call is a
// 403 problem naming the reason, and what the live key stored is intact.
func TestTestKeysAreReadOnly(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/login", `{"limit":5,"window":"1m"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/login/overrides/vip", `{"limit":50}`), http.StatusOK)

	wantStatus(t, a.do(test, "GET", "/v1/policies", ""), http.StatusOK)
	wantStatus(t, a.do(test, "GET", "/v1/policies/login", ""), http.StatusOK)
	wantStatus(t, a.do(test, "GET", "/v1/policies/login/overrides", ""), http.StatusOK)
	for _, w := range []struct{ method, target, body string }{
		{"PUT", "/v1/policies/login", `{"limit":1000000,"window":"1m"}`},
		{"PUT", "/v1/policies/new", `{"limit":1,"window":"1m"}`},
		{"DELETE", "/v1/policies/login", ""},
		{"PUT", "/v1/policies/login/overrides/vip", `{"limit":1}`},
		{"DELETE", "/v1/policies/login/overrides/vip", ""},
		{"POST", "/v1/billing/checkout", `{"plan":"pro","success_url":"https://a.example/ok","cancel_url":"https://a.example/no"}`},
		{"POST", "/v1/billing/portal", `{"return_url":"https://a.example/"}`},
	} {
		r := a.do(test, w.method, w.target, w.body)
		wantStatus(t, r, http.StatusForbidden)
		if got := r.json(t)["type"]; got != "https://tollgate.dev/problems/test-key-read-only" {
			t.Errorf("%s %s: problem type %v", w.method, w.target, got)
		}
	}
	got := a.do(live, "GET", "/v1/policies/login", "").json(t)
	if got["limit"] != float64(5) {
		t.Errorf("the live policy after the test key's writes: %v", got)
	}
	wantStatus(t, a.do(live, "GET", "/v1/policies/login/overrides/vip", ""), http.StatusOK)
	wantStatus(t, a.do(live, "GET", "/v1/policies/new", ""), http.StatusNotFound)
}
