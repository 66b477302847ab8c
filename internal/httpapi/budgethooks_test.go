package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/webhooks"
)

// TestBudgetThresholdWebhooks reserves and settles a budget through the
// real router and reads the outbox: budget.threshold at 50, 80 and 100 %
// of what the window counts (spent and reserved), once each, whatever
// reservations follow and whatever another instance reports of the same
// level; the sandbox's reservations send none; an endpoint that listens
// to budget.threshold gets a delivery of each.
func TestBudgetThresholdWebhooks(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, test := a.tenant(tenant.PlanPro)
	tid := a.tenantID(live)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":1000,"window":"720h","unit":"tokens","scope":"global"}`), http.StatusOK)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/plain", `{"limit":10,"window":"1h","scope":"global"}`), http.StatusOK)
	r := a.do(live, "POST", "/v1/webhooks", `{"url":"https://hooks.example.com/budgets","events":["budget.threshold"]}`)
	wantStatus(t, r, http.StatusCreated)
	endpoint, _ := r.json(t)["id"].(string)

	reserve := func(key, pol string, amount int) string {
		t.Helper()
		r := a.do(key, "POST", "/v1/reservations", fmt.Sprintf(`{"policy":%q,"amount":%d}`, pol, amount))
		wantStatus(t, r, http.StatusOK)
		id, _ := r.json(t)["reservation_id"].(string)
		return id
	}
	type event struct {
		Percent int64     `json:"percent"`
		Taken   int64     `json:"taken"`
		Limit   int64     `json:"limit"`
		Policy  string    `json:"policy"`
		Subject string    `json:"subject_digest"`
		Unit    string    `json:"unit"`
		Start   time.Time `json:"window_start"`
		End     time.Time `json:"window_end"`
	}
	events := func() []event {
		t.Helper()
		rows, err := a.pool.Query(context.Background(),
			`SELECT data FROM webhook_events WHERE tenant_id = $1 AND type = 'budget.threshold' ORDER BY (data->>'percent')::int`, tid)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []event
		for rows.Next() {
			var raw []byte
			var e event
			if err := rows.Scan(&raw); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	percents := func() string {
		var ps []int64
		for _, e := range events() {
			ps = append(ps, e.Percent)
		}
		return fmt.Sprint(ps)
	}

	first := reserve(live, "llm", 300)
	reserve(live, "plain", 9)  // No unit, no budget: no event.
	reserve(test, "llm", 1000) // The sandbox's budget: no event.
	if got := percents(); got != "[]" {
		t.Fatalf("at 30 %%: events %s, want none", got)
	}
	reserve(live, "llm", 250)
	if got := percents(); got != "[50]" {
		t.Fatalf("at 55 %%: events %s, want [50]", got)
	}
	reserve(live, "llm", 10)
	wantStatus(t, a.do(live, "POST", "/v1/reservations/"+first+"/settle", `{"used":600}`), http.StatusOK)
	if got := percents(); got != "[50 80]" {
		t.Fatalf("at 86 %% once settled: events %s, want [50 80]", got)
	}
	last := reserve(live, "llm", 140)
	got := events()
	if len(got) != 3 || got[2].Percent != 100 || got[2].Taken != 1000 || got[2].Limit != 1000 || got[2].Policy != "llm" || got[2].Subject != "*" || got[2].Unit != "tokens" {
		t.Fatalf("at 100 %%: events %+v, want 50, 80 and 100 (1000 of 1000)", got)
	}
	// Overdrawn past 100 %: nothing more.
	wantStatus(t, a.do(live, "POST", "/v1/reservations/"+last+"/settle", `{"used":200}`), http.StatusOK)
	if got := percents(); got != "[50 80 100]" {
		t.Fatalf("overdrawn: events %s, want [50 80 100] once each", got)
	}
	// Another instance, which has written nothing, reports the same level:
	// the store's key writes nothing more.
	other := testWebhooks(t, a.pool)
	start, end := got[0].Start, got[0].End
	if end.Sub(start) != 720*time.Hour || time.Since(start) < 0 || time.Until(end) < 0 {
		t.Errorf("window %s to %s: want the 720 h around now", start, end)
	}
	if err := other.BudgetLevel(context.Background(), webhooks.BudgetLevel{
		TenantID: tid, Policy: "llm", SubjectDigest: "*", Unit: "tokens", Limit: 1000, Taken: 1060, WindowStart: start, WindowEnd: end,
	}); err != nil {
		t.Fatal(err)
	}
	if got := percents(); got != "[50 80 100]" {
		t.Fatalf("after another instance: events %s, want [50 80 100] once each", got)
	}
	r = a.do(live, "GET", "/v1/webhooks/"+endpoint+"/deliveries", "")
	wantStatus(t, r, http.StatusOK)
	if ds, _ := r.json(t)["deliveries"].([]any); len(ds) != 3 {
		t.Errorf("deliveries: %s, want three budget.threshold", r.body)
	}
}
