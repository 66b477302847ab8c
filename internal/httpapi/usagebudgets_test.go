package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestUsageBudgets reserves and settles through the real router on the
// PostgreSQL counter store, and reads the budgets of /v1/usage: spent is
// what was settled, reserved what live reservations hold, left the rest;
// a policy without a unit is no budget, and a budget of scope subject
// shows for ?subject= alone, and a malformed subject is a 400. Every answer is checked against the document.
func TestUsageBudgets(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: dsn, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := newTenantAPIWith(t, dsn, apiOptions{store: store, storeName: "postgres"})
	live, test := a.tenant(tenant.PlanPro)
	for _, put := range []struct{ name, body string }{
		{"tokens", `{"limit":1000,"window":"720h","unit":"tokens","scope":"global"}`},
		{"cents", `{"limit":500,"window":"24h","unit":"cents"}`},
		{"plain", `{"limit":10,"window":"1m"}`},
	} {
		wantStatus(t, a.do(live, "PUT", "/v1/policies/"+put.name, put.body), http.StatusOK)
	}
	reserve := func(key, body string) string {
		t.Helper()
		r := a.do(key, "POST", "/v1/reservations", body)
		wantStatus(t, r, http.StatusOK)
		id, _ := r.json(t)["reservation_id"].(string)
		return id
	}
	settled := reserve(live, `{"policy":"tokens","amount":300}`)
	reserve(live, `{"policy":"tokens","amount":200}`)
	reserve(live, `{"policy":"cents","subject":"alice","amount":50}`)
	// The sandbox's reservations are its own: not in the live budgets.
	reserve(test, `{"policy":"tokens","amount":100}`)
	wantStatus(t, a.do(live, "POST", "/v1/reservations/"+settled+"/settle", `{"used":120}`), http.StatusOK)

	budgets := func(target string) []budgetAnswer {
		t.Helper()
		r := a.do(live, http.MethodGet, target, "")
		wantStatus(t, r, http.StatusOK)
		var u usageAnswer
		if err := json.Unmarshal(r.body, &u); err != nil {
			t.Fatal(err)
		}
		return u.Budgets
	}
	got := budgets("/v1/usage")
	if len(got) != 1 {
		t.Fatalf("budgets without a subject: %+v, want tokens alone", got)
	}
	if b := got[0]; b.Policy != "tokens" || b.Unit != "tokens" || b.Limit != 1000 || b.Spent != 120 || b.Reserved != 200 || b.Left != 680 || b.Subject != "" {
		t.Errorf("tokens: %+v, want 120 spent, 200 reserved, 680 left of 1000", b)
	}
	got = budgets("/v1/usage?subject=alice")
	if len(got) != 2 || got[1].Policy != "cents" && got[0].Policy != "cents" {
		t.Fatalf("budgets of alice: %+v, want tokens and cents", got)
	}
	for _, b := range got {
		if b.Policy == "cents" && (b.Subject != "alice" || b.Spent != 0 || b.Reserved != 50 || b.Left != 450 || b.Limit != 500) {
			t.Errorf("cents of alice: %+v, want 0 spent, 50 reserved, 450 left of 500", b)
		}
	}
	// A subject no check could name is the caller's fault.
	wantStatus(t, a.do(live, http.MethodGet, "/v1/usage?subject=%00", ""), http.StatusBadRequest)
	if got := budgets("/v1/usage?subject=bob"); len(got) != 2 {
		t.Errorf("budgets of bob: %+v, want two", got)
	} else {
		for _, b := range got {
			if b.Policy == "cents" && (b.Spent != 0 || b.Reserved != 0 || b.Left != 500) {
				t.Errorf("cents of bob: %+v, want untouched", b)
			}
		}
	}
}
