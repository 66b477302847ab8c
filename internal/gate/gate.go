// Everything that lives in the shared counter store (L2 per-IP, quotas,
// allotments and policies) goes in ONE counter.Request: a check costs one
// round trip whatever the number of layers and items. The ceilings are that
// request's first items (counter.Request.Ceilings), so they count every call
// that passes them even when a policy then refuses.
//
// When the store cannot answer within its deadline the pipeline degrades
// instead of failing: the ceilings keep their L1 verdicts, each policy
// follows its fail_mode, and the Verdict says Degraded. A circuit breaker
// keeps calls away from a store that keeps failing.

package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/digest"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TenantSource resolves API keys, tenants and plans (tenant.Directory).
type TenantSource interface {
	Authenticate(ctx context.Context, bearer string) (tenant.Key, tenant.Tenant, error)
	Plan(ctx context.Context, name string) (tenant.Plan, error)
	MaxIPPerMinute(ctx context.Context) int64
}

// PolicySource returns a tenant's policies (policy.Catalog).
type PolicySource interface {
	For(ctx context.Context, tenantID string) (policy.Set, error)
}

// Config configures a Gate.
type Config struct {
	Store counter.Store
	// Leases holds the leases of concurrency policies (lease.go); nil means
	// Store, which every counter store is.
	Leases   counter.Leaser
	Tenants  TenantSource
	Policies PolicySource
	Observer Observer // may be nil
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	// Pepper keys the HMACs of subjects and client IPs.
	Pepper []byte
	// InstanceCeiling is the requests per second this instance accepts; 0 is
	// off.
	InstanceCeiling int64
	// L1MaxKeys bounds the in-memory per-IP layer (default 50,000).
	L1MaxKeys int
	// BreakerFailures consecutive store failures of one tenant's calls open
	// that tenant's breaker for BreakerOpenFor (defaults 5 and 1 s).
	BreakerFailures int
	BreakerOpenFor  time.Duration
	// TenantInflight is how many units of work one tenant may have in
	// progress on this instance (a check weighs checkWeight, any other
	// request 1; default DefaultTenantInflight), and InflightWait how
	// long a request beyond it waits for its turn before it is refused
	// (default 100 ms).
	TenantInflight int64
	InflightWait   time.Duration
	// AuthFailuresPerMinute is how many requests with a key that does not
	// authenticate one client network may send a minute (default 60);
	// beyond it they are refused before the key is looked up.
	AuthFailuresPerMinute int64
	Now                   func() time.Time
}

// The matching budget of each tenant on each instance (matchBudget): 5 % of
// one processor's time, in bursts of up to 2 ms (a few of the heaviest
// checks: a longer burst lets a tenant's flood start with a train of them
// that holds up the next tenant's checks). The heaviest check the
// API allows spends about 0.6 ms matching, so a tenant sending nothing else
// gets some 80 of them a second per instance; a tenant with a few wildcard
// patterns spends microseconds a check and never waits.
const (
	matchShare = 0.05
	matchBurst = 2 * time.Millisecond
	// matchWait is the longest a check waits for its tenant's matching
	// budget before it is refused.
	matchWait = time.Second
	// tryCost estimates a wildcard try before it is measured.
	tryCost = 500 * time.Nanosecond
)

// DefaultTenantInflight is Config.TenantInflight's default: 64 units let one
// tenant keep 64 one-item checks in progress on an instance (tens of
// thousands of checks a second at a store round trip of a few
// milliseconds), two checks of 32 items, or one of the heaviest the API
// allows; what the tenant sends beyond that waits its turn behind its own
// work, not in front of other tenants'.
const DefaultTenantInflight = 64

// Gate runs the admission pipeline. It is safe for concurrent use.
type Gate struct {
	cfg     Config
	leases  *leases
	clients *clientKeyCache
	met     instruments
	// digest is HMAC-SHA-256 under the pepper, domain-separated by kind
	// ("subject", "ip").
	digest   *digest.Digester
	l1       *memory.Store
	breakers *breakers
	inflight *inflight
	matching *matchBudget
	logMu    sync.Mutex
	lastLog  time.Time
}

// New returns a Gate. Close it to stop its in-memory layers' pruning.
func New(cfg Config) *Gate {
	if cfg.L1MaxKeys == 0 {
		cfg.L1MaxKeys = memory.DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Leases == nil {
		cfg.Leases, _ = cfg.Store.(counter.Leaser)
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 5
	}
	if cfg.BreakerOpenFor == 0 {
		cfg.BreakerOpenFor = time.Second
	}
	if cfg.TenantInflight <= 0 {
		cfg.TenantInflight = DefaultTenantInflight
	}
	// One check may weigh up to MaxItems: a budget below that would refuse
	// the largest checks for ever.
	cfg.TenantInflight = max(cfg.TenantInflight, MaxItems)
	if cfg.InflightWait <= 0 {
		cfg.InflightWait = 100 * time.Millisecond
	}
	if cfg.AuthFailuresPerMinute <= 0 {
		cfg.AuthFailuresPerMinute = 60
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Gate{
		cfg:      cfg,
		met:      newInstruments(cfg.Metrics),
		leases:   newLeases(),
		clients:  newClientKeyCache(),
		digest:   digest.New(cfg.Pepper),
		l1:       memory.New(memory.Config{MaxKeys: cfg.L1MaxKeys, Now: cfg.Now}),
		breakers: newBreakers(cfg.BreakerFailures, cfg.BreakerOpenFor, maxBreakers, cfg.Metrics),
		inflight: newInflight(cfg.TenantInflight, cfg.InflightWait),
		matching: newMatchBudget(matchShare, matchBurst),
	}
}

// maxBreakers bounds how many tenants' failing circuits are tracked.
const maxBreakers = 100_000

// Close stops the in-memory layers' background pruning.
func (g *Gate) Close() error { return g.l1.Close() }

// Request is one tenant request as the pipeline sees it.
type Request struct {
	// Route names the endpoint ("check", "policies", "usage", …); per-IP
	// counters are kept per route.
	Route string
	// ClientIP is the resolved client address (for IPv6, the network the
	// HTTP layer keys clients by); the zero Addr means it could not be
	// resolved, and every such request of a route shares one bucket.
	ClientIP netip.Addr
	// Bearer is the API key from the Authorization header, without "Bearer ".
	Bearer string
	// Check is the /v1/check body; nil for other routes.
	Check *Check
	// Lease is the POST /v1/leases body; nil for other routes (lease.go).
	Lease *Lease
}

// Check is the body of a /v1/check call.
type Check struct {
	Mode  counter.Mode
	Items []Item
}

// Item is one policy to check for one subject.
type Item struct {
	Policy  string
	Subject string
	Cost    int64
}

// Bounds of one check.
const (
	MaxItems      = 32
	MaxSubjectLen = 512
	MaxCost       = limit.MaxLimit
)

// Verdict is the pipeline's answer. When Refusal is set a ceiling refused
// and the caller answers 429 (or 402); otherwise Items answer the check.
type Verdict struct {
	Tenant  tenant.Tenant
	Key     tenant.Key
	Refusal *Refusal
	// Allowed is true when no ceiling refused and every enforced policy item
	// allowed.
	Allowed  bool
	Degraded bool
	Items    []ItemVerdict
	// Tightest is the layer or policy closest to refusing, for the RateLimit
	// headers of an allowed answer.
	Tightest Quota
	// Lease answers a Request's Lease when no ceiling refused.
	Lease *LeaseVerdict
}

// ItemVerdict answers one check item.
type ItemVerdict struct {
	Policy string
	limit.Decision
	Shadow   bool
	Degraded bool
}

// Quota is one limit as the RateLimit header fields describe it.
type Quota struct {
	Name      string
	Limit     int64
	Remaining int64
	Window    time.Duration
	ResetIn   time.Duration
}

// ErrInvalid is returned (wrapped, as a *policy.FieldError when a field is at
// fault) for a check the client got wrong: an unknown policy, a missing
// subject, a cost out of range.
var ErrInvalid = policy.ErrInvalid

// itemErr builds a field error for items[i].field.
func itemErr(i int, field, reason string) error {
	return &policy.FieldError{Field: fmt.Sprintf("items[%d].%s", i, field), Reason: reason}
}

// layerItem is one ceiling in the counter request, with what a refusal by it
// should say.
type layerItem struct {
	counter.Item
	layer, scope string
	payment      bool
	plan         string
	// lease names the ceiling's lease; at is the index of its items in the
	// counter request, -1 when its lease served it, and size the units its
	// items asked for.
	lease leaseID
	at    int
	size  int64
}

// Admit runs the pipeline. Errors: tenant.ErrUnauthorized for a bad key,
// ErrInvalid for a malformed check; a refusal is a Verdict, not an error.
func (g *Gate) Admit(ctx context.Context, req Request) (Verdict, error) {
	now := g.cfg.Now()
	var v Verdict

	// 1. Instance ceiling: keyless, in memory, nothing in the request moves it.
	if n := g.cfg.InstanceCeiling; n > 0 {
		d := g.l1Check(ctx, now, "", "instance", limit.TokenBucket, n, limit.Every(time.Second))
		if !d.Allowed {
			return g.refuse(ctx, req, v, Refusal{Layer: LayerInstance, Limit: n, Window: time.Second, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt}), nil
		}
	}

	// 2a. Pre-authentication bucket per IP, at the highest per-IP limit of any
	// plan, so that a tenant is never held below its plan before its key is
	// known; and, in the same in-memory call, a peek at the client
	// network's keys that failed to authenticate: past
	// AuthFailuresPerMinute it is refused before its key is looked up, so
	// that guessing costs the guesser, not the database.
	ck := g.clients.get(req.ClientIP.Unmap(), g.ipDigest)
	maxIP := g.cfg.Tenants.MaxIPPerMinute(ctx)
	perMinute := limit.Every(time.Minute)
	failItem := counter.Item{Key: ck.authFail, Algorithm: limit.SlidingWindow, Limit: g.cfg.AuthFailuresPerMinute, Window: perMinute, Cost: 1}
	pre, err := g.l1.Check(ctx, counter.Request{Mode: counter.Peek, Ceilings: 1, Now: now, Items: []counter.Item{
		{Key: ck.pre, Algorithm: limit.SlidingWindow, Limit: maxIP, Window: perMinute, Cost: 1},
		failItem,
	}})
	switch {
	case err != nil:
		g.l1Bug(ctx, err)
	case !pre.Decisions[0].Allowed:
		d := pre.Decisions[0]
		return g.refuse(ctx, req, v, Refusal{Layer: LayerIP, Limit: maxIP, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt}), nil
	case !pre.Decisions[1].Allowed:
		d := pre.Decisions[1]
		return g.refuse(ctx, req, v, Refusal{Layer: LayerIP, Limit: failItem.Limit, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt}), nil
	}
	key, t, err := g.cfg.Tenants.Authenticate(ctx, req.Bearer)
	if err != nil {
		if errors.Is(err, tenant.ErrUnauthorized) {
			if _, err := g.l1.Check(ctx, counter.Request{Now: now, Items: []counter.Item{failItem}}); err != nil {
				g.l1Bug(ctx, err)
			}
		}
		g.met.authFail.Inc()
		return v, err
	}
	v.Tenant, v.Key = t, key

	// The tenant's work in progress on this instance is bounded before any
	// of it is done.
	var set policy.Set
	weight := int64(1)
	if req.Check != nil {
		if set, err = g.cfg.Policies.For(ctx, t.ID); err != nil {
			return v, fmt.Errorf("policies of tenant %s: %w", t.ID, err)
		}
		weight = checkWeight(set, req.Check)
	}
	// A check that may try wildcards reserves its matching time from the
	// tenant's budget (matchBudget), waiting its turn while the budget is
	// spent; past matchWait it is refused.
	var matchEstimate time.Duration
	if req.Check != nil && weight > int64(len(req.Check.Items)) {
		matchEstimate = time.Duration(weight-int64(len(req.Check.Items))) * wildcardTries * tryCost
		// A refusal comes only after the whole wait too, so that a client
		// that does not back off sends one such check a second per
		// connection, not as many as it can.
		waitUntil := time.Now().Add(matchWait)
		for {
			wait := g.matching.reserve(t.ID, g.cfg.Now(), matchEstimate)
			if wait == 0 {
				break
			}
			last := false
			if left := time.Until(waitUntil); wait >= left {
				wait, last = max(left, 0), true
			}
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return v, ctx.Err()
			}
			if last {
				retry := g.matching.reserve(t.ID, g.cfg.Now(), 0)
				return g.refuse(ctx, req, v, Refusal{Layer: LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: retry, ResetAt: now.Add(retry), Key: LayerInflight}), nil
			}
		}
	}
	work, ok := g.inflight.acquire(ctx, t.ID, weight)
	if !ok {
		return g.refuse(ctx, req, v, Refusal{Layer: LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: time.Second, ResetAt: now.Add(time.Second), Key: LayerInflight}), nil
	}
	defer work.release()
	effective, err := g.cfg.Tenants.Plan(ctx, tenant.EffectivePlanName(t.Plan, t.BillingStatus))
	if err != nil {
		return v, fmt.Errorf("effective plan of tenant %s: %w", t.ID, err)
	}

	// 2b. Per-IP L1: a local damper before the shared counter.
	ipLimit := t.RateLimitPerMinute
	if ipLimit <= 0 {
		ipLimit = effective.IPPerMinute
	}
	if ipLimit <= 0 {
		ipLimit = tenant.DefaultIPPerMinute
	}
	ipKey := ck.route(req.Route)
	if d := g.l1Check(ctx, now, t.ID, ipKey, limit.SlidingWindow, ipLimit, limit.Every(time.Minute)); !d.Allowed {
		return g.refuse(ctx, req, v, Refusal{Layer: LayerIP, Limit: ipLimit, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: ipKey}), nil
	}

	// 3 and 4. The shared ceilings: per-IP L2, tenant quota, allotment.
	var ceilBuf [4]layerItem
	ceilings := append(ceilBuf[:0],
		layerItem{Item: counter.Item{Key: ipKey, Algorithm: limit.SlidingWindow, Limit: ipLimit, Window: limit.Every(time.Minute), Cost: 1}, layer: LayerIP},
	)
	qMin, qHour := effective.QuotaPerMinute, effective.QuotaPerHour
	if t.QuotaPerMinute != nil {
		qMin = *t.QuotaPerMinute
	}
	if t.QuotaPerHour != nil {
		qHour = *t.QuotaPerHour
	}
	ceilings = append(ceilings,
		layerItem{Item: counter.Item{Key: "quota:minute", Algorithm: limit.FixedWindow, Limit: qMin, Window: limit.Every(time.Minute), Cost: 1}, layer: LayerQuota, scope: "minute"},
		layerItem{Item: counter.Item{Key: "quota:hour", Algorithm: limit.FixedWindow, Limit: qHour, Window: limit.Every(time.Hour), Cost: 1}, layer: LayerQuota, scope: "hour"},
	)
	// A lease counts toward the allotments as a check does.
	if req.Check != nil || req.Lease != nil {
		switch {
		case key.Test:
			ceilings = append(ceilings, layerItem{Item: counter.Item{Key: "sandbox", Algorithm: limit.SlidingWindow, Limit: tenant.SandboxAllotment, Window: limit.Every(30 * 24 * time.Hour), Cost: 1}, layer: LayerSandbox})
		case effective.MonthlyChecks != nil:
			ceilings = append(ceilings, layerItem{
				Item:    counter.Item{Key: "allotment", Algorithm: limit.FixedWindow, Limit: *effective.MonthlyChecks, Window: limit.Month, Cost: 1},
				layer:   LayerAllotment,
				payment: tenant.HeldToStarter(t),
				plan:    effective.Name,
			})
		}
	}

	if req.Lease != nil {
		return g.acquire(ctx, req, v, ceilings, now)
	}

	// 5. The tenant's policies.
	var pols []policyItem
	if req.Check != nil {
		var matching time.Duration
		pols, matching, err = g.policyItems(t.ID, set, key.Test, req.Check, now)
		if matchEstimate > 0 {
			g.matching.settle(t.ID, g.cfg.Now(), matching, matchEstimate)
		}
		if err != nil {
			return v, err
		}
	}

	// Each ceiling spends a unit of this instance's lease on its counter
	// when it has one (lease.go), or goes to the store in this request,
	// renewing the lease on the way. The policies always go to the store,
	// exact per check.
	creq := counter.Request{Group: t.ID, Items: make([]counter.Item, 0, 2*len(ceilings)+len(pols))}
	if req.Check != nil {
		creq.Mode = req.Check.Mode
	}
	var spentBuf [4]leaseID
	spent := spentBuf[:0] // leases spent here, given back if a ceiling refuses
	for i := range ceilings {
		c := &ceilings[i]
		// A plan may allow more than a counter holds; beyond MaxLimit a
		// ceiling is as good as none.
		c.Limit = min(c.Limit, limit.MaxLimit)
		c.lease = leaseID{t.ID, c.Key}
		if ok, remaining, resetIn := g.leases.take(c.lease, now); ok {
			spent = append(spent, c.lease)
			c.at = -1
			v.Tightest = tighter(v.Tightest, Quota{Name: c.layer, Limit: c.Limit, Remaining: remaining, Window: windowLength(c.Window, now), ResetIn: resetIn})
			continue
		}
		c.at = len(creq.Items)
		c.size = g.leases.size(c.lease, now, leaseEnd(c.Window, now, now))
		creq.Items = append(creq.Items, leasedItems(c.Item, c.size)...)
	}
	creq.Ceilings = len(creq.Items)
	for _, p := range pols {
		creq.Items = append(creq.Items, p.Item)
	}
	if len(creq.Items) == 0 {
		// Every ceiling was served from its lease and there is no policy:
		// nothing for the store to decide.
		v.Allowed = true
		g.met.answered(true, OutcomeAllowed)
		g.observe(ctx, req, v, OutcomeAllowed, false, nil)
		return v, nil
	}

	res, err := g.storeCheck(ctx, t.ID, creq)
	if errors.Is(err, counter.ErrInvalid) {
		return v, fmt.Errorf("counter request of tenant %s: %w", t.ID, err)
	}
	if err != nil {
		return g.degraded(ctx, req, v, ceilings, pols, err), nil
	}

	for _, c := range ceilings {
		if c.at < 0 {
			continue
		}
		if d := res.Decisions[c.at]; !d.Allowed {
			// The store counted none of the ceilings: give back what the
			// leases spent.
			for _, k := range spent {
				g.leases.giveBack(k)
			}
			return g.refuse(ctx, req, v, Refusal{
				Layer: c.layer, Scope: c.scope, Limit: c.Limit, Window: windowLength(c.Window, res.Now),
				RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, PaymentRequired: c.payment, Plan: c.plan, Key: c.Key,
			}), nil
		}
	}
	for _, c := range ceilings {
		if c.at < 0 {
			continue
		}
		d := res.Decisions[c.at]
		granted, remaining := int64(1), d.Remaining
		if top := c.at + 1; c.size > 1 && res.Decisions[top].Allowed {
			granted, remaining = 1+creq.Items[top].Cost, res.Decisions[top].Remaining
		}
		g.leases.grant(c.lease, now, leaseEnd(c.Window, now, res.Now), c.Limit, granted, remaining)
		v.Tightest = tighter(v.Tightest, Quota{Name: c.layer, Limit: c.Limit, Remaining: remaining + granted - 1, Window: windowLength(c.Window, res.Now), ResetIn: d.ResetAt.Sub(res.Now)})
	}
	v.Allowed = true
	var refusals []Refusal
	v.Items = make([]ItemVerdict, 0, len(pols))
	for i, p := range pols {
		d := res.Decisions[creq.Ceilings+i]
		iv := ItemVerdict{Policy: p.name, Decision: d, Shadow: p.shadow}
		if !d.Allowed {
			refusals = append(refusals, Refusal{Layer: LayerPolicy, Policy: p.name, Limit: p.Limit, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: p.Key, Shadow: p.shadow, AlertAfter: p.alertAfter})
			// A shadow policy reports what it would decide (this item's
			// allowed) and never refuses the check (the answer's allowed).
			if !p.shadow {
				v.Allowed = false
			}
		}
		v.Items = append(v.Items, iv)
		if !p.shadow {
			v.Tightest = tighter(v.Tightest, Quota{Name: p.name, Limit: p.Limit, Remaining: d.Remaining, Window: windowLength(p.Window, res.Now), ResetIn: d.ResetAt.Sub(res.Now)})
		}
	}
	outcome := OutcomeAllowed
	if !v.Allowed {
		outcome = LayerPolicy
	}
	g.met.answered(v.Allowed, outcome)
	g.observe(ctx, req, v, outcome, false, refusals)
	return v, nil
}

// policyItem is one check item resolved against its policy.
type policyItem struct {
	counter.Item
	name       string
	shadow     bool
	failOpen   bool
	alertAfter int64
}

// policyItems resolves a check's items. A test key's counters are the
// sandbox's, apart from the live ones ("t:" in front of the key), so that
// trying an integration out never moves what live traffic is answered.
//
// It also returns the time spent matching wildcard overrides, for the
// tenant's matching budget.
func (g *Gate) policyItems(tenantID string, set policy.Set, test bool, c *Check, now time.Time) (_ []policyItem, matching time.Duration, _ error) {
	if len(c.Items) == 0 {
		return nil, 0, &policy.FieldError{Field: "items", Reason: "at least one item is required"}
	}
	if len(c.Items) > MaxItems {
		return nil, 0, &policy.FieldError{Field: "items", Reason: fmt.Sprintf("at most %d items per check", MaxItems)}
	}
	out := make([]policyItem, 0, len(c.Items))
	for i, it := range c.Items {
		p, ok := set.Lookup(it.Policy)
		if !ok {
			return nil, 0, itemErr(i, "policy", fmt.Sprintf("no policy named %q", truncate(it.Policy, 64)))
		}
		if p.Algorithm == limit.Concurrency {
			return nil, 0, itemErr(i, "policy", fmt.Sprintf(`policy %q has algorithm "concurrency": it bounds holders in flight; take a lease with POST /v1/leases`, p.Name))
		}
		cost := it.Cost
		if cost == 0 {
			cost = 1
		}
		if cost < 1 || cost > MaxCost {
			return nil, 0, itemErr(i, "cost", fmt.Sprintf("must be 1 to %d", MaxCost))
		}
		if reason := subjectFault(p, it.Subject); reason != "" {
			return nil, 0, itemErr(i, "subject", reason)
		}
		var buf [80]byte
		key := g.appendPolicyKey(buf[:0], tenantID, test, p, it.Subject)
		lim := p.Limit
		if p.Scope != policy.ScopeGlobal {
			if set.Wildcards(p.Name) == 0 {
				lim = set.LimitFor(p, it.Subject, now)
			} else {
				began := time.Now()
				lim = set.LimitFor(p, it.Subject, now)
				matching += time.Since(began)
			}
		}
		out = append(out, policyItem{
			// Shadow policies are advisory: counted when they would admit,
			// never failing the check.
			Item:       counter.Item{Key: string(key), Algorithm: p.Algorithm, Limit: lim, Window: p.Window, Cost: cost, Advisory: p.Shadow},
			name:       p.Name,
			shadow:     p.Shadow,
			failOpen:   p.FailMode == policy.FailOpen,
			alertAfter: p.AlertAfter,
		})
	}
	return out, matching, nil
}

// subjectFault returns why subject cannot name a counter of p, or "".
func subjectFault(p policy.Policy, subject string) string {
	switch {
	case p.Scope == policy.ScopeGlobal:
		return ""
	case subject == "":
		return "required for a policy of scope subject"
	case len(subject) > MaxSubjectLen:
		return fmt.Sprintf("at most %d bytes", MaxSubjectLen)
	}
	return ""
}

// appendPolicyKey appends the key of p's counter (or leases) for subject,
// which subjectFault accepts: "p:" and the policy's name, then "*" for a
// policy of scope global (a keyless ceiling: nothing in the request picks
// the counter) or the subject's digest. A test key's counters are the
// sandbox's, "t:" in front.
func (g *Gate) appendPolicyKey(key []byte, tenantID string, test bool, p policy.Policy, subject string) []byte {
	if test {
		key = append(key, "t:"...)
	}
	key = append(append(append(key, "p:"...), p.Name...), ':')
	if p.Scope == policy.ScopeGlobal {
		return append(key, '*')
	}
	return g.digest.AppendHex(key, digestLen, "subject", tenantID, ":", p.Name, ":", subject)
}

// wildcardTries is how many wildcard patterns cost as much as one check
// item (an HMAC, a counter in the store): BenchmarkLimitForWorstCase puts
// a try of the worst pattern at about half a microsecond.
const wildcardTries = 8

// checkWeight is what a check weighs in its tenant's work in progress: one
// unit an item, and one per wildcardTries wildcard patterns its items may
// try, so that the heaviest check the API allows weighs more than the
// budget holds and runs alone.
func checkWeight(set policy.Set, c *Check) int64 {
	tries := 0
	for _, it := range c.Items {
		tries += set.Wildcards(it.Policy)
	}
	return int64(max(len(c.Items), 1) + (tries+wildcardTries-1)/wildcardTries)
}

// storeCheck makes the one round trip, through the tenant's circuit breaker.
func (g *Gate) storeCheck(ctx context.Context, tenantID string, req counter.Request) (counter.Result, error) {
	if !g.breakers.allow(tenantID, g.cfg.Now()) {
		g.met.storeSkipped.Observe(0)
		return counter.Result{}, fmt.Errorf("circuit open: %w", counter.ErrUnavailable)
	}
	start := time.Now()
	res, err := g.cfg.Store.Check(ctx, req)
	took := time.Since(start).Seconds()
	if err != nil {
		if errors.Is(err, counter.ErrInvalid) || errors.Is(ctx.Err(), context.Canceled) {
			// A malformed request, or a caller that went away (its client
			// hung up), says nothing about the store's health.
			g.breakers.release(tenantID)
			return res, err
		}
		g.breakers.failure(tenantID, g.cfg.Now())
		g.met.storeDown.Observe(took)
		return res, err
	}
	g.breakers.success(tenantID)
	g.met.storeOK.Observe(took)
	return res, nil
}

// degraded answers without the shared store: the ceilings have passed L1 and
// allow; each policy follows its fail mode.
func (g *Gate) degraded(ctx context.Context, req Request, v Verdict, ceilings []layerItem, pols []policyItem, cause error) Verdict {
	g.logDegraded(ctx, v.Tenant.ID, cause)
	now := g.cfg.Now()
	v.Degraded = true
	v.Allowed = true
	for _, c := range ceilings {
		g.met.degraded[c.layer].Inc()
	}
	for _, p := range pols {
		d := limit.Decision{Allowed: p.failOpen, Limit: p.Limit, ResetAt: now.Add(time.Second)}
		if !p.failOpen {
			// Closed: refuse, and suggest a retry once the store may be back.
			d.RetryAfter = time.Second
			if !p.shadow {
				v.Allowed = false
			}
		}
		g.met.degraded[LayerPolicy].Inc()
		v.Items = append(v.Items, ItemVerdict{Policy: p.name, Decision: d, Shadow: p.shadow, Degraded: true})
	}
	outcome := OutcomeAllowed
	if !v.Allowed {
		outcome = LayerPolicy
	}
	g.met.answered(v.Allowed, outcome)
	g.observe(ctx, req, v, outcome, true, nil)
	return v
}

// logDegraded writes the L2_DEGRADED line at most once a second.
func (g *Gate) logDegraded(ctx context.Context, tenantID string, cause error) {
	g.logMu.Lock()
	now := time.Now()
	due := now.Sub(g.lastLog) >= time.Second
	if due {
		g.lastLog = now
	}
	g.logMu.Unlock()
	if due {
		g.cfg.Logger.ErrorContext(ctx, "L2_DEGRADED: counter store unavailable, answering from L1 and fail modes", "tenant_id", tenantID, "err", cause)
	}
}

// refuse records a ceiling's refusal and returns the verdict carrying it.
func (g *Gate) refuse(ctx context.Context, req Request, v Verdict, r Refusal) Verdict {
	v.Refusal = &r
	v.Allowed = false
	g.met.refused[r.Layer].Inc()
	if v.Tenant.ID != "" {
		g.observe(ctx, req, v, r.Layer, r.Degraded, []Refusal{r})
	}
	return v
}

func (g *Gate) observe(ctx context.Context, req Request, v Verdict, outcome string, degraded bool, refusals []Refusal) {
	if g.cfg.Observer == nil {
		return
	}
	g.cfg.Observer.Observe(ctx, Event{
		At: g.cfg.Now(), TenantID: v.Tenant.ID, KeyID: v.Key.ID, Live: !v.Key.Test, Route: req.Route,
		Checked: req.Check != nil || req.Lease != nil, Outcome: outcome, Degraded: degraded, Refusals: refusals,
	})
}

// l1Check consumes one from an in-memory counter of this instance at now.
func (g *Gate) l1Check(ctx context.Context, now time.Time, group, key string, alg limit.Algorithm, lim int64, w limit.Window) limit.Decision {
	res, err := g.l1.Check(ctx, counter.Request{Now: now, Group: group, Items: []counter.Item{{Key: key, Algorithm: alg, Limit: lim, Window: w, Cost: 1}}})
	if err != nil {
		g.l1Bug(ctx, err)
		return limit.Decision{Allowed: true}
	}
	return res.Decisions[0]
}

// l1Bug logs an in-memory layer's refusal of its own request. Only an
// invalid request fails in memory: a bug, so the caller lets the request in
// and says so.
func (g *Gate) l1Bug(ctx context.Context, err error) {
	g.cfg.Logger.ErrorContext(ctx, "bug: in-memory layer refused its own request", "err", err)
}

// ipDigest is the client IP's key part: an HMAC, never the address. Every
// client whose address could not be resolved shares the one bucket
// "unresolved": a bucket per request would let a malformed header escape
// every per-IP limit.
func (g *Gate) ipDigest(ip netip.Addr) string {
	if !ip.IsValid() {
		return "unresolved"
	}
	var buf [2 * digestLen]byte
	return string(g.digest.AppendHex(buf[:0], digestLen, "ip", ip.Unmap().String()))
}

// digestLen is how much of an HMAC-SHA-256 a counter key keeps: 128 bits,
// hex-encoded, keep collisions out of reach and keys short.
const digestLen = 16

// windowLength is a window's length at instant now (a calendar month's
// varies).
func windowLength(w limit.Window, now time.Time) time.Duration {
	if !w.Month {
		return w.Length
	}
	start, end := w.Bounds(now.UnixMicro())
	return time.Duration(end-start) * time.Microsecond
}

// tighter returns whichever quota is closer to refusing: the smaller share
// remaining, then the fewer remaining.
func tighter(a, b Quota) Quota {
	if a.Limit == 0 {
		return b
	}
	// Compare a.Remaining/a.Limit with b.Remaining/b.Limit without division.
	l, r := float64(a.Remaining)*float64(b.Limit), float64(b.Remaining)*float64(a.Limit)
	if r < l || (r == l && b.Remaining < a.Remaining) {
		return b
	}
	return a
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
