package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestDisabledTenantMatchesTheDocument: a valid key (live or test) of a
// tenant its operator disabled is answered 403 with the problem type
// tenant-disabled on every route that takes a key, each answer checked
// against openapi.json (serveChecked); an unknown key is still 401.
func TestDisabledTenantMatchesTheDocument(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro, `UPDATE tenants SET disabled_at = now(), disabled_reason = 'abuse' WHERE id = $1`)
	unknown, _, err := tenant.NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	const lease, res, hook, delivery = "lease_0123456789abcdef", "res_0123456789abcdef", "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"
	routes := []struct{ method, target, body string }{
		{"GET", "/v1/policies", ""},
		{"PUT", "/v1/policies/api", `{"limit":1,"window":"1h"}`},
		{"GET", "/v1/policies/api", ""},
		{"DELETE", "/v1/policies/api", ""},
		{"GET", "/v1/policies/api/overrides", ""},
		{"PUT", "/v1/policies/api/overrides/vip", `{"limit":5}`},
		{"GET", "/v1/policies/api/overrides/vip", ""},
		{"DELETE", "/v1/policies/api/overrides/vip", ""},
		{"DELETE", "/v1/policies/api/subjects/alice", ""},
		{"POST", "/v1/check", `{"items":[{"policy":"api","subject":"alice"}]}`},
		{"POST", "/v1/check/batch", `{"checks":[{"items":[{"policy":"api","subject":"alice"}]}]}`},
		{"GET", "/v1/forward-auth/api", ""},
		{"GET", "/v1/usage", ""},
		{"POST", "/v1/billing/checkout", `{"plan":"pro","success_url":"https://a.example/","cancel_url":"https://a.example/"}`},
		{"POST", "/v1/billing/portal", `{"return_url":"https://a.example/"}`},
		{"POST", "/v1/leases", `{"policy":"jobs","subject":"alice"}`},
		{"DELETE", "/v1/leases/" + lease, ""},
		{"POST", "/v1/leases/" + lease + "/renew", ""},
		{"POST", "/v1/reservations", `{"policy":"llm","amount":1}`},
		{"POST", "/v1/reservations/batch", `{"reservations":[{"policy":"llm","amount":1}]}`},
		{"POST", "/v1/reservations/settle", `{"settlements":[{"reservation_id":"` + res + `","used":1}]}`},
		{"DELETE", "/v1/reservations/" + res, ""},
		{"POST", "/v1/reservations/" + res + "/settle", `{"used":1}`},
		{"GET", "/v1/envoy/domains", ""},
		{"PUT", "/v1/envoy/domains/edge", ""},
		{"GET", "/v1/envoy/domains/edge", ""},
		{"DELETE", "/v1/envoy/domains/edge", ""},
		{"GET", "/v1/webhooks", ""},
		{"POST", "/v1/webhooks", `{"url":"https://hooks.example/t"}`},
		{"GET", "/v1/webhooks/" + hook, ""},
		{"DELETE", "/v1/webhooks/" + hook, ""},
		{"POST", "/v1/webhooks/" + hook + "/rotate", ""},
		{"POST", "/v1/webhooks/" + hook + "/test", ""},
		{"POST", "/v1/webhooks/" + hook + "/enable", ""},
		{"POST", "/v1/webhooks/" + hook + "/disable", ""},
		{"GET", "/v1/webhooks/" + hook + "/deliveries", ""},
		{"POST", "/v1/webhooks/" + hook + "/deliveries/" + delivery + "/resend", ""},
	}
	for _, r := range routes {
		for name, key := range map[string]string{"live": live, "test": test} {
			got := a.do(key, r.method, r.target, r.body)
			var p struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(got.body, &p)
			if got.status != http.StatusForbidden || p.Type != problemBase+"tenant-disabled" {
				t.Errorf("%s %s with the %s key: %d %s, want 403 tenant-disabled", r.method, r.target, name, got.status, got.body)
			}
		}
	}
	if got := a.do(unknown, "POST", "/v1/check", `{"items":[{"policy":"api","subject":"alice"}]}`); got.status != http.StatusUnauthorized {
		t.Errorf("an unknown key: %d %s, want 401", got.status, got.body)
	}
}
