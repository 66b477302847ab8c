package blackbox

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/solo"

	"google.golang.org/grpc"
)

// knownOpen lists what fails on main because of a defect still open, with
// the item of issue 23 that covers it: a phase ("noisy-leases-postgres"),
// or one invariant of a phase ("postgres-stall/slow"). Their violations are
// logged as "KNOWN OPEN", not failed, so that main stays green; the change
// that fixes an item removes its lines, and the suite then holds main to
// them. Phases are named as the suite prints them, invariants as below.
var knownOpen = map[string]string{}

// The invariants, by the names knownOpen and faultSabotageEnv use.
const (
	invLimits     = "limits"
	invLeases     = "leases"
	invDegraded   = "degraded"
	invQuiet      = "quiet"
	inv5xx        = "5xx"
	invConfig503  = "config-503"
	invSlow       = "slow"
	invAnswered   = "answered"
	inv4xx        = "4xx"
	invRevocation = "revocation"
	invUsage      = "usage"
	invUsageKill  = "usage-sigkill"
	invMulti      = "multi"
	invFailMode   = "fail-mode"
	invFailover   = "failover"
	invSigterm    = "sigterm"
	invFlat       = "flat"
)

// invariants says what each invariant holds.
var invariants = map[string]string{
	invLimits:     "never more admitted than the limit, per policy, subject, key kind, window and reset, across instances (degraded answers apart)",
	invLeases:     "never more lease holders than the limit at any instant",
	invDegraded:   "degraded answers only during a fault or within the grace after it",
	invQuiet:      "a quiet tenant's \"2 an hour\" exact and never degraded beside a noisy one",
	inv5xx:        "no 5xx but documented 503s, and those only during a fault",
	invConfig503:  "no 503 for a tenant whose configuration the instance has read: its policies' fail modes instead",
	invSlow:       "no answer slower than the store deadline plus a margin during a fault",
	invAnswered:   "every running instance answers",
	inv4xx:        "no 4xx but for a reason the workload expects",
	invRevocation: "a revoked key is refused by every instance in time, and never before it is revoked",
	invUsage:      "/v1/usage counts exactly the checks and acquires answered",
	invUsageKill:  "a SIGKILL loses at most one flush interval of the killed instance's usage",
	invMulti:      "a multi-item check is allowed exactly when every item is",
	invFailMode:   "a degraded answer follows its policy's fail mode",
	invFailover:   "a killed cluster master's replica takes over",
	invSigterm:    "an instance stops cleanly and soon on SIGTERM",
	invFlat:       "every process's goroutines and resident memory flat over the run",
	invWebhooks:   "every webhook delivery committed reaches its receiver once the store is back, none lost",
}

// Environment of TestFaultSuite.
const (
	// faultSeedEnv seeds the workload's randomness (which tenant, key,
	// instance, policy, subject and operation come next, and the order of
	// the phases of a cycle); unset, the time picks one and the suite
	// prints it.
	faultSeedEnv = "TOLLGATE_FAULT_SEED"
	// faultDurationEnv is how long the suite runs its phases: they repeat,
	// cycle after cycle, until it is used (a Go duration; `make soak`
	// sets it). Unset, one cycle runs.
	faultDurationEnv = "TOLLGATE_FAULT_DURATION"
	// faultSabotageEnv names invariants (comma-separated, or "all") that
	// the suite tightens past what the service promises, to show that
	// each can fail: a run with it set must fail on each one named.
	faultSabotageEnv = "TOLLGATE_FAULT_SABOTAGE"
	// faultPhasesEnv restricts the run to the phases whose names contain
	// one of its comma-separated words (all stacks start all the same).
	faultPhasesEnv = "TOLLGATE_FAULT_PHASES"
	// faultDeadlineEnv is the instances' counter store deadline
	// (TOLLGATE_COUNTER_TIMEOUT), defaultFaultDeadline unless set.
	faultDeadlineEnv = "TOLLGATE_FAULT_COUNTER_TIMEOUT"
)

// Timing of the suite. The box the suite runs on has two cores shared with
// other work, so every bound is generous; each is one of the README's
// promises with room for a loaded scheduler.
const (
	// defaultFaultDeadline is the instances' counter store deadline: the
	// production default. A healthy PostgreSQL that answers late on a
	// starved CPU is waited for (its store's await and probe), so the
	// invariants on degraded answers hold at 50 ms on this 2-core box too.
	defaultFaultDeadline = 50 * time.Millisecond
	// slowMargin is what an answer may take past the deadline while a
	// fault is active: a loaded 2-core box delays a process by hundreds of
	// milliseconds now and then, never by a second and a half.
	slowMargin = 1500 * time.Millisecond
	// recoveryGrace is how long after a fault ends degraded answers and
	// documented 503s may still come (a circuit breaker's probe, pools
	// reconnecting, a cluster's slot map refreshing).
	recoveryGrace = 5 * time.Second
	// revocationWithin is how soon a revoked key must be refused by every
	// instance ("within a second" in the README, three here), and
	// revocationAfterOutage how soon after an outage of the database
	// during which it was revoked.
	revocationWithin      = 3 * time.Second
	revocationAfterOutage = 6 * time.Second
	// usageWithin is how long the suite waits for /v1/usage to show what
	// the workload was answered (instances flush every second).
	usageWithin = 8 * time.Second
)

// TestFaultSuite runs real Tollgate processes on four stacks (counters in
// PostgreSQL, in one Redis, in a Redis Cluster, in one instance's memory)
// under a seeded mixed
// workload of several tenants — checks of every algorithm, peeks,
// multi-item checks, global policies, leases acquired, renewed, released
// and left to expire, resets, policy and override changes, test keys, key
// revocations — while each phase injects one fault: the database cut or
// stalled, a change made just before the database goes, Redis cut, a
// cluster master killed, an instance killed (SIGKILL) or stopped (SIGTERM)
// mid-traffic, a noisy tenant flooding one lease subject from 32
// connections on every instance, and a hostile neighbour taking as much as
// it can of each resource the parties of an instance share
// (faulthostile_test.go). After each phase it holds every answer to
// a reference model (faultmodel_test.go): never more admitted than a
// limit allows, degraded answers and documented 503s only during a fault,
// no other 5xx, no slow answer during a fault, never more lease holders
// than the limit, usage equal to what was answered, revoked keys refused
// everywhere; at the end, every process's goroutines and memory flat.
//
//	TOLLGATE_FAULT_SEED=42 go test -count=1 -run TestFaultSuite -v ./blackbox/
//	make soak DURATION=30m
func TestFaultSuite(t *testing.T) {
	solo.Alone(t) // it loads both cores, and must not be squeezed by other tests
	s := newSuite(t)
	defer s.summary()
	stacks := []*stack{s.postgresStack(), s.redisStack(), s.clusterStack()}
	pg, rd, cl := stacks[0], stacks[1], stacks[2]
	// One instance with its counters in memory: no fault of a store, no
	// kill (its counters die with it), only the neighbour that floods its
	// table.
	mem := s.memoryStack()
	for cycle := 0; ; cycle++ {
		// Kills and stops take turns over the stacks, cycle after cycle.
		victim := stacks[cycle%len(stacks)]
		phases := []phaseSpec{
			{name: "postgres-cut", st: pg, body: withWebhooks(storeOutage(pg.pg.Cut, pg.pg.Restore, true))},
			{name: "postgres-stall", st: pg, body: storeOutage(pg.pg.Stall, pg.pg.Restore, false)},
			{name: "change-before-outage", st: pg, body: changeBeforeOutage},
			{name: "redis-cut", st: rd, body: storeOutage(rd.redis.Cut, rd.redis.Restore, false)},
			{name: "reservations-" + pg.name, st: pg, body: reservationsUnderOutage(pg.pg.Cut, pg.pg.Restore)},
			{name: "reservations-" + rd.name, st: rd, body: reservationsUnderOutage(rd.redis.Cut, rd.redis.Restore)},
			{name: "cluster-master-killed", st: cl, body: clusterMasterKilled},
			{name: "instance-sigkill-" + victim.name, st: victim, body: instanceStopped(true)},
			{name: "instance-sigterm-" + victim.name, st: victim, body: instanceStopped(false)},
			{name: "noisy-leases-" + pg.name, st: pg, noisy: true},
			{name: "noisy-leases-" + rd.name, st: rd, noisy: true},
			{name: "noisy-leases-" + cl.name, st: cl, noisy: true},
			{name: "hostile-keyless-bodies-" + pg.name, st: pg, body: hostileNeighbour(keylessBodies)},
			{name: "hostile-tenant-bodies-" + rd.name, st: rd, body: hostileNeighbour(tenantBodies)},
			{name: "hostile-keyless-conns-" + cl.name, st: cl, body: hostileNeighbour(keylessConns)},
			{name: "hostile-new-subjects-" + mem.name, st: mem, body: hostileNeighbour(newSubjects)},
			{name: "hostile-webhooks-" + mem.name, st: mem, body: hostileNeighbour(hangingWebhooks)},
			{name: "hostile-batches-" + pg.name, st: pg, body: hostileNeighbour(batchFlood)},
			{name: "hostile-batches-" + rd.name, st: rd, body: hostileNeighbour(batchFlood)},
			{name: "hostile-resets-" + pg.name, st: pg, body: hostileNeighbour(resetFlood)},
			{name: "hostile-resets-" + rd.name, st: rd, body: hostileNeighbour(resetFlood)},
		}
		if cycle > 0 {
			s.rng.Shuffle(len(phases), func(i, j int) { phases[i], phases[j] = phases[j], phases[i] })
		}
		for _, ps := range phases {
			if s.selected(ps.name) {
				s.runPhase(cycle, ps)
			}
		}
		if time.Since(s.began) >= s.duration {
			break
		}
	}
	for _, st := range append(stacks, mem) {
		s.checkFlat(st)
	}
}

// suite is one run of TestFaultSuite.
type suite struct {
	t *testing.T
	// rlsConns are the suite's connections to the instances' rate limit
	// services, by address.
	rlsMu    sync.Mutex
	rlsConns map[string]*grpc.ClientConn
	seed     uint64
	rng      *rand.Rand
	duration time.Duration
	began    time.Time
	sabotage map[string]bool
	http     *faultClient
	// deadline is the instances' TOLLGATE_COUNTER_TIMEOUT.
	deadline time.Duration

	// Counts for the summary.
	ops, faults, checks atomic.Int64
	phases              []string
	mu                  sync.Mutex
	known               []string
}

func newSuite(t *testing.T) *suite {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(faultSeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not a number", faultSeedEnv, v)
		}
		seed = n
	}
	var d time.Duration
	if v := os.Getenv(faultDurationEnv); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", faultDurationEnv, v, err)
		}
	}
	deadline := defaultFaultDeadline
	if v := os.Getenv(faultDeadlineEnv); v != "" {
		var err error
		if deadline, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", faultDeadlineEnv, v, err)
		}
	}
	s := &suite{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0)), duration: d, began: time.Now(),
		sabotage: map[string]bool{}, http: newFaultClient(), deadline: deadline}
	for _, name := range strings.Split(os.Getenv(faultSabotageEnv), ",") {
		if name = strings.TrimSpace(name); name != "" {
			s.sabotage[name] = true
		}
	}
	t.Logf("fault suite: seed %d (rerun with %s=%d), duration %v, counter store deadline %v", seed, faultSeedEnv, seed, d, deadline)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fault suite failed: rerun with %s=%d", faultSeedEnv, seed)
		}
	})
	return s
}

// sabotaged reports whether invariant is to be tightened past the
// service's promise (faultSabotageEnv).
func (s *suite) sabotaged(invariant string) bool {
	return s.sabotage[invariant] || s.sabotage["all"]
}

// selected reports whether the phase is one faultPhasesEnv asks for.
func (s *suite) selected(phase string) bool {
	words := os.Getenv(faultPhasesEnv)
	if words == "" {
		return true
	}
	for _, w := range strings.Split(words, ",") {
		if w = strings.TrimSpace(w); w != "" && strings.Contains(phase, w) {
			return true
		}
	}
	return false
}

// summary logs the run's counts.
func (s *suite) summary() {
	s.t.Logf("fault suite: %d phases (%s) in %v: %d operations, %d faults injected, %d invariant checks; seed %d",
		len(s.phases), strings.Join(s.phases, ", "), time.Since(s.began).Round(time.Second),
		s.ops.Load(), s.faults.Load(), s.checks.Load(), s.seed)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) > 0 {
		slices.Sort(s.known)
		s.t.Logf("fault suite: known open phases that failed: %s", strings.Join(slices.Compact(s.known), ", "))
	}
}

// verdict reports a phase's violations: failures, unless known open.
func (s *suite) verdict(phase string, v *violations) {
	s.t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	var failed, known []string
	for _, inv := range slices.Sorted(maps.Keys(v.counts)) {
		line := v.describe(inv)
		why, ok := knownOpen[phase+"/"+inv]
		if !ok {
			why, ok = knownOpen[phase]
		}
		if ok {
			known = append(known, fmt.Sprintf("%s (%s)", line, why))
			s.mu.Lock()
			s.known = append(s.known, phase+"/"+inv)
			s.mu.Unlock()
		} else {
			failed = append(failed, line)
		}
	}
	for key, why := range knownOpen {
		name, inv, _ := strings.Cut(key, "/")
		if name == phase && (inv == "" && len(v.counts) == 0 || inv != "" && v.counts[inv] == 0) {
			s.t.Logf("phase %s held %s though it is known open (%s): remove %q from knownOpen if it keeps holding", phase, cmp.Or(inv, "everything"), why, key)
		}
	}
	if len(known) > 0 {
		s.t.Logf("KNOWN OPEN: phase %s:%s", phase, strings.Join(known, ""))
	}
	if len(failed) > 0 {
		s.t.Errorf("phase %s:%s\nrerun with %s=%d", phase, strings.Join(failed, ""), faultSeedEnv, s.seed)
	}
}

// violations collects what broke an invariant, a few examples of each.
type violations struct {
	mu       sync.Mutex
	counts   map[string]int
	examples map[string][]string
}

func (v *violations) add(invariant, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.counts == nil {
		v.counts, v.examples = map[string]int{}, map[string][]string{}
	}
	v.counts[invariant]++
	if len(v.examples[invariant]) < 5 {
		v.examples[invariant] = append(v.examples[invariant], fmt.Sprintf(format, args...))
	}
}

// describe is one invariant's violations, with examples; v.mu is held.
func (v *violations) describe(inv string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %s — %s: %d violation(s), e.g.", inv, invariants[inv], v.counts[inv])
	for _, e := range v.examples[inv] {
		fmt.Fprintf(&b, "\n    %s", e)
	}
	return b.String()
}
