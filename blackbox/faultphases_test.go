package blackbox

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Timeline of a phase: traffic before the fault, the fault, traffic after.
const (
	phaseBefore = 1500 * time.Millisecond
	faultFor    = 2500 * time.Millisecond
	phaseAfter  = 1500 * time.Millisecond
	// floodFor is how long a noisy tenant floods, with quiet checks
	// quietFor before and after.
	floodFor = 3500 * time.Millisecond
	quietFor = 500 * time.Millisecond
	// Workers of the mixed workload, and of the noisy tenant within it.
	mixedWorkers = 6
	hotWorkers   = 2
	// floodPerInstance is the noisy tenant's connections to each
	// instance in a noisy phase (issue 23: 32).
	floodPerInstance = 32
)

// phaseSpec is a phase of the suite: a stack and what happens to it while
// the workload runs (body), or a noisy tenant's flood instead.
type phaseSpec struct {
	name  string
	st    *stack
	body  func(pr *phaseRun)
	noisy bool
}

// phaseRun is one run of a phase.
type phaseRun struct {
	s     *suite
	st    *stack
	key   string // the phase's name, as knownOpen has it
	name  string // unique within the run: key and cycle
	seq   int
	noisy bool
	v     violations

	mu     sync.Mutex
	faults []interval
	// attacks are when a hostile neighbour was at work (faulthostile_test.go):
	// answers then are held to the store deadline as during a fault, and
	// nothing else is excused.
	attacks      []interval
	quietChecked bool // the quiet tenant checked beside the phase (startQuiet)
	lossyTenants map[*fTenant]bool
	killed       *member
	killedAt     time.Time

	// floodClient carries a noisy phase's flood, apart from the quiet
	// tenant's connections.
	floodClient *faultClient

	count503, countDegraded, lossyExcess atomic.Int64
}

var phaseSeq atomic.Int64

func (s *suite) runPhase(cycle int, ps phaseSpec) {
	st := ps.st
	pr := &phaseRun{s: s, st: st, key: ps.name, name: fmt.Sprintf("%s.%d", ps.name, cycle), seq: int(phaseSeq.Add(1)),
		noisy: ps.noisy, lossyTenants: map[*fTenant]bool{}}
	began := time.Now()
	s.phases = append(s.phases, ps.name)
	if st.fresh {
		// What earlier phases left in the instance's table would count
		// against the tenants' shares of it: each phase starts it anew,
		// and the model with it.
		for _, m := range st.members {
			if _, err := st.term(m); err != nil {
				s.t.Fatalf("phase %s: stopping instance %d: %v", pr.name, m.idx, err)
			}
			st.restart(m)
		}
		st.model.mu.Lock()
		st.model.records = nil
		st.model.mu.Unlock()
	}

	// A key of the phase's own, known to every instance, revoked during
	// or after the phase.
	t0 := st.tenants[0]
	id, key := st.createKey(t0)
	t0.mu.Lock()
	t0.extra, t0.extraID, t0.revokedAt, t0.revokeDeadline = key, id, time.Time{}, time.Time{}
	t0.mu.Unlock()
	for _, m := range st.members {
		if a := st.call(nil, "GET", m, key, "/v1/usage", nil); a.status != 200 {
			s.t.Fatalf("phase %s: a new key on instance %d: %d %s %v", pr.name, m.idx, a.status, a.body, a.err)
		}
	}

	// A request of each tenant on each instance first: an idle stack's
	// caches refill outside what the invariants count.
	for _, m := range st.members {
		for _, tn := range append(slices.Clone(st.tenants), st.noisy, st.quiet) {
			st.call(tn, "GET", m, tn.nt.LiveKey, "/v1/policies", nil)
			st.call(tn, "GET", m, tn.nt.TestKey, "/v1/usage", nil)
			st.call(tn, "POST", m, tn.nt.LiveKey, "/v1/check", map[string]any{"mode": "peek",
				"items": []any{map[string]any{"policy": st.checkPolicy(tn), "subject": "warm"}}})
		}
	}

	if st.fresh {
		for _, m := range st.members {
			m.first = st.sample(m)
		}
	}
	if ps.noisy {
		pr.noisyFlood()
	} else {
		stop := pr.startWorkload()
		ps.body(pr)
		stop()
	}
	t0.mu.Lock()
	revoked := !t0.revokedAt.IsZero()
	t0.mu.Unlock()
	if !revoked {
		pr.revoke()
		pr.checkRevoked(time.Now(), revocationWithin)
	}
	pr.settleUsage()
	pr.evaluate()
	var windows []string
	for _, f := range pr.faults {
		windows = append(windows, f.from.Format("15:04:05.000")+"–"+f.to.Format("15:04:05.000"))
	}
	s.t.Logf("phase %s: %v, faults %v, %d degraded answers, %d documented 503s, %d excess after lost writes",
		pr.name, time.Since(began).Round(time.Millisecond), windows, pr.countDegraded.Load(), pr.count503.Load(), pr.lossyExcess.Load())
	s.verdict(pr.key, &pr.v)
}

// checkPolicy is a policy tn may check.
func (st *stack) checkPolicy(tn *fTenant) string {
	switch tn {
	case st.noisy:
		return hotChecks.name
	case st.quiet:
		return twoAnHour.name
	}
	return "fw"
}

// faultOn marks a fault begun; faultOff marks it over.
func (pr *phaseRun) faultOn() {
	pr.mu.Lock()
	pr.faults = append(pr.faults, interval{from: time.Now()})
	pr.mu.Unlock()
	pr.s.faults.Add(1)
}

func (pr *phaseRun) faultOff() time.Time {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	now := time.Now()
	pr.faults[len(pr.faults)-1].to = now
	pr.st.mu.Lock()
	pr.st.past = append(pr.st.past, pr.faults[len(pr.faults)-1])
	pr.st.mu.Unlock()
	return now
}

func (pr *phaseRun) lossy(tn *fTenant) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.lossyTenants[tn]
}

// revoke revokes the phase's extra key.
func (pr *phaseRun) revoke() {
	t0 := pr.st.tenants[0]
	t0.mu.Lock()
	t0.revokedAt = time.Now()
	id := t0.extraID
	t0.mu.Unlock()
	pr.st.revokeKey(id)
}

// checkRevoked waits until every instance refuses the revoked key, which
// each must do within of from.
func (pr *phaseRun) checkRevoked(from time.Time, within time.Duration) {
	st, t0 := pr.st, pr.st.tenants[0]
	deadline := from.Add(within)
	if pr.s.sabotaged("revocation") {
		deadline = from
	}
	t0.mu.Lock()
	t0.revokeDeadline = deadline
	key := t0.extra
	t0.mu.Unlock()
	for _, m := range st.members {
		pr.s.checks.Add(1)
		for {
			a := st.call(nil, "GET", m, key, "/v1/usage", nil)
			if a.status == 401 && !a.end.After(deadline) {
				break
			}
			if time.Now().After(deadline) {
				pr.v.add(invRevocation, "instance %d still answers %d %v %s after the revocation (%v allowed)",
					m.idx, a.status, a.err, time.Since(t0.revokedAt).Round(time.Millisecond), deadline.Sub(t0.revokedAt).Round(time.Millisecond))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// settleUsage holds each tenant's /v1/usage to what the workload was
// answered since the last settled point: every live (test) /v1/check and
// lease acquire answered 200 counted in checks_used (sandbox_used),
// those unanswered or answered 5xx maybe; across a SIGKILL, less by at
// most the killed instance's last flush interval of traffic.
func (pr *phaseRun) settleUsage() {
	st, s := pr.st, pr.s
	for _, tn := range append(slices.Clone(st.tenants), st.noisy, st.quiet) {
		s.checks.Add(2)
		lk, lu, tk, tu := tn.liveKnown.Swap(0), tn.liveUnknown.Swap(0), tn.testKnown.Swap(0), tn.testUnknown.Swap(0)
		lo, hi := tn.liveBase+lk, tn.liveBase+lk+lu
		tlo, thi := tn.testBase+tk, tn.testBase+tk+tu
		if s.sabotaged("usage") {
			lo, hi = hi+1, hi+1
		}
		in := func(u usageReport) bool {
			return lo <= u.ChecksUsed && u.ChecksUsed <= hi && tlo <= u.SandboxUsed && u.SandboxUsed <= thi
		}
		wait := usageWithin
		if pr.killed != nil {
			wait = time.Second
		}
		var u usageReport
		ok := false
		for began := time.Now(); time.Since(began) < wait; time.Sleep(200 * time.Millisecond) {
			if u, ok = pr.usage(tn); ok && in(u) {
				break
			}
		}
		if !ok || !in(u) {
			if pr.killed != nil {
				u = pr.killedUsage(tn, lo, hi, tlo, thi)
			} else {
				pr.v.add(invUsage, "tenant %s: checks_used %d, want %d..%d; sandbox_used %d, want %d..%d",
					tn.label, u.ChecksUsed, lo, hi, u.SandboxUsed, tlo, thi)
			}
		}
		tn.liveBase, tn.testBase = u.ChecksUsed, u.SandboxUsed
	}
}

func (pr *phaseRun) usage(tn *fTenant) (usageReport, bool) {
	var u usageReport
	a := pr.st.call(nil, "GET", pr.st.members[0], tn.nt.LiveKey, "/v1/usage", nil)
	pr.st.usageReads.Add(1)
	return u, a.status == 200 && json.Unmarshal(a.body, &u) == nil
}

// killedUsage waits until tn's usage stops moving and holds what a SIGKILL
// lost to the README's promise: at most one flush interval (1 s) of the
// killed instance's counted traffic.
func (pr *phaseRun) killedUsage(tn *fTenant, lo, hi, tlo, thi int64) usageReport {
	var u, prev usageReport
	for i := 0; i < 20; i++ {
		u, _ = pr.usage(tn)
		if i > 0 && u.ChecksUsed == prev.ChecksUsed && u.SandboxUsed == prev.SandboxUsed {
			break
		}
		prev = u
		time.Sleep(1200 * time.Millisecond)
	}
	// What the killed instance answered and counted in its last second.
	var lastSecond, total int64
	pr.st.model.mu.Lock()
	for _, r := range pr.st.model.records {
		if r.phase != pr.name || r.tenant != tn || r.test || r.member != pr.killed.idx || r.err != nil || r.status != 200 ||
			(r.kind != opCheck && r.kind != opPeek && r.kind != opAcquire) || r.end.After(pr.killedAt) {
			continue
		}
		total++
		if r.end.After(pr.killedAt.Add(-time.Second)) {
			lastSecond++
		}
	}
	pr.st.model.mu.Unlock()
	lost := lo - u.ChecksUsed
	bound := lastSecond
	if pr.s.sabotaged("usage") {
		bound = -1
	}
	msg := fmt.Sprintf("tenant %s: SIGKILL lost %d of %d..%d live checks (the killed instance answered %d in its last second, %d in the phase); sandbox %d of %d..%d",
		tn.label, lost, lo, hi, lastSecond, total, u.SandboxUsed, tlo, thi)
	pr.st.usageLosses = append(pr.st.usageLosses, msg)
	pr.s.t.Logf("phase %s: %s", pr.name, msg)
	if u.ChecksUsed > hi || u.SandboxUsed > thi {
		pr.v.add(invUsage, "%s", msg)
	}
	if lost > bound || tlo-u.SandboxUsed > bound {
		pr.v.add(invUsageKill, "%s", msg)
	}
	return u
}

// startWorkload runs the mixed workload until the returned function is
// called.
func (pr *phaseRun) startWorkload() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range mixedWorkers + hotWorkers {
		rng := rand.New(rand.NewPCG(pr.s.seed, uint64(pr.seq)<<16|uint64(w)))
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if w < mixedWorkers {
					pr.mixedOp(rng)
					time.Sleep(time.Duration(2+rng.IntN(8)) * time.Millisecond)
				} else {
					// The noisy tenant of the mixed workload: several times
					// the others' rate, mostly checks of one hot subject
					// (its lease flood is the noisy phases').
					pr.floodOp(rng, pr.s.http, pr.st.members[rng.IntN(len(pr.st.members))], -1, nil)
					time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// subject is one of the phase's few subjects, so that limits are reached.
func (pr *phaseRun) subject(rng *rand.Rand) string {
	return fmt.Sprintf("%s.s%d", pr.name, rng.IntN(4))
}

// mixedOp makes one request of the mixed workload.
func (pr *phaseRun) mixedOp(rng *rand.Rand) {
	st := pr.st
	tn := st.tenants[rng.IntN(len(st.tenants))]
	m := st.members[rng.IntN(len(st.members))]
	key, test, extra := tn.nt.LiveKey, false, false
	switch x := rng.IntN(100); {
	case x < 15:
		key, test = tn.nt.TestKey, true
	case x < 22:
		tn.mu.Lock()
		if tn.extra != "" {
			key, extra = tn.extra, true
		}
		tn.mu.Unlock()
	}
	r := &record{phase: pr.name, tenant: tn, test: test, extra: extra, member: m.idx, lossy: pr.lossy(tn)}
	switch x := rng.IntN(100); {
	case x < 35:
		pr.check(rng, r, m, key, opCheck, 1)
	case x < 43:
		pr.check(rng, r, m, key, opPeek, 1+rng.IntN(2))
	case x < 55:
		pr.check(rng, r, m, key, opCheck, 2+rng.IntN(2))
	case x < 69:
		pr.acquire(rng, r, m, key, "cc", pr.subject(rng), -1)
	case x < 76:
		l := st.leases.pick(rng.IntN(16))
		if l == nil {
			return
		}
		r.tenant, r.test, r.extra = l.tenant, l.test, false
		pr.renew(r, m, l)
	case x < 82:
		l := st.leases.pick(rng.IntN(16))
		if l == nil {
			return
		}
		r.tenant, r.test, r.extra = l.tenant, l.test, false
		pr.release(r, m, l)
	case x < 87:
		pr.reset(r, m, key, []string{"fw", "sw", "tb", "cc", "churn"}[rng.IntN(5)], pr.subject(rng))
	case x < 90 && !test:
		pr.changeChurn(rng, r, m, key)
	case x < 93 && !test:
		pr.changeOverride(rng, r, m, key)
	case x >= 94:
		pr.batch(rng, r, m, key)
	default:
		pr.check(rng, r, m, key, opCheck, 1)
	}
}

// check sends a check (or a peek) of n distinct items.
func (pr *phaseRun) check(rng *rand.Rand, r *record, m *member, key string, kind opKind, n int) {
	r.kind = kind
	r.items = pr.items(rng, n)
	pr.send(r, m, key)
}

// items picks n distinct items of the workload's policies.
func (pr *phaseRun) items(rng *rand.Rand, n int) []itemRec {
	policies := []string{"fw", "sw", "tb", "gl", "churn"}
	var items []itemRec
	seen := map[string]bool{}
	for len(items) < n {
		it := itemRec{policy: policies[rng.IntN(len(policies))], subject: pr.subject(rng), cost: 1}
		if rng.IntN(10) == 0 {
			it.cost = 2
		}
		if pr.st.policies[it.policy].global {
			it.subject = "any"
		}
		if k := it.policy + "|" + it.subject; !seen[k] {
			seen[k] = true
			items = append(items, it)
		}
	}
	return items
}

// send sends r's items as a check under their subjects' read locks.
func (pr *phaseRun) send(r *record, m *member, key string) {
	st := pr.st
	pr.locked([]*record{r}, func() {
		if r.forward {
			r.answer = st.forward(r.tenant, m, key, r.items[0].policy, r.items[0].subject)
			return
		}
		if r.viaRLS {
			r.answer = st.rls(r.tenant, m, key, r.items[0].policy, r.items[0].subject)
			return
		}
		r.answer = st.call(r.tenant, "POST", m, key, "/v1/check", checkBody(r))
	})
	r.decode()
	st.model.add(r)
}

// checkBody is the body of /v1/check for r, or one check of a batch.
func checkBody(r *record) map[string]any {
	items := make([]any, len(r.items))
	for i, it := range r.items {
		items[i] = map[string]any{"policy": it.policy, "subject": it.subject, "cost": it.cost}
	}
	body := map[string]any{"items": items}
	if r.kind == opPeek {
		body["mode"] = "peek"
	}
	return body
}

// locked runs call holding the read locks of the subjects rs's items
// count, each once, with each item's epoch recorded.
func (pr *phaseRun) locked(rs []*record, call func()) {
	st := pr.st
	var locks []string
	for _, r := range rs {
		for _, it := range r.items {
			if !st.policies[it.policy].global {
				locks = append(locks, counterKey(r.tenant, r.test, it.policy, it.subject))
			}
		}
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	states := map[string]*subjectState{}
	for _, k := range locks {
		s := st.subjects.get(k)
		s.RLock()
		states[k] = s
	}
	for _, r := range rs {
		for i := range r.items {
			it := &r.items[i]
			if s, ok := states[counterKey(r.tenant, r.test, it.policy, it.subject)]; ok {
				it.epoch = s.epoch
			}
		}
	}
	call()
	for _, k := range locks {
		states[k].RUnlock()
	}
}

// batch sends two to five checks and peeks in one POST /v1/check/batch.
// Each is a record of its own, answered by its result as /v1/check would
// have answered it, so that every invariant holds each alike (a batch is
// its checks made one by one, in some order); an answer that is not a
// result for each check is an answer no check got.
func (pr *phaseRun) batch(rng *rand.Rand, r *record, m *member, key string) {
	st := pr.st
	rs := make([]*record, 2+rng.IntN(4))
	checks := make([]any, len(rs))
	for i := range rs {
		c := *r
		c.kind, c.batched = opCheck, true
		if rng.IntN(4) == 0 {
			c.kind = opPeek
		}
		c.items = pr.items(rng, 1+rng.IntN(2))
		rs[i] = &c
	}
	var a answer
	pr.locked(rs, func() {
		for i, c := range rs {
			checks[i] = checkBody(c)
		}
		a = st.call(r.tenant, "POST", m, key, "/v1/check/batch", map[string]any{"checks": checks})
	})
	var results []json.RawMessage
	if a.err == nil && a.status == 200 {
		var out struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(a.body, &out); err != nil || len(out.Results) != len(rs) {
			a.err = fmt.Errorf("a batch of %d checks answered %d results (%v): %s", len(rs), len(out.Results), err, truncate(a.body, 200))
		}
		results = out.Results
	}
	var known, unknown int64
	for i, c := range rs {
		c.answer = a
		if a.err == nil && a.status == 200 {
			// A result is a decision, or the problem of a ceiling that
			// refused its check, with that problem's status.
			var head struct {
				Status int `json:"status"`
			}
			_ = json.Unmarshal(results[i], &head)
			c.body = results[i]
			if head.Status != 0 {
				c.status = head.Status
			} else {
				known++
			}
		} else if a.err != nil || a.status >= 500 {
			unknown++
		}
		c.decode()
		st.model.add(c)
	}
	r.tenant.counted(r.test, known, unknown)
}

// acquire asks for a lease; owner is the flood goroutine that will renew
// and release it (-1: any worker of the mixed workload).
func (pr *phaseRun) acquire(rng *rand.Rand, r *record, m *member, key, policy, subject string, owner int) *leaseRec {
	st := pr.st
	r.kind = opAcquire
	r.items = []itemRec{{policy: policy, subject: subject, cost: 1}}
	ttl := []string{"1s", "2s", "3s"}[rng.IntN(3)]
	r.answer = pr.call(r.tenant, "POST", m, key, "/v1/leases", map[string]any{"policy": policy, "subject": subject, "ttl": ttl}, owner)
	r.decode()
	st.model.add(r)
	if r.err != nil || r.status != 200 || !r.allowed || r.degraded {
		return nil
	}
	var a leaseAnswer
	if err := json.Unmarshal(r.body, &a); err != nil {
		return nil
	}
	exp, err := time.Parse(time.RFC3339Nano, a.ExpiresAt)
	if err != nil {
		pr.v.add(inv4xx, "lease expires_at %q: %v", a.ExpiresAt, err)
		return nil
	}
	l := &leaseRec{id: a.LeaseID, phase: pr.name, tenant: r.tenant, test: r.test, policy: policy, subject: subject,
		acqStart: r.start, acquired: r.end, expires: exp, lossy: r.lossy, owner: owner, member: m.idx, inFlight: a.InFlight}
	l.key = r.tenant.nt.LiveKey
	if r.test {
		l.key = r.tenant.nt.TestKey
	}
	st.leases.add(l)
	return l
}

func (pr *phaseRun) renew(r *record, m *member, l *leaseRec) {
	r.kind = opRenew
	r.items = []itemRec{{policy: l.policy, subject: l.subject}}
	r.answer = pr.call(nil, "POST", m, l.key, "/v1/leases/"+l.id+"/renew", map[string]any{"ttl": "2s"}, l.owner)
	r.decode()
	pr.st.model.add(r)
	switch {
	case r.err == nil && r.status == 200:
		var a leaseAnswer
		if json.Unmarshal(r.body, &a) == nil {
			if exp, err := time.Parse(time.RFC3339Nano, a.ExpiresAt); err == nil {
				pr.st.leases.renewed(l, exp)
			}
		}
	case r.err == nil && r.status == 404:
		pr.st.leases.end(l, r.start)
	default:
		pr.st.leases.renewLost(l, r.start, 2*time.Second)
	}
}

func (pr *phaseRun) release(r *record, m *member, l *leaseRec) {
	r.kind = opRelease
	r.items = []itemRec{{policy: l.policy, subject: l.subject}}
	pr.st.leases.end(l, time.Now())
	r.answer = pr.call(nil, "DELETE", m, l.key, "/v1/leases/"+l.id, nil, l.owner)
	r.decode()
	pr.st.model.add(r)
}

// reset clears a subject's counter, or drops its leases: the checks of
// the subject before it and after it count apart.
func (pr *phaseRun) reset(r *record, m *member, key, policy, subject string) {
	st := pr.st
	r.kind = opReset
	r.items = []itemRec{{policy: policy, subject: subject}}
	s := st.subjects.get(counterKey(r.tenant, r.test, policy, subject))
	s.Lock()
	r.answer = st.call(nil, "DELETE", m, key, "/v1/policies/"+policy+"/subjects/"+url.PathEscape(subject), nil)
	// A reset answered or not may have cleared the counter: the count
	// starts again either way, which can only make the model lenient.
	s.epoch++
	s.Unlock()
	r.decode()
	st.model.add(r)
	st.leases.resetAt(r.tenant, r.test, policy, subject, r.start, r.end)
}

// changeChurn puts the churn policy with another limit.
func (pr *phaseRun) changeChurn(rng *rand.Rand, r *record, m *member, key string) {
	lim := []int64{3, 5, 8}[rng.IntN(3)]
	raise(&r.tenant.churnMax, lim)
	r.kind = opChange
	p := pr.st.policies["churn"]
	p.limit = lim
	r.answer = pr.st.call(nil, "PUT", m, key, "/v1/policies/churn", p.body())
	r.decode()
	pr.st.model.add(r)
}

// changeOverride puts or deletes an override of the churn policy for one
// of the phase's subjects.
func (pr *phaseRun) changeOverride(rng *rand.Rand, r *record, m *member, key string) {
	subject := pr.subject(rng)
	r.kind = opChange
	path := "/v1/policies/churn/overrides/" + url.PathEscape(subject)
	if rng.IntN(2) == 0 {
		lim := []int64{3, 5, 8}[rng.IntN(3)]
		raise(&r.tenant.churnMax, lim)
		r.answer = pr.st.call(nil, "PUT", m, key, path, map[string]any{"limit": lim, "expires_at": nil})
	} else {
		r.mayRefuse = true // 404: no such override
		r.answer = pr.st.call(nil, "DELETE", m, key, path, nil)
	}
	r.decode()
	pr.st.model.add(r)
}

// raise sets v to n when n is larger.
func raise(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// call sends a request through the flood's client when owner is a flood
// goroutine's, else through the suite's.
func (pr *phaseRun) call(tn *fTenant, method string, m *member, key, path string, body any, owner int) answer {
	if owner >= 0 && pr.floodClient != nil {
		return pr.st.callWith(pr.floodClient, tn, method, m, key, path, body)
	}
	return pr.st.call(tn, method, m, key, path, body)
}

// floodOp is one request of the noisy tenant on its hot subject: mostly
// lease acquires, then renewals and releases of what it holds, checks and
// resets. held is the calling goroutine's leases (owner), nil for the
// mixed workload's hot workers.
func (pr *phaseRun) floodOp(rng *rand.Rand, c *faultClient, m *member, owner int, held *[]*leaseRec) {
	st := pr.st
	tn := st.noisy
	subject := pr.name + ".hot"
	r := &record{phase: pr.name, tenant: tn, member: m.idx, lossy: pr.lossy(tn)}
	var mine []*leaseRec
	if held != nil {
		mine = *held
	}
	switch x := rng.IntN(100); {
	case x < 15 && len(mine) > 0:
		i := rng.IntN(len(mine))
		pr.renew(r, m, mine[i])
		if r.status == 404 {
			*held = slices.Delete(mine, i, i+1)
		}
	case x < 30 && len(mine) > 0:
		i := rng.IntN(len(mine))
		pr.release(r, m, mine[i])
		*held = slices.Delete(mine, i, i+1)
	case x < 40 || held == nil:
		// The mixed workload's noisy tenant only checks: its lease flood
		// is the noisy phases' (on PostgreSQL, issue 23's item 1 would
		// otherwise degrade every phase).
		r.kind = opCheck
		r.items = []itemRec{{policy: hotChecks.name, subject: subject, cost: 1}}
		r.answer = pr.call(tn, "POST", m, tn.nt.LiveKey, "/v1/check", map[string]any{"items": []any{map[string]any{"policy": hotChecks.name, "subject": subject}}}, owner)
		r.decode()
		st.model.add(r)
	case x < 45:
		pr.reset(r, m, tn.nt.LiveKey, hotLeases.name, subject)
		if held != nil {
			*held = nil
		}
	default:
		l := pr.acquire(rng, r, m, tn.nt.LiveKey, hotLeases.name, subject, owner)
		switch {
		case l != nil && held != nil:
			*held = append(*held, l)
		case l != nil:
			// The mixed workload's hot workers give theirs back at once.
			pr.release(&record{phase: pr.name, tenant: tn, member: m.idx, lossy: r.lossy}, m, l)
		}
	}
}

// startQuiet has the quiet tenant check its "2 an hour", ten subjects in
// turn on every instance, until the returned function is called; the
// phase then holds those answers to quietInvariants. Three subjects of ten
// are checked as a proxy checks them, through /v1/forward-auth, and three
// as Envoy does, through the rate limit service (gRPC): a bystander's
// gateways are held to the same counts.
func (pr *phaseRun) startQuiet() (stop func()) {
	st := pr.st
	pr.quietChecked = true
	done := make(chan struct{})
	var quiet sync.WaitGroup
	quiet.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			m := st.members[i%len(st.members)]
			subject := fmt.Sprintf("%s.q%d", pr.name, i%10)
			r := &record{phase: pr.name, kind: opCheck, tenant: st.quiet, member: m.idx, quiet: true, forward: i%10 >= 4 && i%10 < 7, viaRLS: i%10 >= 7,
				items: []itemRec{{policy: twoAnHour.name, subject: subject, cost: 1}}}
			pr.send(r, m, st.quiet.nt.LiveKey)
			time.Sleep(5 * time.Millisecond)
		}
	})
	return func() { close(done); quiet.Wait() }
}

// noisyFlood is a noisy phase: the quiet tenant checks its "2 an hour"
// alone, then beside the noisy tenant's flood from floodPerInstance
// connections on every instance, then alone again.
func (pr *phaseRun) noisyFlood() {
	st := pr.st
	floodDone := make(chan struct{})
	var flood sync.WaitGroup
	stopQuiet := pr.startQuiet()
	time.Sleep(quietFor)
	pr.floodClient = newFaultClient()
	for _, m := range st.members {
		for g := range floodPerInstance {
			owner := m.idx*floodPerInstance + g
			rng := rand.New(rand.NewPCG(pr.s.seed, uint64(pr.seq)<<16|uint64(owner)|1<<15))
			flood.Go(func() {
				var held []*leaseRec
				for {
					select {
					case <-floodDone:
						return
					default:
					}
					pr.floodOp(rng, pr.floodClient, m, owner, &held)
				}
			})
		}
	}
	time.Sleep(floodFor)
	close(floodDone)
	flood.Wait()
	pr.floodClient.closeIdle()
	time.Sleep(quietFor)
	stopQuiet()
}

// storeOutage is a phase that breaks the stack's store (inject) for
// faultFor mid-traffic and mends it (restore); with revokeDuring, the
// phase's key is revoked while the database is away.
func storeOutage(inject func(), restore func() error, revokeDuring bool) func(pr *phaseRun) {
	return func(pr *phaseRun) {
		time.Sleep(phaseBefore)
		pr.faultOn()
		inject()
		if revokeDuring {
			pr.revoke()
		}
		time.Sleep(faultFor)
		if err := restore(); err != nil {
			pr.s.t.Fatalf("phase %s: restore: %v", pr.name, err)
		}
		end := pr.faultOff()
		time.Sleep(phaseAfter)
		if revokeDuring {
			pr.checkRevoked(end, revocationAfterOutage)
		}
	}
}

// changeBeforeOutage (issue 23, item 3) changes two policies of a tenant,
// checks each once on every instance, and cuts the database right after:
// an instance that read the tenant's configuration answers its checks
// during the outage by their fail mode, degraded, never 503.
func changeBeforeOutage(pr *phaseRun) {
	st := pr.st
	tn := st.tenants[1]
	time.Sleep(phaseBefore)
	open, closed := fPolicy{name: "cbo-open", algorithm: "fixed_window", limit: 100_000 + int64(pr.seq), failOpen: true},
		fPolicy{name: "cbo-closed", algorithm: "fixed_window", limit: 100_000 + int64(pr.seq)}
	st.policies[open.name], st.policies[closed.name] = open, closed
	for _, p := range []fPolicy{open, closed} {
		r := &record{phase: pr.name, kind: opChange, tenant: tn, member: 0}
		r.answer = st.call(nil, "PUT", st.members[0], tn.nt.LiveKey, "/v1/policies/"+p.name, p.body())
		r.decode()
		st.model.add(r)
	}
	// An instance has read the change once it answered a check of each
	// policy: one answered for the first may hold a set read between the
	// two changes, whose second notification reaches it later (that
	// instance answers a check of the second with a 503 during the
	// outage, rightly: it never read it).
	var seen []*member
	for _, m := range st.members {
		both := true
		for _, p := range []fPolicy{open, closed} {
			r := &record{phase: pr.name, kind: opCheck, tenant: tn, member: m.idx, mayRefuse: m.idx != 0,
				items: []itemRec{{policy: p.name, subject: pr.name, cost: 1}}}
			pr.send(r, m, tn.nt.LiveKey)
			both = both && r.status == 200
		}
		if both {
			seen = append(seen, m)
		}
	}
	pr.faultOn()
	st.pg.Cut()
	for began := time.Now(); time.Since(began) < faultFor; time.Sleep(50 * time.Millisecond) {
		for _, m := range seen {
			for _, p := range []fPolicy{open, closed} {
				r := &record{phase: pr.name, kind: opCheck, tenant: tn, member: m.idx, strictConfig: true,
					items: []itemRec{{policy: p.name, subject: pr.name, cost: 1}}}
				pr.send(r, m, tn.nt.LiveKey)
				if r.status == 200 && r.degraded && r.allowed != (p.failOpen != pr.s.sabotaged(invFailMode)) {
					pr.v.add(invFailMode, "%s on instance %d: allowed %v", p.name, m.idx, r.allowed)
				}
			}
		}
	}
	if err := st.pg.Restore(); err != nil {
		pr.s.t.Fatalf("phase %s: restore: %v", pr.name, err)
	}
	pr.faultOff()
	time.Sleep(phaseAfter)
}

// clusterMasterKilled kills the master serving the first tenant's slot and
// waits for its replica to take over, then starts the killed node again
// (it rejoins as a replica). Counts its master acknowledged and had not
// yet passed on are lost (asynchronous replication): the model is lenient
// with the tenants of that shard.
func clusterMasterKilled(pr *phaseRun) {
	st, t := pr.st, pr.s.t
	c := st.cluster
	time.Sleep(phaseBefore)
	slot := c.Slot(t, "{"+st.tenants[0].nt.TenantID+"}")
	master := c.MasterOf(t, slot)
	pr.mu.Lock()
	for _, tn := range append(slices.Clone(st.tenants), st.noisy, st.quiet) {
		if c.MasterOf(t, c.Slot(t, "{"+tn.nt.TenantID+"}")) == master {
			pr.lossyTenants[tn] = true
		}
	}
	pr.mu.Unlock()
	pr.faultOn()
	killed := time.Now()
	st.lossyMu.Lock()
	for tn := range pr.lossyTenants {
		st.lossySince[tn] = append(st.lossySince[tn], killed)
	}
	st.lossyMu.Unlock()
	c.Kill(t, master)
	for c.MasterOf(t, slot) == master {
		if time.Since(killed) > 30*time.Second || pr.s.sabotaged(invFailover) {
			pr.v.add(invFailover, "slot %d still on %s 30 s after it was killed", slot, master)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("phase %s: slot %d moved off the killed master %s in %v", pr.name, slot, master, time.Since(killed).Round(time.Millisecond))
	time.Sleep(time.Second)
	c.Restart(t, master)
	c.WaitHealthy(t)
	pr.faultOff()
	time.Sleep(phaseAfter)
}

// instanceStopped kills (SIGKILL) or stops (SIGTERM) the stack's second
// instance mid-traffic and starts another in its place.
func instanceStopped(kill bool) func(pr *phaseRun) {
	return func(pr *phaseRun) {
		st := pr.st
		m := st.members[1]
		time.Sleep(phaseBefore)
		pr.faultOn()
		if kill {
			pr.killed, pr.killedAt = m, time.Now()
			st.kill(m)
		} else {
			took, err := st.term(m)
			pr.s.checks.Add(1)
			if err != nil || pr.s.sabotaged(invSigterm) {
				pr.v.add(invSigterm, "instance %d: %v after %v", m.idx, err, took)
			}
			pr.s.t.Logf("phase %s: instance %d stopped on SIGTERM in %v", pr.name, m.idx, took.Round(time.Millisecond))
		}
		time.Sleep(time.Second)
		st.restart(m)
		pr.faultOff()
		time.Sleep(phaseAfter)
		m.first = st.sample(m)
	}
}
