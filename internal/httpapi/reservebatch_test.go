package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	rediscounter "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// batchStores runs test on the in-memory counter store, the PostgreSQL
// one and the Redis one, each on a database (and key prefix) of its own.
func batchStores(t *testing.T, test func(t *testing.T, a *tenantAPI)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		test(t, newTenantAPI(t, pgtest.New(t), nil))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.New(t)
		store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: dsn, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		test(t, newTenantAPIWith(t, dsn, apiOptions{store: store, storeName: "postgres"}))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		u, prefix := redistest.New(t)
		store, err := rediscounter.New(rediscounter.Config{URL: u, Prefix: prefix, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		test(t, newTenantAPIWith(t, pgtest.New(t), apiOptions{store: store, storeName: "redis"}))
	})
}

// results reads a batch's 200 answer: one JSON object per entry.
func results(t *testing.T, r answer, n int) []map[string]any {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	var b struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || len(b.Results) != n {
		t.Fatalf("batch answer with %d results, want %d (%v): %s", len(b.Results), n, err, r.body)
	}
	return b.Results
}

var reservationIDForm = regexp.MustCompile(`^rs_[0-9a-f]{32}$`)

// sameAsAlone fails unless got, a batch's result, is the body want (a
// single route's answer, its status wantStatus) would be: the same
// members with the same values, but for what names or times a reservation
// of its own (its id, its expiry and window's end, of the same form).
func sameAsAlone(t *testing.T, what string, got map[string]any, want answer) {
	t.Helper()
	w := want.json(t)
	if want.status != http.StatusOK && got["status"] != float64(want.status) {
		t.Errorf("%s: status %v, want %d alone: %v", what, got["status"], want.status, got)
	}
	if len(got) != len(w) {
		t.Errorf("%s: %v, want the members of %v", what, got, w)
	}
	for k, wv := range w {
		gv, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: no %s, alone %v", what, k, wv)
		case k == "reservation_id":
			if !reservationIDForm.MatchString(fmt.Sprint(gv)) {
				t.Errorf("%s: reservation_id %v", what, gv)
			}
		case k == "expires_at" || k == "reset_at":
			if _, err := time.Parse(time.RFC3339, fmt.Sprint(gv)); err != nil {
				t.Errorf("%s: %s %v", what, k, gv)
			}
		case k == "retry_after_ms":
			// Read off the clock a moment apart: within a second.
			g, w := gv.(float64), wv.(float64)
			if (g == 0) != (w == 0) || g-w > 1000 || w-g > 1000 {
				t.Errorf("%s: retry_after_ms %v, alone %v", what, g, w)
			}
		case gv != wv:
			t.Errorf("%s: %s = %v, alone %v", what, k, gv, wv)
		}
	}
}

// TestReservationBatchAnswersAsAlone: each entry of a batch is answered
// with the body its own POST /v1/reservations draws from a twin tenant:
// allowed, refused by the budget, an unknown policy, a policy of leases,
// a subject missing; and, on a tenant allowed 3 requests a minute per
// address, each entry counts as one request: 3 of 5 are held, 2 refused
// by the per-IP layer.
func TestReservationBatchAnswersAsAlone(t *testing.T) {
	t.Parallel()
	batchStores(t, func(t *testing.T, a *tenantAPI) {
		batcher, _ := a.tenant(tenant.PlanPro)
		twin, _ := a.tenant(tenant.PlanPro)
		for _, k := range []string{batcher, twin} {
			wantStatus(t, a.do(k, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h","unit":"tokens"}`), http.StatusOK)
			wantStatus(t, a.do(k, "PUT", "/v1/policies/jobs", `{"limit":2,"algorithm":"concurrency"}`), http.StatusOK)
		}
		entries := []string{
			`{"policy":"llm","subject":"alice","amount":40,"ttl":"10m"}`,
			`{"policy":"llm","subject":"bob","amount":150}`,
			`{"policy":"nope","subject":"s","amount":1}`,
			`{"policy":"jobs","subject":"s","amount":1}`,
			`{"policy":"llm","amount":1}`,
		}
		got := results(t, a.do(batcher, "POST", "/v1/reservations/batch", `{"reservations":[`+strings.Join(entries, ",")+`]}`), len(entries))
		for i, e := range entries {
			sameAsAlone(t, fmt.Sprintf("entry %d %s", i, e), got[i], a.do(twin, "POST", "/v1/reservations", e))
		}
		if got[0]["allowed"] != true || got[0]["remaining"] != 60.0 || got[1]["allowed"] != false || got[2]["status"] != 400.0 || got[2]["field"] != "policy" {
			t.Errorf("the batch's answers: %v", got)
		}
		// The reservation is held: the budget has 60 left.
		r := a.do(batcher, "POST", "/v1/reservations", `{"policy":"llm","subject":"alice","amount":60}`)
		wantFields(t, "the rest", r, map[string]any{"allowed": true, "remaining": 0.0})

		limited, _ := a.tenant(tenant.PlanPro, `UPDATE tenants SET rate_limit_per_minute = 3 WHERE id = $1`)
		wantStatus(t, a.do(limited, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h"}`), http.StatusOK)
		e := `{"policy":"llm","subject":"s","amount":1}`
		got = results(t, a.do(limited, "POST", "/v1/reservations/batch", `{"reservations":[`+strings.Repeat(e+",", 4)+e+`]}`), 5)
		held, refused := 0, 0
		for _, g := range got {
			switch {
			case g["allowed"] == true:
				held++
			case g["status"] == 429.0 && g["layer"] == "ip" && g["limit"] == 3.0:
				refused++
			default:
				t.Errorf("per-IP limit of 3: %v", g)
			}
		}
		if held != 3 || refused != 2 {
			t.Errorf("5 reservations at 3 a minute: %d held, %d refused, want 3 and 2", held, refused)
		}
		// Alone, the next is refused by the same layer.
		r = a.do(limited, "POST", "/v1/reservations", e)
		wantStatus(t, r, http.StatusTooManyRequests)
		if r.header.Get("X-RateLimit-Layer") != "ip" {
			t.Errorf("alone after the batch: %v %s", r.header, r.body)
		}
	})
}

// TestReservationBatchIdempotency: a batch sent again with the same
// idempotency keys reserves nothing more, and answers each entry as the
// repeat of the reservation the first made; the keys are those of the
// single route too. A batch takes no Idempotency-Key header.
func TestReservationBatchIdempotency(t *testing.T) {
	t.Parallel()
	batchStores(t, func(t *testing.T, a *tenantAPI) {
		live, _ := a.tenant(tenant.PlanPro)
		wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h"}`), http.StatusOK)
		body := `{"reservations":[{"policy":"llm","subject":"alice","amount":30,"idempotency_key":"call-1"},` +
			`{"policy":"llm","subject":"bob","amount":20,"idempotency_key":"call-2"}]}`
		first := results(t, a.do(live, "POST", "/v1/reservations/batch", body), 2)
		for i, remaining := range []float64{70, 80} {
			if first[i]["allowed"] != true || first[i]["remaining"] != remaining || first[i]["repeat"] != nil {
				t.Errorf("first batch, entry %d: %v", i, first[i])
			}
		}
		again := results(t, a.do(live, "POST", "/v1/reservations/batch", body), 2)
		for i, amount := range []float64{30, 20} {
			if again[i]["repeat"] != true || again[i]["reservation_id"] != first[i]["reservation_id"] ||
				again[i]["amount"] != amount || again[i]["remaining"] != first[i]["remaining"] || again[i]["expires_at"] != first[i]["expires_at"] {
				t.Errorf("batch again, entry %d: %v, first %v", i, again[i], first[i])
			}
		}
		// The single route's key is the same key.
		r := a.doKeyed(live, "call-1", "POST", "/v1/reservations", `{"policy":"llm","subject":"alice","amount":30}`)
		wantFields(t, "alone, key call-1", r, map[string]any{"repeat": true, "reservation_id": first[0]["reservation_id"], "remaining": 70.0})
		r = a.doKeyed(live, "call-1", "POST", "/v1/reservations/batch", body)
		wantFieldProblem(t, r, http.StatusBadRequest, idempotencyHeader)
		// One key twice in a batch: one reservation, the other entry its
		// repeat, whichever is decided first.
		e := `{"policy":"llm","subject":"carol","amount":10,"idempotency_key":"call-3"}`
		got := results(t, a.do(live, "POST", "/v1/reservations/batch", `{"reservations":[`+e+","+e+`]}`), 2)
		if got[0]["reservation_id"] != got[1]["reservation_id"] || (got[0]["repeat"] == true) == (got[1]["repeat"] == true) {
			t.Errorf("one key twice in a batch: %v", got)
		}
		r = a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"carol","amount":90}`)
		wantFields(t, "carol's rest", r, map[string]any{"allowed": true, "remaining": 0.0})
	})
}

// TestSettleBatch settles reservations in batches: each result is what
// the single settlement answers (a settlement, a release, 404 for an
// unknown reservation, a repeat, 409 for another used), in order.
func TestSettleBatch(t *testing.T) {
	t.Parallel()
	batchStores(t, func(t *testing.T, a *tenantAPI) {
		live, _ := a.tenant(tenant.PlanPro)
		wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h","unit":"tokens"}`), http.StatusOK)
		got := results(t, a.do(live, "POST", "/v1/reservations/batch", `{"reservations":[{"policy":"llm","subject":"alice","amount":40},{"policy":"llm","subject":"bob","amount":25}]}`), 2)
		alice, bob := got[0]["reservation_id"].(string), got[1]["reservation_id"].(string)
		unknown := "rs_" + strings.Repeat("0", 32)
		got = results(t, a.do(live, "POST", "/v1/reservations/settle", fmt.Sprintf(
			`{"settlements":[{"reservation_id":%q,"used":30},{"reservation_id":%q,"used":1},{"reservation_id":%q,"used":0}]}`, alice, unknown, bob)), 3)
		want := []map[string]any{
			{"reservation_id": alice, "amount": 40.0, "used": 30.0, "returned": 10.0, "excess": 0.0, "remaining": 70.0, "limit": 100.0, "overdrawn": 0.0, "unit": "tokens", "repeat": false},
			{"status": 404.0, "type": problemBase + "reservation-not-found"},
			{"reservation_id": bob, "amount": 25.0, "used": 0.0, "returned": 25.0, "remaining": 100.0, "repeat": false},
		}
		for i := range want {
			for k, v := range want[i] {
				if got[i][k] != v {
					t.Errorf("settlement %d: %s = %v, want %v: %v", i, k, got[i][k], v, got[i])
				}
			}
		}
		sameAsAlone(t, "unknown reservation", got[1], a.do(live, "POST", "/v1/reservations/"+unknown+"/settle", `{"used":1}`))

		// Again: the same used is a repeat, another a conflict, as alone.
		got = results(t, a.do(live, "POST", "/v1/reservations/settle", fmt.Sprintf(
			`{"settlements":[{"reservation_id":%q,"used":30},{"reservation_id":%q,"used":31}]}`, alice, alice)), 2)
		if got[0]["repeat"] != true || got[0]["used"] != 30.0 || got[0]["remaining"] != 70.0 {
			t.Errorf("the same settlement again: %v", got[0])
		}
		sameAsAlone(t, "another used", got[1], a.do(live, "POST", "/v1/reservations/"+alice+"/settle", `{"used":31}`))
		if got[1]["status"] != 409.0 {
			t.Errorf("another used: %v", got[1])
		}
	})
}

// TestSettleBatchStoreDown: with the counter store cut off, each
// settlement of a batch is answered 503, as alone, and the batch 200.
func TestSettleBatchStoreDown(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: proxied, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := newTenantAPIWith(t, dsn, apiOptions{store: store, storeName: "postgres"})
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h"}`), http.StatusOK)
	got := results(t, a.do(live, "POST", "/v1/reservations/batch", `{"reservations":[{"policy":"llm","subject":"a","amount":1},{"policy":"llm","subject":"b","amount":1}]}`), 2)
	ids := []string{got[0]["reservation_id"].(string), got[1]["reservation_id"].(string)}
	proxy.Cut()
	got = results(t, a.do(live, "POST", "/v1/reservations/settle", fmt.Sprintf(`{"settlements":[{"reservation_id":%q,"used":1},{"reservation_id":%q,"used":0}]}`, ids[0], ids[1])), 2)
	for i, g := range got {
		if g["status"] != 503.0 {
			t.Errorf("settlement %d with the store away: %v", i, g)
		}
	}
	sameAsAlone(t, "store away", got[0], a.do(live, "POST", "/v1/reservations/"+ids[0]+"/settle", `{"used":1}`))
}

// TestReservationBatchRefusesBadBodies: a body that cannot be read whole
// is a 400 naming the entry and field, and nothing of it is reserved or
// settled.
func TestReservationBatchRefusesBadBodies(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	live, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(live, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h"}`), http.StatusOK)
	ok := `{"policy":"llm","subject":"s","amount":10}`
	batch := func(entries ...string) string { return `{"reservations":[` + strings.Join(entries, ",") + `]}` }
	for _, tc := range []struct{ body, field string }{
		{batch(ok, ok, ok, `{"policy":"llm","subject":"s","amount":0}`), "reservations[3].amount"},
		{batch(ok, `{"policy":"llm","subject":"s","amount":"3"}`), "reservations[1].amount"},
		{batch(ok, `{"policy":"llm","subject":"s"}`), "reservations[1].amount"},
		{batch(`{"subject":"s","amount":1}`, ok), "reservations[0].policy"},
		{batch(ok, `{"policy":"llm","subject":"s","amount":1,"ttl":"25h"}`), "reservations[1].ttl"},
		{batch(ok, `{"policy":"llm","subject":"s","amount":1,"idempotency_key":""}`), "reservations[1].idempotency_key"},
		{batch(ok, `{"policy":"llm","subject":"s","amount":1,"idempotency_key":"caf\u00e9"}`), "reservations[1].idempotency_key"},
		{batch(ok, `{"policy":"llm","subject":"`+strings.Repeat("s", 513)+`","amount":1}`), "reservations[1].subject"},
		{batch(ok, `{"policy":"llm","subject":"s","amount":1,"cost":2}`), "reservations[1]"},
		{batch(ok, `[1]`), "reservations[1]"},
		{batch(), "reservations"},
		{batch(strings.Repeat(ok+",", 100) + ok), "reservations"},
		{`{"reservations":5}`, "reservations"},
		{`{}`, "reservations"},
		{`{"reservations":[]} {}`, "body"},
		{`not json`, "body"},
		{``, "body"},
	} {
		wantFieldProblem(t, a.do(live, "POST", "/v1/reservations/batch", tc.body), http.StatusBadRequest, tc.field)
	}
	// Nothing of the refused batches was held: s has its 100 whole.
	r := a.do(live, "POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":100}`)
	wantFields(t, "after the refused batches", r, map[string]any{"allowed": true, "remaining": 0.0})
	// 100 entries is a batch.
	one := `{"policy":"llm","subject":"t","amount":1}`
	held := 0
	for _, g := range results(t, a.do(live, "POST", "/v1/reservations/batch", batch(strings.Repeat(one+",", 99)+one)), 100) {
		if g["allowed"] == true {
			held++
		}
	}
	if held != 100 {
		t.Errorf("a batch of 100 held %d", held)
	}

	id := "rs_" + strings.Repeat("0", 32)
	settle := func(entries ...string) string { return `{"settlements":[` + strings.Join(entries, ",") + `]}` }
	good := fmt.Sprintf(`{"reservation_id":%q,"used":1}`, id)
	for _, tc := range []struct{ body, field string }{
		{settle(good, `{"reservation_id":"rs_XYZ","used":1}`), "settlements[1].reservation_id"},
		{settle(good, `{"used":1}`), "settlements[1].reservation_id"},
		{settle(fmt.Sprintf(`{"reservation_id":%q,"used":-1}`, id)), "settlements[0].used"},
		{settle(fmt.Sprintf(`{"reservation_id":%q}`, id)), "settlements[0].used"},
		{settle(fmt.Sprintf(`{"reservation_id":%q,"used":"1"}`, id)), "settlements[0].used"},
		{settle(), "settlements"},
		{settle(strings.Repeat(good+",", 100) + good), "settlements"},
		{`[1]`, "body"},
	} {
		wantFieldProblem(t, a.do(live, "POST", "/v1/reservations/settle", tc.body), http.StatusBadRequest, tc.field)
	}
}

// TestReservationBatchesKeepToTheirTenant is the hostile tenant: four
// clients of one tenant send batches of 100 reservations in a loop, their
// entries refused by the tenant's own bounds when they pass them, while
// another tenant's reservations, one at a time, are each answered 200,
// allowed and exact (never 503, never degraded).
func TestReservationBatchesKeepToTheirTenant(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: dsn, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := newTenantAPIWith(t, dsn, apiOptions{store: store, storeName: "postgres"})
	srv := httptest.NewServer(a.e)
	t.Cleanup(srv.Close)
	hostile, _ := a.tenant(tenant.PlanEnterprise)
	victim, _ := a.tenant(tenant.PlanPro)
	for _, k := range []string{hostile, victim} {
		wantStatus(t, a.do(k, "PUT", "/v1/policies/llm", `{"limit":1000000,"window":"1h"}`), http.StatusOK)
	}
	e := `{"policy":"llm","subject":"s","amount":1,"ttl":"1m"}`
	big := `{"reservations":[` + strings.Repeat(e+",", 99) + e + `]}`
	// Each tenant from an address of its own: only the tenant's bounds may
	// hold the hostile one back.
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	clients := map[string]*http.Client{hostile: from("127.0.0.2"), victim: from("127.0.0.3")}
	post := func(key, path, body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := clients[key].Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	stop := make(chan struct{})
	var batches, held atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, body := post(hostile, "/v1/reservations/batch", big)
				if status == http.StatusTooManyRequests {
					continue // the hostile tenant's own bounds
				}
				var b struct{ Results []map[string]any }
				if status != http.StatusOK || json.Unmarshal(body, &b) != nil || len(b.Results) != 100 {
					t.Errorf("hostile batch: %d %s", status, body)
					return
				}
				batches.Add(1)
				for _, r := range b.Results {
					if r["allowed"] == true {
						held.Add(1)
					}
				}
			}
		})
	}
	for i := range 60 {
		status, body := post(victim, "/v1/reservations", e)
		var r map[string]any
		if status != http.StatusOK || json.Unmarshal(body, &r) != nil || r["allowed"] != true || r["degraded"] != false || r["remaining"] != float64(1000000-i-1) {
			t.Errorf("victim's reservation %d beside the batches: %d %s", i, status, body)
		}
	}
	close(stop)
	wg.Wait()
	if batches.Load() == 0 || held.Load() == 0 {
		t.Errorf("the hostile tenant's batches: %d answered, %d reservations held", batches.Load(), held.Load())
	}
	t.Logf("beside 60 reservations of its neighbour: %d hostile batches answered, %d reservations held", batches.Load(), held.Load())
}

// TestReservationBatchBodies: a batch of unknown length reserves what the
// route reads at most (256 KiB and a byte) in its tenant's share, and a
// larger body is a 400 that reserves nothing.
func TestReservationBatchBodies(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	srv := httptest.NewServer(a.e)
	t.Cleanup(srv.Close)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, "PUT", "/v1/policies/llm", `{"limit":100,"window":"1h"}`), http.StatusOK)
	big := `{"reservations":[{"policy":"llm","subject":"s","amount":1,"ttl":"` + strings.Repeat("1", maxReservationBatchBody) + `s"}]}`
	wantFieldProblem(t, a.do(key, "POST", "/v1/reservations/batch", big), http.StatusBadRequest, "body")
	wantFields(t, "after the large body", a.do(key, "POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":100}`), map[string]any{"allowed": true})
	for i, path := range []string{"/v1/reservations/batch", "/v1/reservations/settle"} {
		stalledFrom(t, srv, fmt.Sprintf("127.0.0.%d", 2+i), bodyHead(path, key, -1))
	}
	eventually.NoError(t, 5*time.Second, "the batches' reservations", func() error {
		if got := value(t, a.met.BodyBytes); got != 2*(maxReservationBatchBody+1) {
			return fmt.Errorf("two batches of unknown length reserved %.0f bytes, want %d", got, 2*(maxReservationBatchBody+1))
		}
		return nil
	})
}
