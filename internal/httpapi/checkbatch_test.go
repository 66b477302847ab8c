package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestCheckBatchAnswersEachCheckAsCheckWould sends the same checks to two
// tenants alike, one as a batch and one by one to /v1/check, and holds
// every result of the batch to the body /v1/check answered, against the
// OpenAPI document (serveChecked): allowed, refused by a policy, refused
// by the quota (a problem in its place, twice: the second written as the
// first), a peek.
func TestCheckBatchAnswersEachCheckAsCheckWould(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	quota := `UPDATE tenants SET quota_per_minute = 5 WHERE id = $1`
	batched, _ := a.tenant(tenant.PlanPro, quota)
	alone, _ := a.tenant(tenant.PlanPro, quota)
	for _, k := range []string{batched, alone} {
		wantStatus(t, a.do(k, http.MethodPut, "/v1/policies/login", `{"limit":2,"window":"1h"}`), http.StatusOK)
		wantStatus(t, a.do(k, http.MethodPut, "/v1/policies/dark", `{"limit":1,"window":"1h","shadow":true}`), http.StatusOK)
	}
	checks := []string{
		`{"items":[{"policy":"login","subject":"ann"}]}`,
		`{"items":[{"policy":"login","subject":"ann"},{"policy":"dark","subject":"x"}]}`,
		`{"mode":"peek","items":[{"policy":"login","subject":"ann"}]}`,
		`{"items":[{"policy":"login","subject":"ann","cost":1}]}`,
		`{"items":[{"policy":"login","subject":"bob"}]}`,
		`{"items":[{"policy":"login","subject":"cy"}]}`,
		`{"items":[{"policy":"login","subject":"dee"}]}`,
	}
	r := a.do(batched, http.MethodPost, "/v1/check/batch", `{"checks":[`+strings.Join(checks, ",")+`]}`)
	wantStatus(t, r, http.StatusOK)
	var got struct{ Results []json.RawMessage }
	if err := json.Unmarshal(r.body, &got); err != nil || len(got.Results) != len(checks) {
		t.Fatalf("%d results for %d checks (%v): %s", len(got.Results), len(checks), err, r.body)
	}
	for i, c := range checks {
		want := a.do(alone, http.MethodPost, "/v1/check", c)
		if !sameJSON(t, got.Results[i], want.body) {
			t.Errorf("check %d: batch answered %s, /v1/check %d %s", i, got.Results[i], want.status, want.body)
		}
	}
	for _, i := range []int{5, 6} {
		if !strings.Contains(string(got.Results[i]), `"status":429`) || !strings.Contains(string(got.Results[i]), `"layer":"quota"`) {
			t.Errorf("check %d, past the quota of 5: %s", i, got.Results[i])
		}
	}
	if string(got.Results[5]) != string(got.Results[6]) {
		t.Errorf("two checks refused alike, answered %s and %s", got.Results[5], got.Results[6])
	}
}

// sameJSON reports whether two JSON values are equal but for the waits,
// which the two calls measure a moment apart: a refusal's wait and detail,
// and of each item's retry_after_ms only whether it is zero.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y map[string]any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		t.Fatalf("not JSON objects: %s, %s", a, b)
	}
	for _, m := range []map[string]any{x, y} {
		delete(m, "detail")
		delete(m, "retry_after_seconds")
		items, _ := m["items"].([]any)
		for _, it := range items {
			if it, ok := it.(map[string]any); ok {
				it["retry_after_ms"] = it["retry_after_ms"] != float64(0)
			}
		}
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// TestCheckBatchNamesTheFault: a batch that cannot be decided whole is a
// 400 naming the check and its field.
func TestCheckBatchNamesTheFault(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/login", `{"limit":2,"window":"1h"}`), http.StatusOK)
	ok := `{"items":[{"policy":"login","subject":"a"}]}`
	many := func(n int, check string) string {
		return `{"checks":[` + strings.TrimSuffix(strings.Repeat(check+",", n), ",") + `]}`
	}
	big := `{"items":[` + strings.TrimSuffix(strings.Repeat(`{"policy":"login","subject":"a"},`, 30), ",") + `]}`
	for _, tc := range []struct{ body, field string }{
		{`{"checks":[` + ok + `,{"items":[{"policy":"nope","subject":"a"}]}]}`, "checks[1].items[0].policy"},
		{`{"checks":[` + ok + `,` + ok + `,{"items":[{"policy":"login","subject":"a","cost":0}]}]}`, "checks[2].items[0].cost"},
		{`{"checks":[{"mode":"count","items":[]}]}`, "checks[0].mode"},
		{`{"checks":[{"items":[]}]}`, "checks[0].items"},
		{`{"checks":[{"items":[{"policy":"login","subject":"a","extra":1}]}]}`, "checks[0]"},
		{`{"checks":[]}`, "checks"},
		{`{}`, "checks"},
		{many(1001, ok), "checks"},
		{many(134, big), "checks[133].items"},
	} {
		r := a.do(key, http.MethodPost, "/v1/check/batch", tc.body)
		wantStatus(t, r, http.StatusBadRequest)
		if f := r.json(t)["field"]; f != tc.field {
			t.Errorf("%.80s…: field %v, want %s", tc.body, f, tc.field)
		}
	}
	wantStatus(t, a.do("tg_live_nobody", http.MethodPost, "/v1/check/batch", many(2, ok)), http.StatusUnauthorized)
}
