package blackbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// reservationAnswer is the answer of POST /v1/reservations.
type reservationAnswer struct {
	Allowed       bool   `json:"allowed"`
	ReservationID string `json:"reservation_id"`
	Amount        int64  `json:"amount"`
	ExpiresAt     string `json:"expires_at"`
	Remaining     int64  `json:"remaining"`
	Limit         int64  `json:"limit"`
	Degraded      bool   `json:"degraded"`
	TenantFull    bool   `json:"tenant_full"`
	Repeat        bool   `json:"repeat"`
}

// settleAnswer is the answer of a settlement.
type settleAnswer struct {
	Amount, Used, Returned, Excess, Remaining, Overdrawn int64
	Repeat                                               bool
}

// reserve posts one reservation (with an Idempotency-Key unless idem is
// empty), which must be answered 200 and not degraded.
func (u apiUser) reserve(policy, subject string, amount int64, idem string) reservationAnswer {
	u.t.Helper()
	var h []string
	if idem != "" {
		h = []string{"Idempotency-Key", idem}
	}
	c := do(u.t, "POST", u.in.base+"/v1/reservations", u.key, map[string]any{"policy": policy, "subject": subject, "amount": amount, "ttl": "1h"}, h...)
	var a reservationAnswer
	if err := json.Unmarshal(c.body, &a); c.status != 200 || err != nil || a.Degraded {
		u.t.Errorf("POST /v1/reservations: %d %s", c.status, c.body)
	}
	return a
}

// settle settles reservation id with used, which must be answered 200.
func (u apiUser) settle(id string, used int64) settleAnswer {
	u.t.Helper()
	c := u.call("POST", "/v1/reservations/"+id+"/settle", map[string]any{"used": used})
	var a settleAnswer
	if err := json.Unmarshal(c.body, &a); c.status != 200 || err != nil {
		u.t.Errorf("settle %s with %d: %d %s", id, used, c.status, c.body)
	}
	return a
}

// remaining peeks at what subject's counter of policy holds.
func (u apiUser) remaining(policy, subject string) int64 {
	u.t.Helper()
	c := u.check("peek", map[string]any{"policy": policy, "subject": subject})
	var a checkAnswer
	c.json(u.t, &a)
	if c.status != 200 || len(a.Items) != 1 || a.Degraded {
		u.t.Fatalf("peek: %d %s", c.status, c.body)
	}
	return a.Items[0].Remaining
}

// TestReservationsAcrossTwoInstances reserves and settles on one budget
// through two instances, on PostgreSQL and on Redis: many racing
// reserve-then-settle calls leave exactly what was settled charged;
// retries of one idempotency key on both instances reserve once; a
// tenant's flood of reservations up to its bound changes nothing for
// another tenant; malformed bodies and headers are 400s, never 500s.
func TestReservationsAcrossTwoInstances(t *testing.T) {
	t.Parallel()
	for name, env := range map[string][]string{
		"postgres": {patientStore},
		"redis":    {patientStore, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL=" + redistest.StartServer(t)},
	} {
		t.Run(name, func(t *testing.T) {
			env = append(env, "TOLLGATE_TENANT_MAX_RESERVATIONS=20")
			dsn := pgtest.New(t)
			a, b := start(t, dsn, env...), start(t, dsn, env...)
			ins := []*instance{a, b}
			nt := createTenant(t, dsn, "pro")
			u := apiUser{t: t, in: a, key: nt.LiveKey}
			// A fixed window of 30 days: no boundary falls within the test
			// but once a month.
			u.putPolicyAll("llm", map[string]any{"limit": 1000, "window": "30d", "unit": "tokens"}, b)

			// 60 reserve 30 and settle 0 to 19 on the other instance: what
			// is charged at the end is exactly what was settled.
			var settled, allowed atomic.Int64
			var wg sync.WaitGroup
			for i := range 60 {
				wg.Go(func() {
					r := u.on(ins[i%2]).reserve("llm", "s", 30, "")
					if !r.Allowed {
						return
					}
					allowed.Add(1)
					used := int64(i % 20)
					s := u.on(ins[(i+1)%2]).settle(r.ReservationID, used)
					if s.Used != used || s.Returned != 30-used || s.Excess != 0 {
						t.Errorf("settle %d of 30: %+v", used, s)
					}
					settled.Add(used)
				})
			}
			wg.Wait()
			// At most 20 live at once (the tenant's bound), and at most 33
			// live reservations of 30 fit in 1000: at least 20 allowed.
			if allowed.Load() < 20 {
				t.Errorf("%d of 60 reservations allowed, want at least 20", allowed.Load())
			}
			if got, want := u.remaining("llm", "s"), 1000-settled.Load(); got != want {
				t.Fatalf("after racing reserve and settle: %d left, want 1000 - %d settled = %d", got, settled.Load(), want)
			}

			// Retries of one key, on both instances at once, reserve once.
			before := u.remaining("llm", "k")
			// Each answers as the first: one id, one expiry, the amount.
			answers := make([]reservationAnswer, 10)
			for i := range 10 {
				wg.Go(func() { answers[i] = u.on(ins[i%2]).reserve("llm", "k", 7, "job-1") })
			}
			wg.Wait()
			ids := make([]string, 10)
			for i, a := range answers {
				ids[i] = a.ReservationID
				if a.ReservationID == "" || a.ReservationID != answers[0].ReservationID || a.ExpiresAt == "" || a.ExpiresAt != answers[0].ExpiresAt || a.Amount != 7 {
					t.Fatalf("ten retries of one key: %+v", answers)
				}
			}
			if got := u.remaining("llm", "k"); got != before-7 {
				t.Fatalf("ten retries of one key: %d left, want %d", got, before-7)
			}
			if s := u.on(b).settle(ids[0], 7); s.Returned != 0 || s.Remaining != before-7 {
				t.Fatalf("settle the key's reservation: %+v", s)
			}

			// A hostile tenant fills its bound of live reservations; the
			// other tenant's budget and room are untouched.
			other := createTenant(t, dsn, "pro")
			v := apiUser{t: t, in: b, key: other.LiveKey}
			v.putPolicyAll("llm", map[string]any{"limit": 1000, "window": "30d"}, a)
			for i := range 20 {
				if r := u.on(ins[i%2]).reserve("llm", fmt.Sprintf("flood-%d", i), 1, ""); !r.Allowed {
					t.Fatalf("flood reservation %d: %+v", i, r)
				}
			}
			if r := u.on(b).reserve("llm", "flood-x", 1, ""); r.Allowed || !r.TenantFull {
				t.Fatalf("past the bound: %+v, want tenant_full", r)
			}
			for i := range 20 {
				if r := v.on(ins[i%2]).reserve("llm", "s", 10, ""); !r.Allowed || r.Remaining != 1000-10*int64(i+1) {
					t.Fatalf("the other tenant's reservation %d: %+v", i, r)
				}
			}

			// Malformed bodies, headers and ids: 400, never 500.
			for _, tc := range []struct{ method, path, body, idem string }{
				{"POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":"x"}`, ""},
				{"POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1e30}`, ""},
				{"POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1,"ttl":"-1s"}`, ""},
				{"POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1}`, strings.Repeat("x", 300)},
				{"POST", "/v1/reservations", `{"policy":"llm","subject":"s","amount":1}`, "caf\u00e9"},
				{"POST", "/v1/reservations", "\xff\xfe", ""},
				{"POST", "/v1/reservations", `[`, ""},
				{"POST", "/v1/reservations/rs_zz/settle", `{"used":1}`, ""},
				{"POST", "/v1/reservations/" + ids[0] + "/settle", `{"used":-3}`, ""},
				{"POST", "/v1/reservations/" + ids[0] + "/settle", `{"used":1,"extra":true}`, ""},
				{"DELETE", "/v1/reservations/%00", "", ""},
			} {
				for _, in := range ins {
					req, err := http.NewRequest(tc.method, in.base+tc.path, strings.NewReader(tc.body))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Authorization", "Bearer "+nt.LiveKey)
					if tc.idem != "" {
						req.Header["Idempotency-Key"] = []string{tc.idem}
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != 400 {
						t.Errorf("%s %s %q (key %q): %d, want 400", tc.method, tc.path, tc.body, tc.idem, resp.StatusCode)
					}
				}
			}

			// Reservations are checks to the allotment: the 60 of the race,
			// 10 retries, 21 of the flood at least.
			u.waitUsage(5*time.Second, "reservations metered as checks", func(r usageReport) bool { return r.ChecksUsed >= 91 })
		})
	}
}
