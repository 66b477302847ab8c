package blackbox

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// queryInt runs a query of one integer on dsn.
func queryInt(t testing.TB, dsn, q string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestAlertFloodRowsAreBounded: a tenant refusing 3,200 new subjects of a
// policy with alert_after 1, through two instances, leaves at most the
// day's watch budget (1,000) of subjects with rows of their own, the day's
// alert budget (100) of alerts and one aggregate; every refusal is counted.
func TestAlertFloodRowsAreBounded(t *testing.T) {
	dsn := pgtest.New(t)
	ins := []*instance{start(t, dsn, patientStore), start(t, dsn, patientStore)}
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, ins[0], nt.LiveKey, "login", map[string]any{"limit": 1, "window": "1h", "alert_after": 1})
	const checks, items = 100, 32
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for c := w; c < checks; c += 4 {
				its := make([]map[string]any, items)
				for i := range its {
					// Each costs more than the limit: refused, and new.
					its[i] = map[string]any{"policy": "login", "subject": fmt.Sprintf("user-%d-%d", c, i), "cost": 2}
				}
				if r := check(t, ins[c%2], nt.LiveKey, its...); r.status != 200 {
					t.Errorf("check: %d %s", r.status, r.body)
					return
				}
			}
		})
	}
	wg.Wait()
	eventually.NoError(t, 20*time.Second, "every refusal counted", func() error {
		if n := queryInt(t, dsn, "SELECT coalesce(sum(refusals), 0)::bigint FROM refusal_hours WHERE tenant_id = $1", nt.TenantID); n != checks*items {
			return fmt.Errorf("refusals counted = %d, want %d", n, checks*items)
		}
		return nil
	})
	// Two hours at most: the flood may straddle one.
	if n := queryInt(t, dsn, "SELECT count(*) FROM refusal_hours WHERE tenant_id = $1", nt.TenantID); n > 1000+2 {
		t.Errorf("refusal_hours rows = %d, want at most 1,002", n)
	}
	for _, tc := range []struct {
		table string
		max   int64
	}{{"alert_overflow", 1000 - 100}, {"alerts", 100 + 1}} {
		eventually.NoError(t, 10*time.Second, tc.table+" bounded", func() error {
			if n := queryInt(t, dsn, "SELECT count(*) FROM "+tc.table+" WHERE tenant_id = $1", nt.TenantID); n > tc.max {
				return fmt.Errorf("%s rows = %d, want at most %d", tc.table, n, tc.max)
			}
			return nil
		})
	}
	// The alerts follow the counts: each instance raises them once its
	// counts have committed, so the last counts may be in while the
	// aggregate alert that shows them is not yet.
	eventually.NoError(t, 10*time.Second, "the aggregate alert", func() error {
		var usage struct {
			Alerts []struct {
				SubjectKey string `json:"subject_key"`
				Subjects   int64  `json:"subjects"`
				Unwatched  int64  `json:"unwatched_refusals"`
			} `json:"alerts"`
		}
		do(t, "GET", ins[1].base+"/v1/usage", nt.LiveKey, nil).json(t, &usage)
		var agg int
		for _, a := range usage.Alerts {
			if a.SubjectKey == "*" {
				agg++
				if a.Subjects != 900 || a.Unwatched != checks*items-1000 {
					return fmt.Errorf("aggregate alert %+v, want 900 subjects and %d unwatched refusals", a, checks*items-1000)
				}
			}
		}
		if len(usage.Alerts) != 100 || agg != 1 {
			return fmt.Errorf("usage lists %d alerts, %d aggregates; want 100 (its bound) with one aggregate", len(usage.Alerts), agg)
		}
		return nil
	})
}

// TestResetFloodRowsAreBounded: 400 resets of never-counted subjects from
// a test key and 150 from the live key, through two instances, write at most
// the audit budget (50) of counter_reset entries per minute for each key
// kind and one counter_reset_flood entry per minute for each that counts
// the rest: every reset is counted once.
func TestResetFloodRowsAreBounded(t *testing.T) {
	dsn := pgtest.New(t)
	ins := []*instance{start(t, dsn, patientStore), start(t, dsn, patientStore)}
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, ins[0], nt.LiveKey, "login", map[string]any{"limit": 5, "window": "1h"})
	const sandbox, live = 400, 150
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < sandbox+live; i += 4 {
				key := nt.TestKey
				if i >= sandbox {
					key = nt.LiveKey
				}
				u := ins[i%2].base + "/v1/policies/login/subjects/" + url.PathEscape(fmt.Sprint("nobody-", i))
				if c := do(t, "DELETE", u, key, nil); c.status != 204 {
					t.Errorf("reset: %d %s", c.status, c.body)
					return
				}
			}
		})
	}
	wg.Wait()
	start := time.Now()
	for _, tc := range []struct {
		sandbox bool
		resets  int64
	}{{true, sandbox}, {false, live}} {
		eventually.NoError(t, 20*time.Second, fmt.Sprintf("resets (sandbox %v) counted", tc.sandbox), func() error {
			entries := queryInt(t, dsn, `SELECT count(*) FROM audit WHERE tenant_id = $1 AND kind = 'counter_reset' AND (detail->>'sandbox')::boolean = $2`, nt.TenantID, tc.sandbox)
			floods := queryInt(t, dsn, `SELECT count(*) FROM audit WHERE tenant_id = $1 AND kind = 'counter_reset_flood' AND (detail->>'sandbox')::boolean = $2`, nt.TenantID, tc.sandbox)
			counted := queryInt(t, dsn, `SELECT coalesce(sum((detail->>'entries')::bigint), 0)::bigint FROM audit WHERE tenant_id = $1 AND kind = 'counter_reset_flood' AND (detail->>'sandbox')::boolean = $2`, nt.TenantID, tc.sandbox)
			// The flood may straddle a minute: two budgets at most.
			if entries > 2*50 || floods > 2 || entries+counted != tc.resets {
				return fmt.Errorf("%d counter_reset entries and %d flood entries counting %d; want at most 100 and 2, %d in all", entries, floods, counted, tc.resets)
			}
			return nil
		})
	}
	t.Logf("%d resets written and counted %v after the flood", sandbox+live, time.Since(start))
}
