package blackbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// stack is a group of Tollgate instances on one database (and, for the
// Redis stacks, one counter store), with the tenants of the workload and
// the reference model of what they were answered.
type stack struct {
	s    *suite
	name string
	// dsn is the database's own address, for the CLI; served is the one
	// the instances get (through pg, when the stack cuts the database).
	dsn, served string
	pg          *faultnet.Proxy
	redis       *faultnet.Proxy
	cluster     *redistest.Cluster
	env         []string

	mu      sync.Mutex
	members []*member
	// past is every fault of the stack's earlier phases: degraded answers
	// may follow one for recoveryGrace, into the next phase.
	past []interval

	// tenants are the mixed workload's; noisy floods, quiet counts "2 an
	// hour" beside it.
	tenants     []*fTenant
	noisy       *fTenant
	quiet       *fTenant
	policies    map[string]fPolicy
	model       *model
	subjects    subjectLocks
	leases      *leaseBook
	lossySince  map[*fTenant][]time.Time
	lossyMu     sync.Mutex
	usageReads  atomic.Int64
	usageLosses []string
	// hooks receives the tenants' webhooks (the PostgreSQL and memory
	// stacks'); hostiles are the tenants of hangingWebhooks.
	hooks    *stackHooks
	hostiles []newTenant
	// fresh: each phase starts the stack's instances anew (memoryStack).
	fresh bool
}

// member is one instance position of a stack: its process changes when the
// suite kills or stops it and starts another.
type member struct {
	idx int

	mu   sync.Mutex
	in   *instance
	down []interval
	// first is the process's goroutines and memory when it was warm,
	// last at the end of the run.
	first sample
}

func (m *member) base() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.in.base
}

func (m *member) current() *instance {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.in
}

// wasDown reports whether m was not serving at some point of [from, to].
func (m *member) wasDown(from, to time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.down {
		if d.overlaps(from, to) {
			return true
		}
	}
	return false
}

// interval is a stretch of time; a zero to is still open.
type interval struct{ from, to time.Time }

func (iv interval) end() time.Time {
	if iv.to.IsZero() {
		return time.Now()
	}
	return iv.to
}

func (iv interval) overlaps(from, to time.Time) bool {
	return !to.Before(iv.from) && !from.After(iv.end())
}

// fTenant is a tenant of the suite.
type fTenant struct {
	label string
	nt    newTenant

	mu sync.Mutex
	// extra is the phase's revocable live key, its id, and when it was
	// revoked (zero: not yet).
	extra, extraID string
	revokedAt      time.Time
	// revokeDeadline is when every instance must refuse the revoked key.
	revokeDeadline time.Time
	// churnMax is the largest limit ever sent for the churn policy or one
	// of its overrides: what a subject may be admitted in a window
	// whatever order the changes reached the instances in.
	churnMax atomic.Int64

	// Usage: answers the workload knows /v1/usage counts, answers it may
	// count (no answer, a 5xx), and the counts read at the last settled
	// point.
	liveKnown, liveUnknown, testKnown, testUnknown atomic.Int64
	liveBase, testBase                             int64
}

// fPolicy is a policy of the workload.
type fPolicy struct {
	name      string
	algorithm string
	limit     int64
	global    bool
	failOpen  bool
}

func (p fPolicy) body() map[string]any {
	b := map[string]any{"limit": p.limit, "algorithm": p.algorithm, "fail_mode": map[bool]string{true: "open", false: "closed"}[p.failOpen]}
	if p.algorithm != "concurrency" {
		b["window"] = "1h"
	}
	if p.global {
		b["scope"] = "global"
	}
	return b
}

// The policies of the workload's tenants; windows are an hour long, so
// that the model's bounds are simple: no aligned hour admits more than the
// limit (fixed, sliding, global), and the token bucket no more than its
// limit plus its refill over the time elapsed.
var mixedPolicies = []fPolicy{
	{name: "fw", algorithm: "fixed_window", limit: 6, failOpen: true},
	{name: "sw", algorithm: "sliding_window", limit: 5},
	{name: "tb", algorithm: "token_bucket", limit: 4, failOpen: true},
	{name: "gl", algorithm: "fixed_window", limit: 40, global: true},
	{name: "cc", algorithm: "concurrency", limit: 3, failOpen: true},
	{name: "churn", algorithm: "fixed_window", limit: 5, failOpen: true},
}

// The noisy tenant's lease policy (fail open, as in issue 23's item 2) and
// its check policy; the quiet tenant's "2 an hour".
var (
	hotLeases = fPolicy{name: "hot", algorithm: "concurrency", limit: 5, failOpen: true}
	hotChecks = fPolicy{name: "hotc", algorithm: "fixed_window", limit: 1_000_000, failOpen: true}
	twoAnHour = fPolicy{name: "two", algorithm: "fixed_window", limit: 2, failOpen: true}
)

func (s *suite) newStack(name string, served, dsn string, n int, env ...string) *stack {
	t := s.t
	t.Helper()
	// GOGC=100: the flat invariant compares resident memory with the
	// warm process's, and by default tollgate serve lets the heap grow by
	// 128 MiB between collections (internal/kit/gcheadroom), which a short
	// run would read as growth; Go's default percent keeps a leak visible.
	env = append(env, "TOLLGATE_COUNTER_TIMEOUT="+s.deadline.String(), "GOGC=100")
	st := &stack{s: s, name: name, dsn: dsn, served: served, env: env, policies: map[string]fPolicy{},
		model: &model{}, leases: &leaseBook{byID: map[string]*leaseRec{}}, lossySince: map[*fTenant][]time.Time{}}
	st.subjects.m = map[string]*subjectState{}
	for i := range n {
		st.members = append(st.members, &member{idx: i, in: st.start()})
	}
	for i := range 3 {
		st.tenants = append(st.tenants, &fTenant{label: fmt.Sprintf("t%d", i), nt: createTenant(t, dsn, "pro")})
	}
	st.noisy = &fTenant{label: "noisy", nt: createTenant(t, dsn, "enterprise")}
	st.quiet = &fTenant{label: "quiet", nt: createTenant(t, dsn, "pro")}
	for _, p := range mixedPolicies {
		st.policies[p.name] = p
		for _, tn := range st.tenants {
			st.putPolicy(tn, p)
		}
	}
	for _, p := range []fPolicy{hotLeases, hotChecks} {
		st.policies[p.name] = p
		st.putPolicy(st.noisy, p)
	}
	st.policies[twoAnHour.name] = twoAnHour
	st.putPolicy(st.quiet, twoAnHour)
	for _, tn := range st.tenants {
		tn.churnMax.Store(mixedPolicies[len(mixedPolicies)-1].limit)
	}
	for _, m := range st.members {
		m.first = st.sample(m)
	}
	t.Logf("stack %s: %d instances, %d tenants ready at %v", name, n, len(st.tenants)+2, time.Since(s.began).Round(time.Millisecond))
	return st
}

// putPolicy puts p for tn through the first instance and waits until every
// instance applies it (a peek, or a lease taken and given back).
func (st *stack) putPolicy(tn *fTenant, p fPolicy) {
	t := st.s.t
	t.Helper()
	a := st.call(nil, "PUT", st.members[0], tn.nt.LiveKey, "/v1/policies/"+p.name, p.body())
	if a.status != 200 {
		t.Fatalf("stack %s: PUT policy %s for %s: %d %s %v", st.name, p.name, tn.label, a.status, a.body, a.err)
	}
	for _, m := range st.members {
		eventually.True(t, 5*time.Second, "policy "+p.name+" on "+m.base(), func() bool {
			if p.algorithm == "concurrency" {
				a := st.call(tn, "POST", m, tn.nt.LiveKey, "/v1/leases", map[string]any{"policy": p.name, "subject": "probe", "ttl": "1s"})
				var l leaseAnswer
				if a.status != 200 || json.Unmarshal(a.body, &l) != nil || !l.Allowed {
					return false
				}
				st.call(tn, "DELETE", m, tn.nt.LiveKey, "/v1/leases/"+l.LeaseID, nil)
				return true
			}
			return st.call(tn, "POST", m, tn.nt.LiveKey, "/v1/check", map[string]any{"mode": "peek",
				"items": []any{map[string]any{"policy": p.name, "subject": "probe"}}}).status == 200
		})
	}
}

func (s *suite) postgresStack() *stack {
	dsn := pgtest.New(s.t)
	served, proxy := pgtest.Proxied(s.t, dsn)
	st := s.newStack("postgres", served, dsn, 3, allowPrivate, manyTestSends, reservationBoundEnv)
	st.pg = proxy
	st.addHooks()
	return st
}

// memoryStack is one instance whose counters live in its memory, held to
// the smallest bound (1,000 counters), so that a neighbour can fill it; and
// whose 64 webhook deliveries in flight are all the stack has.
func (s *suite) memoryStack() *stack {
	dsn := pgtest.New(s.t)
	st := s.newStack("memory", dsn, dsn, 1, "TOLLGATE_COUNTER_STORE=memory", "TOLLGATE_MEMORY_MAX_KEYS=1000", allowPrivate, manyTestSends)
	st.addHooks()
	st.fresh = true
	return st
}

func (s *suite) redisStack() *stack {
	dsn := pgtest.New(s.t)
	direct := strings.TrimSuffix(strings.TrimPrefix(redistest.StartServer(s.t), "redis://"), "/0")
	proxy := faultnet.New(s.t, direct)
	st := s.newStack("redis", dsn, dsn, 2, "TOLLGATE_COUNTER_STORE=redis", "REDIS_URL=redis://"+proxy.Addr()+"/0", reservationBoundEnv)
	st.redis = proxy
	return st
}

func (s *suite) clusterStack() *stack {
	dsn := pgtest.New(s.t)
	c := redistest.StartCluster(s.t)
	st := s.newStack("cluster", dsn, dsn, 2, onCluster(c)...)
	st.cluster = c
	return st
}

// kill stops m's process at once (SIGKILL) and returns when it is gone.
func (st *stack) kill(m *member) {
	in := m.current()
	m.mu.Lock()
	m.down = append(m.down, interval{from: time.Now()})
	m.mu.Unlock()
	in.cmd.Process.Kill()
	in.cmd.Wait()
}

// term sends m's process SIGTERM and returns how long it took to exit and
// how it exited; it kills it after 20 s.
func (st *stack) term(m *member) (time.Duration, error) {
	in := m.current()
	m.mu.Lock()
	m.down = append(m.down, interval{from: time.Now()})
	m.mu.Unlock()
	began := time.Now()
	in.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- in.cmd.Wait() }()
	select {
	case err := <-done:
		return time.Since(began), err
	case <-time.After(20 * time.Second):
		in.cmd.Process.Kill()
		<-done
		return time.Since(began), fmt.Errorf("still running 20 s after SIGTERM")
	}
}

// start starts an instance of the stack, with its rate limit service on a
// port of its own.
func (st *stack) start() *instance {
	addr := bintest.FreePort(st.s.t)
	in := start(st.s.t, st.served, append(slices.Clip(st.env), "TOLLGATE_GRPC_ADDR="+addr)...)
	in.grpc = addr
	return in
}

// restart starts a new process in m's position, on a new port, and waits until
// it is ready.
func (st *stack) restart(m *member) {
	in := st.start()
	m.mu.Lock()
	m.in = in
	m.down[len(m.down)-1].to = time.Now()
	m.mu.Unlock()
}

// sample is a process's goroutines and resident memory, from /metrics.
type sample struct {
	goroutines, rss float64
	pid             int
}

func (st *stack) sample(m *member) sample {
	in := m.current()
	a := st.s.http.do("GET", in.base+"/metrics", "", nil)
	if a.status != 200 {
		st.s.t.Fatalf("stack %s: /metrics of %s: %d %v", st.name, in.base, a.status, a.err)
	}
	smp := sample{pid: in.cmd.Process.Pid}
	sc := bufio.NewScanner(bytes.NewReader(a.body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			smp.goroutines, _ = strconv.ParseFloat(value, 64)
		case "process_resident_memory_bytes":
			smp.rss, _ = strconv.ParseFloat(value, 64)
		}
	}
	if smp.goroutines == 0 || smp.rss == 0 {
		st.s.t.Fatalf("stack %s: /metrics of %s has no go_goroutines or process_resident_memory_bytes", st.name, in.base)
	}
	return smp
}

// checkFlat compares each process's goroutines and memory at the end of
// the run with the same process's when it was warm: a leak of one request
// in a hundred would double them over a soak.
func (s *suite) checkFlat(st *stack) {
	s.http.closeIdle()
	time.Sleep(time.Second)
	v := &violations{}
	for _, m := range st.members {
		last := st.sample(m)
		first := m.first
		s.checks.Add(2)
		gBound, mBound := 2*first.goroutines+50, 2*first.rss+64<<20
		if s.sabotaged("flat") {
			gBound, mBound = first.goroutines-1, first.rss-1
		}
		s.t.Logf("stack %s instance %d (pid %d): goroutines %.0f → %.0f, resident memory %.1f → %.1f MiB",
			st.name, m.idx, last.pid, first.goroutines, last.goroutines, first.rss/(1<<20), last.rss/(1<<20))
		if last.goroutines > gBound {
			v.add(invFlat, "instance %d: %.0f goroutines at the end, %.0f when warm", m.idx, last.goroutines, first.goroutines)
		}
		if last.rss > mBound {
			v.add(invFlat, "instance %d: %.1f MiB resident at the end, %.1f MiB when warm", m.idx, last.rss/(1<<20), first.rss/(1<<20))
		}
	}
	s.verdict("flat-"+st.name, v)
}

// createKey makes a new live key for tn through the CLI.
func (st *stack) createKey(tn *fTenant) (id, key string) {
	var k struct {
		KeyID string `json:"key_id"`
		Key   string `json:"key"`
	}
	cli(st.s.t, st.dsn, &k, "keys", "create", "--tenant", tn.nt.TenantID)
	return k.KeyID, k.Key
}

// revokeKey revokes a key through the CLI, straight on the database.
func (st *stack) revokeKey(id string) {
	cli(st.s.t, st.dsn, nil, "keys", "revoke", id)
}

// faultClient is the suite's HTTP client: bounded waits, no redirects, and
// errors returned, not fatal.
type faultClient struct {
	hc *http.Client
	tr *http.Transport
}

func newFaultClient() *faultClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	return &faultClient{tr: tr, hc: &http.Client{Transport: tr, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *faultClient) closeIdle() { c.tr.CloseIdleConnections() }

// answer is one HTTP exchange as the client saw it.
type answer struct {
	status     int
	header     http.Header
	body       []byte
	err        error
	start, end time.Time
}

// do sends one request with key (none when ""), body as JSON (none when
// nil) and headers in pairs.
func (c *faultClient) do(method, u, key string, body any, headers ...string) answer {
	a := answer{start: time.Now()}
	defer func() { a.end = time.Now() }()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		panic(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		a.err = err
		a.end = time.Now()
		return a
	}
	a.body, a.err = io.ReadAll(resp.Body)
	resp.Body.Close()
	a.status, a.header, a.end = resp.StatusCode, resp.Header, time.Now()
	return a
}

// call sends one request to m on behalf of tn (nil: no tenant's usage
// moves) and counts it in tn's usage tallies: a live or test /v1/check,
// lease acquire or reservation answered 200 is counted by /v1/usage; one unanswered or
// answered 5xx may be.
func (st *stack) call(tn *fTenant, method string, m *member, key, path string, body any) answer {
	return st.callWith(st.s.http, tn, method, m, key, path, body)
}

// callWith is call through c.
func (st *stack) callWith(c *faultClient, tn *fTenant, method string, m *member, key, path string, body any) answer {
	a := c.do(method, m.base()+path, key, body)
	st.s.ops.Add(1)
	if tn == nil || method != "POST" || (path != "/v1/check" && path != "/v1/leases" && path != "/v1/reservations") {
		return a
	}
	test := strings.HasPrefix(key, "tg_test_")
	switch {
	case a.err == nil && a.status == 200:
		tn.counted(test, 1, 0)
	case a.err != nil || a.status >= 500:
		tn.counted(test, 0, 1)
	}
	return a
}

// forwardSubjectHeader is the header the suite's forward-auth requests
// name their subject in (?subject_header=): every request of the suite
// comes from the loopback, so the client's address would be one subject.
const forwardSubjectHeader = "X-Fault-Subject"

// forward asks m as a proxy would, GET /v1/forward-auth/{policy}, on behalf
// of tn for subject, and counts it in tn's usage tallies: an answer 200, or
// a 429 of the policy (a check decided), is counted by /v1/usage; one
// unanswered or answered 5xx may be.
func (st *stack) forward(tn *fTenant, m *member, key, policy, subject string) answer {
	a := st.s.http.do("GET", m.base()+"/v1/forward-auth/"+policy+"?subject_header="+forwardSubjectHeader, key, nil, forwardSubjectHeader, subject)
	st.s.ops.Add(1)
	test := strings.HasPrefix(key, "tg_test_")
	switch {
	case a.err == nil && (a.status == 200 || a.status == 429 && forwardLayer(a) == "policy"):
		tn.counted(test, 1, 0)
	case a.err != nil || a.status >= 500:
		tn.counted(test, 0, 1)
	}
	return a
}

// rls asks m as Envoy would, ShouldRateLimit in the domain "fault" with one
// native descriptor (policy, subject), on behalf of tn, and counts it in
// tn's usage tallies as forward does. The answer is put as HTTP's: 200 for
// a decision of the policy (OK or OVER_LIMIT, read by decode), 429 for a
// ceiling's refusal, the response headers as headers; a gRPC error is err.
func (st *stack) rls(tn *fTenant, m *member, key, policy, subject string) answer {
	a := answer{start: time.Now(), header: http.Header{}}
	defer func() { a.end = time.Now() }()
	client, err := st.s.rlsClient(m.current().grpc)
	if err != nil {
		a.err = err
		return a
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key), 15*time.Second)
	defer cancel()
	res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "fault", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "policy", Value: policy}, {Key: "subject", Value: subject}}}}})
	st.s.ops.Add(1)
	test := strings.HasPrefix(key, "tg_test_")
	if err != nil {
		a.err = err
		tn.counted(test, 0, 1)
		return a
	}
	for _, h := range res.GetResponseHeadersToAdd() {
		a.header.Add(h.GetKey(), h.GetValue())
	}
	if sts := res.GetStatuses(); len(sts) == 1 && sts[0].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && sts[0].GetCurrentLimit().GetName() != policy {
		// A ceiling refused, as /v1/check's 429 says.
		a.status = 429
		a.body = []byte(`{"type":"https://tollgate.dev/problems/quota-exceeded"}`)
		return a
	}
	// A decision of the policy, as /v1/check's 200 says it.
	a.status = 200
	a.body, _ = json.Marshal(map[string]bool{"allowed": res.GetOverallCode() == rlsv3.RateLimitResponse_OK,
		"degraded": a.header.Get("X-Tollgate-Degraded") == "true"})
	tn.counted(test, 1, 0)
	return a
}

// rlsClient is the suite's client of the rate limit service at addr, one
// connection an address.
func (s *suite) rlsClient(addr string) (rlsv3.RateLimitServiceClient, error) {
	s.rlsMu.Lock()
	defer s.rlsMu.Unlock()
	if c, ok := s.rlsConns[addr]; ok {
		return rlsv3.NewRateLimitServiceClient(c), nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	if s.rlsConns == nil {
		s.rlsConns = map[string]*grpc.ClientConn{}
		s.t.Cleanup(func() {
			s.rlsMu.Lock()
			defer s.rlsMu.Unlock()
			for _, c := range s.rlsConns {
				c.Close()
			}
		})
	}
	s.rlsConns[addr] = c
	return rlsv3.NewRateLimitServiceClient(c), nil
}

// forwardLayer is the layer a forward-auth refusal's problem names.
func forwardLayer(a answer) string {
	var p struct {
		Layer string `json:"layer"`
	}
	_ = json.Unmarshal(a.body, &p)
	return p.Layer
}

// counted notes checks (and acquires) of tn's live or test key that its
// usage counts (known) or may count (unknown: no answer, or a 5xx).
func (tn *fTenant) counted(test bool, known, unknown int64) {
	if test {
		tn.testKnown.Add(known)
		tn.testUnknown.Add(unknown)
	} else {
		tn.liveKnown.Add(known)
		tn.liveUnknown.Add(unknown)
	}
}
