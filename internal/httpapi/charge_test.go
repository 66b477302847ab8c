package httpapi

import (
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestChargeMode: a check of mode "charge" counts its cost past the limit
// (usage that happened already), answers 200 allowed with each item's
// counter as it left it (allowed false, remaining 0 when overdrawn), and
// the next consume is refused until the overdraft rolls out; a charge is
// not taken from the allotment, and a batch cannot hold one.
func TestChargeMode(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":10,"window":"1h","unit":"tokens"}`), http.StatusOK)
	check := func(body string) map[string]any {
		t.Helper()
		r := a.do(live, "POST", "/v1/check", body)
		wantStatus(t, r, http.StatusOK)
		return r.json(t)
	}
	item := func(m map[string]any) map[string]any { return m["items"].([]any)[0].(map[string]any) }

	if m := check(`{"items":[{"policy":"llm","subject":"a","cost":7}]}`); m["allowed"] != true || item(m)["remaining"] != 3.0 {
		t.Fatalf("consume 7 of 10: %v", m)
	}
	m := check(`{"mode":"charge","items":[{"policy":"llm","subject":"a","cost":5}]}`)
	if m["allowed"] != true || item(m)["allowed"] != false || item(m)["remaining"] != 0.0 || item(m)["limit"] != 10.0 {
		t.Fatalf("charge 5 with 3 left: %v", m)
	}
	if m := check(`{"items":[{"policy":"llm","subject":"a","cost":1}]}`); m["allowed"] != false {
		t.Fatalf("a consume on the overdrawn budget: %v", m)
	}
	// Within the limit, a charge is allowed item by item too.
	if m := check(`{"mode":"charge","items":[{"policy":"llm","subject":"b","cost":4}]}`); item(m)["allowed"] != true || item(m)["remaining"] != 6.0 {
		t.Fatalf("charge 4 of 10: %v", m)
	}
	// The usage report counts the two consumes, not the charges.
	r := a.do(live, http.MethodGet, "/v1/usage", "")
	if u := r.json(t); u["checks_used"] != 2.0 {
		t.Errorf("usage after 2 consumes and 2 charges: %s", r.body)
	}
	// A batch holds no charge; a bad mode names the three.
	r = a.do(live, "POST", "/v1/check/batch", `{"checks":[{"mode":"charge","items":[{"policy":"llm","subject":"a"}]}]}`)
	wantStatus(t, r, http.StatusBadRequest)
	wantFields(t, "batch", r, map[string]any{"field": "checks[0].mode"})
	r = a.do(live, "POST", "/v1/check", `{"mode":"later","items":[{"policy":"llm","subject":"a"}]}`)
	wantStatus(t, r, http.StatusBadRequest)
}
