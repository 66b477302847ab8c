package webhooks_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
)

// events returns the outbox's events of type typ, oldest first, by
// their data.
func (e *env) events(typ string) []map[string]any {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT data FROM webhook_events WHERE type = $1 ORDER BY created_at, id`, typ)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			e.t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		out = append(out, m)
	}
	return out
}

// TestSweepWritesEachDecidedEventOnce: four sweeps at once (four
// instances) write one allotment.threshold per percent crossed and one
// alert.resolved per alert whose subject went a whole day without
// refusals; a later sweep writes nothing more.
func TestSweepWritesEachDecidedEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tid, quiet := e.tenant(), e.tenant()
	now := time.Now().UTC()
	// 85,000 of the starter plan's 100,000 checks: 50 % and 80 % crossed.
	e.exec(`INSERT INTO usage_minutes (tenant_id, minute, live, checked, outcome, checks) VALUES
		($1, date_trunc('minute', $2::timestamptz), true, true, 'allowed', 80000),
		($1, date_trunc('minute', $2::timestamptz), true, true, 'policy', 5000),
		($1, date_trunc('minute', $2::timestamptz), false, true, 'allowed', 90000),
		($1, date_trunc('minute', $2::timestamptz), true, true, 'quota', 90000)`, tid, now)
	e.exec(`INSERT INTO usage_minutes (tenant_id, minute, live, checked, outcome, checks) VALUES
		($1, date_trunc('minute', $2::timestamptz), true, true, 'allowed', 10)`, quiet, now)
	// An alert three days ago with no refusal since: resolved, on the day
	// after it. One of yesterday: not yet, its next day (today) has not
	// ended.
	e.exec(`INSERT INTO alerts (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow) VALUES
		($1, 'login', 'old', current_date - 3, now() - interval '3 days', now() - interval '3 days', 12, 10, false),
		($1, 'login', 'new', current_date - 1, now() - interval '1 day', now() - interval '1 day', 12, 10, false)`, tid)

	store := pgstore.NewWebhooks(e.pool)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := store.Sweep(ctx, now, now.Add(-40*24*time.Hour)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n, err := store.Sweep(ctx, now, now.Add(-40*24*time.Hour)); err != nil || n != 0 {
		t.Errorf("a later sweep wrote %d events (%v), want 0", n, err)
	}
	th := e.events("allotment.threshold")
	if len(th) != 2 || th[0]["percent"] == th[1]["percent"] {
		t.Fatalf("allotment.threshold events %v, want 50 and 80 once each", th)
	}
	for _, ev := range th {
		if ev["checks_used"] != float64(85000) || ev["checks_allotment"] != float64(100000) {
			t.Errorf("allotment.threshold %v: want 85000 of 100000", ev)
		}
	}
	res := e.events("alert.resolved")
	if len(res) != 1 || res[0]["subject_digest"] != "old" {
		t.Fatalf("alert.resolved events %v, want the old alert's only", res)
	}
	if want := now.AddDate(0, 0, -2).Format("2006-01-02"); res[0]["resolved_on"] != want {
		t.Errorf("resolved_on %v, want %s", res[0]["resolved_on"], want)
	}
}

// TestPlanChangedInBillingTransaction: a billing change that moves the
// effective plan writes plan.changed with the reason in its transaction;
// one that does not move it writes nothing.
func TestPlanChangedInBillingTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tid := e.tenant()
	e.exec(`UPDATE tenants SET plan = 'pro' WHERE id = $1`, tid)
	bill := pgstore.NewBilling(e.pool)
	set := func(status string) {
		t.Helper()
		err := bill.InTx(ctx, func(ctx context.Context, tx billing.Tx) error {
			a, err := tx.Account(ctx, tid)
			if err != nil {
				return err
			}
			a.Status = status
			return tx.SaveAccount(ctx, a, time.Now())
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	set(tenant.StatusPastDue) // keeps pro
	set(tenant.StatusUnpaid)  // starter
	set(tenant.StatusActive)  // pro again
	got := e.events("plan.changed")
	if len(got) != 2 {
		t.Fatalf("plan.changed events %v, want 2", got)
	}
	if got[0]["reason"] != "payment_failed" || got[0]["effective_plan"] != "starter" || got[0]["previous_effective_plan"] != "pro" {
		t.Errorf("first plan.changed %v", got[0])
	}
	if got[1]["reason"] != "payment_recovered" || got[1]["effective_plan"] != "pro" {
		t.Errorf("second plan.changed %v", got[1])
	}
}
