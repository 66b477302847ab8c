package blackbox

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
)

// The reservations phases (issue 40): the noisy tenant floods reservations
// to its bound beside the quiet tenant's checks and reservations, then the
// counter store goes away between reserve and settle and comes back. What
// was reserved must be settled exactly once after recovery, every give-back
// kept, every expiry counted as its policy says, and the quiet tenant's
// answers what they would have been alone. The suite's model does not
// know reservations: the phase holds its own answers to invReservations.

// invReservations is the invariant the reservations phases hold.
const invReservations = "reservations"

func init() {
	invariants[invReservations] = "reservations across a store outage: no give-back lost, nothing charged twice, settle after recovery 200 (404 when expired or degraded), a flood held to its bound, the quiet tenant untouched"
}

// reservationBound is the stacks' TOLLGATE_TENANT_MAX_RESERVATIONS: small,
// so that a flood reaches it within the phase.
const reservationBound = 64

var reservationBoundEnv = fmt.Sprintf("TOLLGATE_TENANT_MAX_RESERVATIONS=%d", reservationBound)

// Budgets of the reservations phases: a month of tokens for the noisy
// tenant, kept charged on expiry (rsettle) or given back (rrelease), and the
// quiet tenant's. Their window is 30 days: a phase falls across its
// boundary once a month at most.
var (
	budgetPolicies = map[string]map[string]any{
		"rsettle":  {"limit": 1_000_000, "algorithm": "fixed_window", "window": "30d", "fail_mode": "open"},
		"rrelease": {"limit": 1_000_000, "algorithm": "fixed_window", "window": "30d", "fail_mode": "open", "on_expiry": "release"},
	}
	quietBudget = map[string]any{"limit": 1_000_000, "algorithm": "fixed_window", "window": "30d", "fail_mode": "open"}
)

// heldReservation is one the noisy tenant holds, and what became of it.
type heldReservation struct {
	id, policy string
	amount     int64
	used       int64
	// expires says it was made to expire during the outage, degraded that
	// it was answered degraded (no store knows it).
	expires, degraded bool
}

// reservationsUnderOutage is a phase body: the flood, then the outage
// (inject, restore) between reserve and settle, then the settlements.
func reservationsUnderOutage(inject func(), restore func() error) func(pr *phaseRun) {
	return func(pr *phaseRun) {
		st := pr.st
		noisy, quiet := st.noisy, st.quiet
		for name, body := range budgetPolicies {
			pr.putBudget(noisy, name, body)
		}
		pr.putBudget(quiet, "qbudget", quietBudget)
		subject := pr.name

		// The flood: the noisy tenant reserves from eight connections an
		// instance until it holds its bound, and on; the quiet tenant checks
		// its "2 an hour" and reserves and settles beside it.
		stopQuiet := pr.startQuiet()
		var quietUsed atomic.Int64
		quietDone, floodDone := make(chan struct{}), make(chan struct{})
		var quietWG, flood sync.WaitGroup
		quietWG.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-quietDone:
					return
				default:
				}
				a, r := pr.reserve(quiet, st.members[i%len(st.members)], "qbudget", subject, 10, "1h")
				if a.status != 200 || !r.Allowed || r.Degraded || r.TenantFull {
					pr.v.add(invReservations, "quiet reservation beside the flood: %d %s %v", a.status, truncate(a.body, 200), a.err)
					continue
				}
				s, sa := pr.settle(quiet, st.members[(i+1)%len(st.members)], r.ReservationID, 4)
				if s.status != 200 || sa.Returned != 6 || sa.Repeat {
					pr.v.add(invReservations, "quiet settlement beside the flood: %d %s %v", s.status, truncate(s.body, 200), s.err)
					continue
				}
				quietUsed.Add(4)
				time.Sleep(10 * time.Millisecond)
			}
		})
		time.Sleep(quietFor)
		pr.floodClient = newFaultClient()
		var mu sync.Mutex
		var held []*heldReservation
		var full atomic.Int64
		for _, m := range st.members {
			for g := range 8 {
				rng := rand.New(rand.NewPCG(pr.s.seed, uint64(pr.seq)<<16|uint64(m.idx*8+g)|1<<14))
				flood.Go(func() {
					for {
						select {
						case <-floodDone:
							return
						default:
						}
						policy := []string{"rsettle", "rrelease"}[rng.IntN(2)]
						amount := 1 + rng.Int64N(20)
						a, r := pr.reserveWith(pr.floodClient, noisy, m, policy, subject, amount, "1h")
						switch {
						case a.status != 200 || r.Degraded:
							pr.v.add(invReservations, "noisy reservation with the store up: %d %s %v", a.status, truncate(a.body, 200), a.err)
						case r.Allowed:
							mu.Lock()
							held = append(held, &heldReservation{id: r.ReservationID, policy: policy, amount: amount})
							mu.Unlock()
						case r.TenantFull:
							full.Add(1)
						default:
							pr.v.add(invReservations, "noisy reservation refused but not for its bound: %s", truncate(a.body, 200))
						}
					}
				})
			}
		}
		time.Sleep(2 * time.Second)
		close(floodDone)
		flood.Wait()
		pr.floodClient.closeIdle()
		time.Sleep(quietFor)
		close(quietDone)
		quietWG.Wait()
		stopQuiet()
		pr.s.checks.Add(2)
		if len(held) != reservationBound || full.Load() == 0 {
			pr.v.add(invReservations, "the flood holds %d reservations (%d refused as tenant_full), want exactly its bound %d", len(held), full.Load(), reservationBound)
		}
		if got, want := pr.budgetLeft(quiet, "qbudget", subject), 1_000_000-quietUsed.Load(); got != want {
			pr.v.add(invReservations, "quiet budget beside the flood: %d left, want %d", got, want)
		}

		// Make room for reservations that expire during the outage:
		// releasing eight gives their amounts back.
		room := min(8, len(held))
		for i, h := range held[:room] {
			a, s := pr.settle(noisy, st.members[i%len(st.members)], h.id, 0)
			if a.status != 200 || s.Returned != h.amount {
				pr.v.add(invReservations, "release before the outage: %d %s", a.status, truncate(a.body, 200))
			}
		}
		held = held[room:]
		for i := range 8 {
			policy := []string{"rsettle", "rrelease"}[i%2]
			a, r := pr.reserve(noisy, st.members[i%len(st.members)], policy, subject, 100, "1s")
			if a.status != 200 || !r.Allowed {
				pr.v.add(invReservations, "a reservation to expire: %d %s", a.status, truncate(a.body, 200))
				continue
			}
			held = append(held, &heldReservation{id: r.ReservationID, policy: policy, amount: 100, expires: true})
		}

		// The outage: settlements are 503s with a Retry-After (or, sent
		// as the store went, settled); reservations of these fail-open
		// policies are allowed, degraded, under ids no store knows.
		pr.faultOn()
		inject()
		began := time.Now()
		var during503 int
		for i, h := range held {
			if h.expires || i%3 != 0 {
				continue
			}
			h.used = int64(i % 25)
			a, s := pr.settle(noisy, st.members[i%len(st.members)], h.id, h.used)
			switch {
			case a.status == 503 && a.header.Get("Retry-After") != "":
				during503++
			case a.status == 200 && s.Used == h.used:
			default:
				pr.v.add(invReservations, "settle during the outage: %d %v %s, want 503 with Retry-After", a.status, a.header.Get("Retry-After"), truncate(a.body, 200))
			}
		}
		for i := range 4 {
			a, r := pr.reserve(noisy, st.members[i%len(st.members)], "rsettle", subject, 50, "1h")
			if a.status != 200 || !r.Allowed || !r.Degraded || r.ReservationID == "" {
				pr.v.add(invReservations, "fail-open reservation during the outage: %d %s", a.status, truncate(a.body, 200))
				continue
			}
			held = append(held, &heldReservation{id: r.ReservationID, policy: "rsettle", amount: 50, degraded: true})
		}
		time.Sleep(max(0, faultFor-time.Since(began)))
		if err := restore(); err != nil {
			pr.s.t.Fatalf("phase %s: restore: %v", pr.name, err)
		}
		end := pr.faultOff()

		// After recovery: every settlement answers as it should, once,
		// 503s only within the grace. Some settle past their amount: the
		// excess is charged too.
		charged := map[string]int64{}
		for i, h := range held {
			if h.used == 0 {
				h.used = int64(i % 25)
			}
			m := st.members[(i+1)%len(st.members)]
			var a answer
			var s settleAnswer
			for {
				a, s = pr.settle(noisy, m, h.id, h.used)
				if a.status != 503 || time.Since(end) > recoveryGrace {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			pr.s.checks.Add(1)
			switch {
			case h.expires || h.degraded:
				if a.status != 404 {
					pr.v.add(invReservations, "settle an expired or degraded reservation after recovery: %d %s, want 404", a.status, truncate(a.body, 200))
				}
				if h.expires && h.policy == "rsettle" {
					charged[h.policy] += h.amount
				}
			case a.status != 200 || s.Used != h.used || s.Amount != h.amount || s.Returned != max(0, h.amount-h.used) || s.Excess != max(0, h.used-h.amount):
				pr.v.add(invReservations, "settle %s of %d with %d after recovery: %d %s", h.id, h.amount, h.used, a.status, truncate(a.body, 200))
			default:
				charged[h.policy] += h.used
			}
		}
		// The same settlement again repeats the first; another is a 409.
		for _, h := range held[:min(3, len(held))] {
			a, s := pr.settle(noisy, st.members[0], h.id, h.used)
			b, _ := pr.settle(noisy, st.members[1], h.id, h.used+1)
			if a.status != 200 || !s.Repeat || b.status != 409 {
				pr.v.add(invReservations, "settle again: %d %s; with another used: %d, want 200 repeat and 409", a.status, truncate(a.body, 200), b.status)
			}
		}
		sabotage := int64(0)
		if pr.s.sabotaged(invReservations) {
			sabotage = 1
		}
		for policy := range budgetPolicies {
			pr.s.checks.Add(1)
			if got, want := pr.budgetLeft(noisy, policy, subject), 1_000_000-charged[policy]-sabotage; got != want {
				pr.v.add(invReservations, "%s after recovery: %d left, want %d (all settled, expired charged as the policy says)", policy, got, want)
			}
		}
		a, r := pr.reserve(quiet, st.members[0], "qbudget", subject, 10, "1h")
		if a.status != 200 || !r.Allowed || r.Degraded || r.Remaining != 1_000_000-quietUsed.Load()-10 {
			pr.v.add(invReservations, "quiet reservation after recovery: %d %s, want %d left", a.status, truncate(a.body, 200), 1_000_000-quietUsed.Load()-10)
		} else if s, sa := pr.settle(quiet, st.members[1%len(st.members)], r.ReservationID, 0); s.status != 200 || sa.Returned != 10 {
			pr.v.add(invReservations, "quiet release after recovery: %d %s", s.status, truncate(s.body, 200))
		}
		pr.s.t.Logf("phase %s: the flood held %d reservations (%d refused at the bound); %d settlements 503 during the outage; %d settled after it, expired and degraded ones among them (rsettle %d, rrelease %d charged)",
			pr.name, reservationBound, full.Load(), during503, len(held), charged["rsettle"], charged["rrelease"])
		time.Sleep(phaseAfter)
	}
}

// putBudget puts policy name for tn and waits until every instance peeks
// at it.
func (pr *phaseRun) putBudget(tn *fTenant, name string, body map[string]any) {
	st, t := pr.st, pr.s.t
	if a := st.call(nil, "PUT", st.members[0], tn.nt.LiveKey, "/v1/policies/"+name, body); a.status != 200 {
		t.Fatalf("phase %s: PUT policy %s for %s: %d %s %v", pr.name, name, tn.label, a.status, a.body, a.err)
	}
	for _, m := range st.members {
		eventually.True(t, 5*time.Second, "policy "+name+" on "+m.base(), func() bool {
			return st.call(tn, "POST", m, tn.nt.LiveKey, "/v1/check", map[string]any{"mode": "peek",
				"items": []any{map[string]any{"policy": name, "subject": "probe"}}}).status == 200
		})
	}
}

// budgetLeft peeks at what tn's budget policy holds for subject (-1 when
// the peek fails).
func (pr *phaseRun) budgetLeft(tn *fTenant, policy, subject string) int64 {
	a := pr.st.call(tn, "POST", pr.st.members[0], tn.nt.LiveKey, "/v1/check", map[string]any{"mode": "peek",
		"items": []any{map[string]any{"policy": policy, "subject": subject}}})
	var c checkAnswer
	if a.status != 200 || json.Unmarshal(a.body, &c) != nil || len(c.Items) != 1 || c.Degraded {
		pr.v.add(invReservations, "peek at %s: %d %s %v", policy, a.status, truncate(a.body, 200), a.err)
		return -1
	}
	return c.Items[0].Remaining
}

// reserve reserves amount of tn's policy for subject on m.
func (pr *phaseRun) reserve(tn *fTenant, m *member, policy, subject string, amount int64, ttl string) (answer, reservationAnswer) {
	return pr.reserveWith(pr.s.http, tn, m, policy, subject, amount, ttl)
}

func (pr *phaseRun) reserveWith(c *faultClient, tn *fTenant, m *member, policy, subject string, amount int64, ttl string) (answer, reservationAnswer) {
	a := pr.st.callWith(c, tn, "POST", m, tn.nt.LiveKey, "/v1/reservations", map[string]any{"policy": policy, "subject": subject, "amount": amount, "ttl": ttl})
	var r reservationAnswer
	if a.status == 200 && json.Unmarshal(a.body, &r) != nil {
		a.status = -1
	}
	return a, r
}

// settle settles tn's reservation id with used on m.
func (pr *phaseRun) settle(tn *fTenant, m *member, id string, used int64) (answer, settleAnswer) {
	a := pr.st.call(tn, "POST", m, tn.nt.LiveKey, fmt.Sprintf("/v1/reservations/%s/settle", id), map[string]any{"used": used})
	var s settleAnswer
	if a.status == 200 && json.Unmarshal(a.body, &s) != nil {
		a.status = -1
	}
	return a, s
}
