package blackbox

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The reference model of TestFaultSuite: every answer the workload got, as
// records, and the invariants they must keep.

// opKind is what a record asked.
type opKind int

const (
	opCheck opKind = iota
	opPeek
	opAcquire
	opRenew
	opRelease
	opReset
	opChange
)

var opNames = [...]string{"check", "peek", "acquire", "renew", "release", "reset", "change"}

func (k opKind) String() string { return opNames[k] }

// record is one request of the workload and its answer.
type record struct {
	phase  string
	kind   opKind
	tenant *fTenant
	test   bool
	// extra is set when the request used the phase's revocable key.
	extra  bool
	items  []itemRec
	member int
	answer
	allowed, degraded bool
	inFlight          int64
	problem           string
	// lossy is set for a tenant whose counters may have lost writes
	// (a cluster master killed under it: replication is asynchronous).
	lossy bool
	// mayRefuse is set for a request the workload made knowing it may be
	// refused with a 4xx (a policy another instance may not know yet).
	mayRefuse bool
	// quiet is set for the quiet tenant's checks beside a noisy one.
	quiet bool
	// batched is set for a check (or peek) sent in a batch.
	batched bool
	// strictConfig is set for a check of a tenant whose configuration the
	// instance has read: during an outage of the database it is answered
	// by the policy's fail mode, never 503 (issue 23, item 3).
	strictConfig bool
	// forward is set for a check of one item sent as a proxy would, to
	// /v1/forward-auth (stack.forward); viaRLS for one sent as Envoy
	// would, to the rate limit service (stack.rls).
	forward, viaRLS bool
}

// itemRec is one item of a check.
type itemRec struct {
	policy, subject string
	cost            int64
	epoch           int
}

// decode fills what the record's answer says.
func (r *record) decode() {
	if r.forward && r.err == nil {
		// Forward auth answers in statuses: 200 allowed, 429 of layer
		// "policy" refused by the policy, which the model reads as
		// /v1/check's 200 with allowed false; any other answer as it is.
		r.degraded = r.header.Get("X-Tollgate-Degraded") == "true"
		switch {
		case r.status == 200:
			r.allowed = true
			return
		case r.status == 429 && forwardLayer(r.answer) == "policy":
			r.status = 200
			return
		}
	}
	if r.err != nil || len(r.body) == 0 {
		return
	}
	switch {
	case r.status == 200:
		var a struct {
			Allowed  *bool `json:"allowed"`
			Degraded bool  `json:"degraded"`
			InFlight int64 `json:"in_flight"`
		}
		if json.Unmarshal(r.body, &a) == nil {
			r.allowed = a.Allowed != nil && *a.Allowed
			r.degraded = a.Degraded
			r.inFlight = a.InFlight
		}
	case r.status >= 400:
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(r.body, &p) == nil {
			r.problem = p.Type[strings.LastIndex(p.Type, "/")+1:]
		}
	}
}

// model holds a stack's records.
type model struct {
	mu      sync.Mutex
	records []*record
}

func (m *model) add(r *record) {
	m.mu.Lock()
	m.records = append(m.records, r)
	m.mu.Unlock()
}

// subjectLocks order checks and resets of one counter: a check holds its
// items' subjects for reading, a reset its subject for writing, so every
// check is before or after a reset, never beside it, and the model knows
// which count (epoch) it belongs to.
type subjectLocks struct {
	mu sync.Mutex
	m  map[string]*subjectState
}

type subjectState struct {
	sync.RWMutex
	epoch int
}

func counterKey(tn *fTenant, test bool, policy, subject string) string {
	return fmt.Sprintf("%s|%v|%s|%s", tn.label, test, policy, subject)
}

func (l *subjectLocks) get(key string) *subjectState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[key]
	if !ok {
		s = &subjectState{}
		l.m[key] = s
	}
	return s
}

// leaseBook tracks every lease the workload was granted, so that the
// model can count holders at every instant.
type leaseBook struct {
	mu     sync.Mutex
	all    []*leaseRec
	byID   map[string]*leaseRec
	resets []leaseReset
}

// leaseReset is a reset of a concurrency policy's subject: it drops the
// leases acquired before it, and maybe those acquired while it ran.
type leaseReset struct {
	tenant          *fTenant
	test            bool
	policy, subject string
	start, end      time.Time
}

// leaseRec is one lease, as the answers tell of it: held for sure from the
// end of its acquire until the earliest of its last known expiry and the
// start of whatever ended it (a release, a reset, a renewal answered 404).
type leaseRec struct {
	id, phase string
	tenant    *fTenant
	test      bool
	key       string
	policy    string
	subject   string
	acqStart  time.Time
	acquired  time.Time
	expires   time.Time
	ended     time.Time
	lossy     bool
	// owner is the flood goroutine that holds it, or -1 for the mixed
	// workload's shared leases.
	owner int
	// member is the instance that granted it, and inFlight what its
	// answer said.
	member   int
	inFlight int64
}

func (b *leaseBook) add(l *leaseRec) {
	b.mu.Lock()
	b.all = append(b.all, l)
	b.byID[l.id] = l
	b.mu.Unlock()
}

// end marks l ended no later than at.
func (b *leaseBook) end(l *leaseRec, at time.Time) {
	b.mu.Lock()
	if l.ended.IsZero() || at.Before(l.ended) {
		l.ended = at
	}
	b.mu.Unlock()
}

// renewed sets l's expiry to at, what a renewal answered: now + its ttl,
// which may be earlier than the expiry before it (a lease of 3 s renewed
// for 2 s after a fraction of a second ends sooner).
func (b *leaseBook) renewed(l *leaseRec, at time.Time) {
	b.mu.Lock()
	l.expires = at
	b.mu.Unlock()
}

// renewLost notes a renewal sent at start for ttl whose answer was lost:
// it may have set the expiry to as early as start + ttl, so the lease is
// held for sure only until then (the model may count one holder too few
// afterwards, never one too many).
func (b *leaseBook) renewLost(l *leaseRec, start time.Time, ttl time.Duration) {
	b.mu.Lock()
	if at := start.Add(ttl); at.Before(l.expires) {
		l.expires = at
	}
	b.mu.Unlock()
}

// resetAt records a reset of a subject that ran from start to end.
func (b *leaseBook) resetAt(tn *fTenant, test bool, policy, subject string, start, end time.Time) {
	b.mu.Lock()
	b.resets = append(b.resets, leaseReset{tn, test, policy, subject, start, end})
	b.mu.Unlock()
}

// pick returns a lease of the mixed workload that may still be held, or
// nil.
func (b *leaseBook) pick(n int) *leaseRec {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var live []*leaseRec
	for i := len(b.all) - 1; i >= 0 && len(live) < 16; i-- {
		l := b.all[i]
		if l.owner < 0 && l.ended.IsZero() && l.expires.After(now) {
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[n%len(live)]
}

// evaluate holds the phase's records to every invariant and adds what
// breaks one to v.
func (pr *phaseRun) evaluate() {
	st := pr.st
	st.model.mu.Lock()
	defer st.model.mu.Unlock()
	var mine []*record
	for _, r := range st.model.records {
		if r.phase == pr.name {
			mine = append(mine, r)
		}
	}
	pr.tally(mine)
	for _, r := range mine {
		pr.answerInvariants(r)
	}
	pr.countInvariants(st.model.records)
	pr.leaseInvariants()
	if pr.quietChecked {
		pr.quietInvariants(mine)
	}
	// Only the records of global policies can matter to a later phase:
	// every other counter's subjects are the phase's own.
	kept := st.model.records[:0]
	hour := time.Now().Unix() / 3600
	for _, r := range st.model.records {
		if r.end.Unix()/3600 < hour-1 {
			continue
		}
		for _, it := range r.items {
			if st.policies[it.policy].global {
				kept = append(kept, r)
				break
			}
		}
	}
	clear(st.model.records[len(kept):])
	st.model.records = kept
	st.leases.mu.Lock()
	st.leases.all, st.leases.byID, st.leases.resets = nil, map[string]*leaseRec{}, nil
	st.leases.mu.Unlock()
	st.subjects.mu.Lock()
	st.subjects.m = map[string]*subjectState{}
	st.subjects.mu.Unlock()
}

// tally logs what the phase's workload was answered.
func (pr *phaseRun) tally(rs []*record) {
	byKind := map[string]int{}
	for _, r := range rs {
		k := r.kind.String()
		if r.batched {
			k = "batch-" + k
		}
		switch {
		case r.err != nil:
			k += ":no-answer"
		case r.status != 200:
			k += fmt.Sprintf(":%d", r.status)
		case r.degraded:
			k += ":degraded"
		case r.allowed || r.kind == opRenew || r.kind == opRelease || r.kind == opReset || r.kind == opChange:
			k += ":ok"
		default:
			k += ":refused"
		}
		byKind[k]++
	}
	keys := make([]string, 0, len(byKind))
	for k := range byKind {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, byKind[k])
	}
	pr.s.t.Logf("phase %s: %d requests:%s", pr.name, len(rs), b.String())
}

// inFault reports whether [from, to] overlaps a fault of the phase, and
// whether it overlaps one extended by recoveryGrace.
func (pr *phaseRun) inFault(from, to time.Time) (during, grace bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, f := range pr.faults {
		if f.overlaps(from, to) {
			during = true
		}
		if (interval{f.from, f.end().Add(recoveryGrace)}).overlaps(from, to) {
			grace = true
		}
	}
	// A fault of the stack's phase before this one may still be within
	// its grace when this phase begins.
	pr.st.mu.Lock()
	for _, f := range pr.st.past {
		if (interval{f.from, f.end().Add(recoveryGrace)}).overlaps(from, to) {
			grace = true
		}
	}
	pr.st.mu.Unlock()
	if pr.s.sabotaged("degraded") {
		grace = false
	}
	return during, grace
}

// answerInvariants holds one answer to what any answer must be.
func (pr *phaseRun) answerInvariants(r *record) {
	s, v := pr.s, &pr.v
	during, grace := pr.inFault(r.start, r.end)
	what := func() string {
		return fmt.Sprintf("%s %s by %s (test %v) on instance %d at %s, took %v: %d %s %v",
			r.kind, itemsString(r.items), r.tenant.label, r.test, r.member, r.start.Format("15:04:05.000"),
			r.end.Sub(r.start).Round(time.Millisecond), r.status, truncate(r.body, 200), r.err)
	}
	s.checks.Add(4)
	m := pr.st.members[r.member]
	switch {
	case r.err != nil:
		if !m.wasDown(r.start.Add(-time.Second), r.end) || s.sabotaged(invAnswered) {
			v.add(invAnswered, "%s", what())
		}
		return
	case r.status == 503 && r.strictConfig, r.strictConfig && s.sabotaged(invConfig503):
		v.add(invConfig503, "%s", what())
	case r.status >= 500:
		if r.status != 503 || (r.problem != "unavailable" && r.problem != "store-unavailable") || !grace || s.sabotaged(inv5xx) {
			v.add(inv5xx, "%s", what())
		}
		if r.status == 503 {
			pr.count503.Add(1)
		}
	case r.status == 401:
		if !r.extra || r.revokedBefore() {
			break
		}
		v.add(invRevocation, "%s", what())
	case r.status == 429:
		// A ceiling's refusal: data.
	case r.status == 404 && (r.kind == opRenew || r.kind == opRelease) && !s.sabotaged(inv4xx):
		// A lease that is gone: expired, released or reset.
	case r.status >= 400:
		if !r.mayRefuse {
			v.add(inv4xx, "%s", what())
		}
	}
	if r.status == 200 && r.extra && r.revokedLongBefore() {
		v.add(invRevocation, "%s", what())
	}
	if r.degraded {
		pr.countDegraded.Add(1)
		if r.quiet {
			v.add(invQuiet, "%s", what())
		} else if !grace {
			v.add(invDegraded, "%s", what())
		}
	}
	slowest := s.deadline + slowMargin
	if s.sabotaged("slow") {
		slowest = 0
	}
	if (during || pr.underAttack(r.start, r.end)) && r.kind != opChange && r.kind != opReset && r.end.Sub(r.start) > slowest {
		v.add(invSlow, "%s", what())
	}
	if r.kind == opAcquire && r.status == 200 && !r.degraded {
		limit := pr.st.policies[r.items[0].policy].limit
		if s.sabotaged("leases") {
			limit--
		}
		if r.inFlight > limit {
			v.add(invLeases, "in_flight %d > %d: %s", r.inFlight, limit, what())
		}
	}
	if r.kind == opCheck && r.status == 200 && !r.degraded && len(r.items) > 1 {
		var a checkAnswer
		if json.Unmarshal(r.body, &a) == nil && len(a.Items) == len(r.items) {
			all := true
			for _, it := range a.Items {
				all = all && it.Allowed
			}
			if a.Allowed != all || s.sabotaged(invMulti) {
				v.add(invMulti, "allowed %v, items %+v: %s", a.Allowed, a.Items, what())
			}
		}
	}
}

// revokedBefore reports whether the record's key was revoked before it
// was answered.
func (r *record) revokedBefore() bool {
	r.tenant.mu.Lock()
	defer r.tenant.mu.Unlock()
	return !r.tenant.revokedAt.IsZero() && r.tenant.revokedAt.Before(r.end)
}

// revokedLongBefore reports whether the record's key had been revoked for
// longer than an instance may take to learn it.
func (r *record) revokedLongBefore() bool {
	r.tenant.mu.Lock()
	defer r.tenant.mu.Unlock()
	return !r.tenant.revokeDeadline.IsZero() && r.tenant.revokeDeadline.Before(r.start)
}

// countInvariants counts what was admitted per counter, window and reset:
// never more than the limit. Degraded answers count for nothing (a
// fail-open answer is not counted by the store) and are held to
// answerInvariants instead.
func (pr *phaseRun) countInvariants(all []*record) {
	st, s, v := pr.st, pr.s, &pr.v
	type admitted struct {
		r    *record
		cost int64
	}
	groups := map[string][]admitted{}
	buckets := map[string][]admitted{}
	for _, r := range all {
		if r.kind != opCheck || r.err != nil || r.status != 200 || !r.allowed || r.degraded {
			continue
		}
		for _, it := range r.items {
			p := st.policies[it.policy]
			subject := it.subject
			if p.global {
				subject = ""
			}
			key := counterKey(r.tenant, r.test, it.policy, subject) + fmt.Sprintf("|%d", it.epoch)
			if p.algorithm == "token_bucket" {
				buckets[key] = append(buckets[key], admitted{r, it.cost})
				continue
			}
			// An answer whose request spans the end of an hour may be in
			// either window: it is counted in neither.
			w0, w1 := r.start.Unix()/3600, r.end.Unix()/3600
			if w0 != w1 {
				continue
			}
			groups[fmt.Sprintf("%s|w%d", key, w0)] = append(groups[fmt.Sprintf("%s|w%d", key, w0)], admitted{r, it.cost})
		}
	}
	for key, as := range groups {
		if !slices.ContainsFunc(as, func(a admitted) bool { return a.r.phase == pr.name }) {
			continue
		}
		s.checks.Add(1)
		slices.SortFunc(as, func(a, b admitted) int { return a.r.end.Compare(b.r.end) })
		policy := strings.Split(key, "|")[2]
		limit := st.policies[policy].limit
		if policy == "churn" {
			limit = as[0].r.tenant.churnMax.Load()
		}
		if s.sabotaged("limits") {
			limit--
		}
		var sum int64
		for i, a := range as {
			sum += a.cost
			if sum <= limit {
				continue
			}
			// Reported in the phase of the answer that went past the limit.
			if a.r.phase != pr.name {
				break
			}
			lossy := slices.ContainsFunc(as[:i+1], func(a admitted) bool { return a.r.lossy }) || st.lossyAt(a.r.tenant, a.r.start)
			if lossy {
				pr.lossyExcess.Add(1)
				pr.s.t.Logf("phase %s: counter %s admitted %d > %d after a master with its writes was killed (asynchronous replication; not an error)", pr.name, key, sum, limit)
				break
			}
			v.add(invLimits, "counter %s (%s, limit %d): %d admitted, the last %s at %s on instance %d",
				key, st.policies[policy].algorithm, limit, sum, a.r.kind, a.r.end.Format("15:04:05.000"), a.r.member)
			break
		}
	}
	for key, as := range buckets {
		if !slices.ContainsFunc(as, func(a admitted) bool { return a.r.phase == pr.name }) {
			continue
		}
		s.checks.Add(1)
		slices.SortFunc(as, func(a, b admitted) int { return a.r.end.Compare(b.r.end) })
		p := st.policies[strings.Split(key, "|")[2]]
		first := as[0].r.start
		var sum int64
		for _, a := range as {
			sum += a.cost
			// GCRA: at most limit + t·limit/window over any period t.
			bound := p.limit + int64(float64(p.limit)*a.r.end.Sub(first).Hours())
			if s.sabotaged("limits") {
				bound--
			}
			if sum > bound {
				if a.r.lossy {
					pr.lossyExcess.Add(1)
					break
				}
				v.add(invLimits, "token bucket %s (limit %d an hour): %d admitted in %v",
					key, p.limit, sum, a.r.end.Sub(first).Round(time.Millisecond))
				break
			}
		}
	}
}

// lossyAt reports whether tn's counters may have lost writes in the hour
// of at.
func (st *stack) lossyAt(tn *fTenant, at time.Time) bool {
	st.lossyMu.Lock()
	defer st.lossyMu.Unlock()
	for _, k := range st.lossySince[tn] {
		if k.Unix()/3600 == at.Unix()/3600 {
			return true
		}
	}
	return false
}

// leaseInvariants counts the holders of every subject at every instant,
// from the answers: never more than the limit.
func (pr *phaseRun) leaseInvariants() {
	st, s, v := pr.st, pr.s, &pr.v
	st.leases.mu.Lock()
	defer st.leases.mu.Unlock()
	type event struct {
		at    time.Time
		delta int
		l     *leaseRec
	}
	bySubject := map[string][]event{}
	for _, l := range st.leases.all {
		if l.phase != pr.name {
			continue
		}
		// The store's clock and ours are the machine's; a margin for the
		// milliseconds expires_at is rounded to.
		until := l.expires.Add(-50 * time.Millisecond)
		if !l.ended.IsZero() && l.ended.Before(until) {
			until = l.ended
		}
		for _, r := range st.leases.resets {
			if r.tenant == l.tenant && r.test == l.test && r.policy == l.policy && r.subject == l.subject &&
				l.acqStart.Before(r.end) && r.start.Before(until) {
				until = r.start
			}
		}
		if !until.After(l.acquired) {
			continue
		}
		k := counterKey(l.tenant, l.test, l.policy, l.subject)
		bySubject[k] = append(bySubject[k], event{l.acquired, 1, l}, event{until, -1, l})
	}
	for k, evs := range bySubject {
		s.checks.Add(1)
		slices.SortFunc(evs, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.delta - b.delta
		})
		limit := st.policies[evs[0].l.policy].limit
		if s.sabotaged("leases") {
			limit--
		}
		held, most, lossy := 0, 0, false
		var at time.Time
		holding := map[*leaseRec]bool{}
		var holders string
		for _, e := range evs {
			held += e.delta
			holding[e.l] = e.delta > 0
			lossy = lossy || e.l.lossy
			if held > most {
				most, at = held, e.at
				var b strings.Builder
				for l, h := range holding {
					if h {
						fmt.Fprintf(&b, "\n      %s on instance %d: acquired %s–%s (in flight %d), expires %s, ended %s",
							l.id, l.member, l.acqStart.Format("05.000"), l.acquired.Format("05.000"), l.inFlight, l.expires.Format("05.000"), l.ended.Format("05.000"))
					}
				}
				holders = b.String()
			}
		}
		if most > int(limit) {
			if lossy {
				pr.lossyExcess.Add(1)
				continue
			}
			v.add(invLeases, "%s: %d holders at %s, limit %d:%s", k, most, at.Format("15:04:05.000"), limit, holders)
		}
	}
}

// quietInvariants: beside a noisy tenant, the quiet one's "2 an hour" is
// exact — each subject asked at least twice admitted exactly twice.
func (pr *phaseRun) quietInvariants(rs []*record) {
	s, v := pr.s, &pr.v
	// The policy's window is a clock hour: a phase that runs over the hour
	// admits two a subject in each. Counted per subject and hour; an
	// answer that began in one hour and ended in the next could be either,
	// so such a subject is not held to the count.
	answered, admitted, straddles := map[string]int{}, map[string]int{}, map[string]bool{}
	for _, r := range rs {
		if !r.quiet || r.err != nil || r.status != 200 {
			continue
		}
		hour := r.start.Unix() / 3600
		if r.end.Unix()/3600 != hour {
			straddles[r.items[0].subject] = true
		}
		key := fmt.Sprintf("%s@%d", r.items[0].subject, hour)
		answered[key]++
		if r.allowed && !r.degraded {
			admitted[key]++
		}
	}
	for key := range answered {
		if straddles[key[:strings.LastIndexByte(key, '@')]] {
			delete(answered, key)
		}
	}
	want := 2
	if s.sabotaged("quiet") {
		want = 3
	}
	for subject, n := range answered {
		s.checks.Add(1)
		if n >= want && admitted[subject] != want {
			v.add(invQuiet, "subject %s (in that clock hour): %d of %d checks admitted, want %d", subject, admitted[subject], n, want)
		}
	}
	if len(answered) == 0 && len(straddles) == 0 {
		v.add(invQuiet, "no check of the quiet tenant answered 200")
	}
}

func itemsString(items []itemRec) string {
	var parts []string
	for _, it := range items {
		parts = append(parts, fmt.Sprintf("%s/%s×%d", it.policy, it.subject, it.cost))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
