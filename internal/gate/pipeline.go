package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// layerItem is one ceiling in the counter request, with what a refusal by it
// should say.
type layerItem struct {
	counter.Item
	layer, scope string
	payment      bool
	plan         string
	// advance names the ceiling's advance and size the units its items
	// asked for; index is where its item sits in the counter request and
	// topUp where the advisory top-up of a larger advance sits (noIndex: its
	// advance served it, or it asked for one unit).
	advance      advanceID
	index, topUp int
	size         int64
	// paid is the ceiling's unit when a batch took it from the advance
	// for this check beforehand (batchRequests); its from is nil otherwise.
	paid paidUnit
}

// paidUnit is a unit of an advance a batch took for one of its checks, with
// what take would have said of it had the check taken it alone.
type paidUnit struct {
	from      *units
	remaining int64
	resetIn   time.Duration
}

// noIndex is the index of an item that is not in the counter request.
const noIndex = -1

// passage is one request on its way through the pipeline: what each step
// learned, for the steps after it. It lives on its entry point's stack.
type passage struct {
	req Request
	now time.Time
	// v is the answer so far: the tenant and key once authenticated, the
	// refusal of the step that stopped the request.
	v      Verdict
	client *clientKeys
	// set is the tenant's policies, read for a check before its work is
	// weighed; matchEstimate the matching time the check reserved.
	set           policy.Set
	matchEstimate time.Duration
	// lease is Acquire's body and reservation Reserve's; nil for every
	// other request.
	lease       *Lease
	reservation *Reservation
	// at is when the request was answered for its observers: a batch's
	// checks share one reading of the clock (zero: read it).
	at time.Time
	// policies names the tenant's policies the check's items or the lease
	// named, for its observers (admission.Event.Policies).
	policies []string
}

// Admit runs the pipeline for a check, or for any other /v1 request that
// takes no new place (the policy routes, releasing and renewing a lease, a
// reset, a body too malformed to be a check, a batch or a lease). A batch
// of checks enters by AdmitBatch and a lease by Acquire. Errors:
// tenant.ErrUnauthorized for a bad key, tenant.ErrDisabled for a valid key
// of a disabled tenant, ErrInvalid for a malformed check; a
// refusal is a Verdict, not an error.
func (g *Gate) Admit(ctx context.Context, req Request) (Verdict, error) {
	p := passage{req: req, now: g.cfg.Now()}
	var ceilBuf [4]layerItem
	ceilings, work, stop, err := g.pass(ctx, &p, ceilBuf[:0])
	if stop {
		return p.v, err
	}
	defer work.release()
	// The policy items and the counter items stay on the stack for the
	// common checks; the items go to the store in a slice of their exact
	// size: with the ceilings advanced, most checks send one item.
	var polBuf [4]policyItem
	pols := polBuf[:0]
	if c := req.Check; c != nil {
		var matching time.Duration
		pols, matching, err = g.policyItems(pols, p.v.Tenant.ID, p.set, p.v.Key.Test, c, p.now)
		if p.matchEstimate > 0 {
			// What pass reserved, settled with what matching took.
			g.matching.settle(p.v.Tenant.ID, g.cfg.Now(), matching, p.matchEstimate)
		}
		if err != nil {
			return p.v, err
		}
		if c.Mode == Charge {
			return g.charge(ctx, &p, ceilings, pols)
		}
	}
	ivs, names := itemRoom(pols)
	p.policies = names
	var itemBuf [16]counter.Item
	var spentBuf [4]*units
	creq, items, spent := g.storeRequest(&p, ceilings, pols, itemBuf[:0], spentBuf[:0])
	if len(items) == 0 {
		// Every ceiling was served from its advance and there is no policy:
		// nothing for the store to decide.
		p.v.Allowed = true
		return g.answer(ctx, &p, p.v, false, nil), nil
	}
	creq.Items = slices.Clone(items)
	// The one round trip, through the tenant's circuit breaker.
	res, err := throughBreaker(ctx, g, opCheck, p.v.Tenant.ID, func() (counter.Result, error) { return g.cfg.Store.Check(ctx, creq) })
	if errors.Is(err, counter.ErrInvalid) {
		return p.v, fmt.Errorf("counter request of tenant %s: %w", p.v.Tenant.ID, err)
	}
	if err != nil {
		return g.degraded(ctx, &p, ceilings, pols, err, ivs), nil
	}
	return g.settle(ctx, &p, ceilings, pols, spent, creq, res, ivs), nil
}

// oneItem is the room of a one-item check's item verdict and of the name
// its observers are told (admission.Event.Policies), in one allocation:
// most checks have one item.
type oneItem struct {
	iv   [1]ItemVerdict
	name [1]string
}

// itemRoom returns room for pols' item verdicts (nil when there are none)
// and the names of the tenant's policies among them, for the observers.
func itemRoom(pols []policyItem) ([]ItemVerdict, []string) {
	switch len(pols) {
	case 0:
		return nil, nil
	case 1:
		r := new(oneItem)
		if pols[0].rule {
			return r.iv[:0], nil
		}
		r.name[0] = pols[0].name
		return r.iv[:0], r.name[:]
	}
	return make([]ItemVerdict, 0, len(pols)), appendPolicyNames(nil, pols)
}

// appendPolicyNames appends the names of the tenant's policies among pols
// (not Envoy rules') to names.
func appendPolicyNames(names []string, pols []policyItem) []string {
	for _, pol := range pols {
		if !pol.rule {
			names = append(names, pol.name)
		}
	}
	return names
}

// Acquire admits POST /v1/leases with its body l: the steps Admit takes
// before the store, then the shared ceilings and the lease in one round
// trip (concurrency.go). Errors are Admit's, and a *policy.FieldError for
// a lease the tenant's policies cannot hold.
func (g *Gate) Acquire(ctx context.Context, req Request, l Lease) (Verdict, error) {
	p := passage{req: req, now: g.cfg.Now(), lease: &l}
	var ceilBuf [4]layerItem
	ceilings, work, stop, err := g.pass(ctx, &p, ceilBuf[:0])
	if stop {
		return p.v, err
	}
	defer work.release()
	return g.acquire(ctx, &p, ceilings)
}

// Identify runs the steps of the pipeline that need only a request's
// headers: the instance ceiling, the client's pre-authentication bucket and
// keys that failed, and the key. The HTTP layer calls it before it reads a
// body, so that a body is read only for a tenant, within that tenant's
// share, and then passes the Identity on in the Request it admits, which
// does not take these steps again. A refusal is in the Verdict (its
// Identity is then the zero one); errors are Admit's (tenant.ErrUnauthorized
// for a bad key).
func (g *Gate) Identify(ctx context.Context, req Request) (Identity, Verdict, error) {
	p := passage{req: req, now: g.cfg.Now()}
	if stop, err := g.identify(ctx, &p); stop {
		return Identity{}, p.v, err
	}
	return Identity{tenant: p.v.Tenant, key: p.v.Key, client: p.client}, p.v, nil
}

// identify sets p's client keys, tenant and key: from p.req.Identity when
// the request was identified before, else by the instance ceiling, the
// pre-authentication buckets and the key. stop reports that p.v (a
// refusal) or err is the answer.
func (g *Gate) identify(ctx context.Context, p *passage) (stop bool, err error) {
	if id := &p.req.Identity; id.Known() {
		p.client, p.v.Tenant, p.v.Key = id.client, id.tenant, id.key
		return false, nil
	}
	if g.enter(ctx, p) || g.preAuthenticate(ctx, p) {
		return true, nil
	}
	if err := g.authenticate(ctx, p); err != nil {
		return true, err
	}
	return false, nil
}

// pass takes p through the steps before the shared store: the instance
// ceiling, the pre-authentication buckets and the key (identify), the
// tenant's work budget, the per-IP L1; it appends the shared ceilings to
// out. stop reports that p.v (a refusal) or err is the answer; otherwise
// the caller releases work.
func (g *Gate) pass(ctx context.Context, p *passage, out []layerItem) (ceilings []layerItem, work held, stop bool, err error) {
	if stop, err := g.identify(ctx, p); stop {
		return nil, held{}, true, err
	}
	// The tenant's work in progress on this instance is bounded before any
	// of it is done: a check weighs its items (checkWeight, its tenant's
	// policies read for it), any other request 1.
	weight, items := int64(1), int64(1)
	if c := p.req.Check; c != nil {
		if p.set, err = g.cfg.Policies.For(ctx, p.v.Tenant.ID); err != nil {
			return nil, held{}, true, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, p.v.Tenant.ID, err)
		}
		weight, items = checkWeight(p.set, c), int64(len(c.Items))
	}
	if work, stop, err = g.reserveWork(ctx, p, weight, items); stop {
		return nil, held{}, true, err
	}
	if ceilings, stop, err = g.ceilings(ctx, p, out); stop {
		work.release()
		return nil, held{}, true, err
	}
	return ceilings, work, false, nil
}

// enter is the instance ceiling: keyless, in memory, nothing in the
// request moves it. It reports whether it refused (p.v).
func (g *Gate) enter(ctx context.Context, p *passage) bool {
	n := g.cfg.InstanceCeiling
	if n <= 0 {
		return false
	}
	d := g.l1Check(ctx, p.now, "", "instance", limit.TokenBucket, n, limit.Every(time.Second), 1)
	if d.Allowed {
		return false
	}
	g.refuse(ctx, p, admission.Refusal{Layer: admission.LayerInstance, Limit: n, Window: time.Second, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt})
	return true
}

// preAuthenticate is the pre-authentication bucket per IP, at the highest
// per-IP limit of any plan, so that a tenant is never held below its plan
// before its key is known; and, in the same in-memory call, a peek at the
// client network's keys that failed to authenticate: past
// AuthFailuresPerMinute it is refused before its key is looked up, so that
// guessing costs the guesser, not the database. It reports whether it
// refused (p.v).
func (g *Gate) preAuthenticate(ctx context.Context, p *passage) bool {
	p.client = g.clients.get(p.req.ClientIP.Unmap(), g.ipDigest)
	maxIP := g.cfg.Tenants.MaxIPPerMinute(ctx)
	failItem := g.authFailItem(p.client)
	pre, err := g.localCheck(ctx, counter.Request{Mode: counter.Peek, Ceilings: 1, Now: p.now},
		counter.Item{Key: p.client.pre, Algorithm: limit.SlidingWindow, Limit: maxIP, Window: limit.Every(time.Minute), Cost: 1},
		failItem,
	)
	refusal := admission.Refusal{Layer: admission.LayerIP, Window: time.Minute}
	switch {
	case err != nil:
		g.l1Bug(ctx, err)
		return false
	case !pre[0].Allowed:
		refusal.Limit, refusal.RetryAfter, refusal.ResetAt = maxIP, pre[0].RetryAfter, pre[0].ResetAt
	case !pre[1].Allowed:
		refusal.Limit, refusal.RetryAfter, refusal.ResetAt = failItem.Limit, pre[1].RetryAfter, pre[1].ResetAt
	default:
		return false
	}
	g.refuse(ctx, p, refusal)
	return true
}

// authFailItem is the counter of the client network's keys that failed to
// authenticate.
func (g *Gate) authFailItem(client *clientKeys) counter.Item {
	return counter.Item{Key: client.authFail, Algorithm: limit.SlidingWindow, Limit: g.cfg.AuthFailuresPerMinute, Window: limit.Every(time.Minute), Cost: 1}
}

// authenticate looks the key up and sets p.v's tenant and key; a key that
// does not authenticate counts against its client network.
func (g *Gate) authenticate(ctx context.Context, p *passage) error {
	key, t, err := g.cfg.Tenants.Authenticate(ctx, p.req.Bearer)
	if err != nil {
		if errors.Is(err, tenant.ErrDisabled) {
			// A valid key: not a failure of its client network's.
			return err
		}
		if !errors.Is(err, tenant.ErrUnauthorized) {
			return fmt.Errorf("%w: key: %w", ErrUnavailable, err)
		}
		if _, err := g.localCheck(ctx, counter.Request{Now: p.now}, g.authFailItem(p.client)); err != nil {
			g.l1Bug(ctx, err)
		}
		g.met.authFail.Inc()
		return err
	}
	p.v.Tenant, p.v.Key = t, key
	return nil
}

// reserveWork takes weight units of the tenant's work in progress for
// items; a weight beyond the items is wildcard tries, whose matching time
// is reserved first (p.matchEstimate) from the tenant's budget
// (matchBudget), waiting its turn while the budget is spent; past
// matchWait it is refused. stop reports that p.v (a refusal)
// or err is the answer; otherwise the caller releases work.
func (g *Gate) reserveWork(ctx context.Context, p *passage, weight, items int64) (work held, stop bool, err error) {
	t := p.v.Tenant
	if weight > items {
		p.matchEstimate = time.Duration(weight-items) * wildcardTries * tryCost
		retry, ok, err := g.awaitMatching(ctx, t.ID, p.matchEstimate)
		if err != nil {
			return held{}, true, err
		}
		if !ok {
			g.refuse(ctx, p, admission.Refusal{Layer: admission.LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: retry, ResetAt: p.now.Add(retry), Key: admission.LayerInflight})
			return held{}, true, nil
		}
	}
	work, ok := g.inflight.acquire(ctx, t.ID, weight)
	if !ok {
		g.refuse(ctx, p, admission.Refusal{Layer: admission.LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: time.Second, ResetAt: p.now.Add(time.Second), Key: admission.LayerInflight})
		return held{}, true, nil
	}
	return work, false, nil
}

// ceilings runs the per-IP L1, a local damper before the shared counter,
// and appends the shared ceilings to out (sharedCeilings). stop reports
// that p.v (a refusal) or err is the answer.
func (g *Gate) ceilings(ctx context.Context, p *passage, out []layerItem) (_ []layerItem, stop bool, _ error) {
	t := p.v.Tenant
	effective, err := g.cfg.Tenants.Plan(ctx, tenant.EffectivePlanName(t.Plan, t.BillingStatus))
	if err != nil {
		return nil, true, fmt.Errorf("%w: effective plan of tenant %s: %w", ErrUnavailable, t.ID, err)
	}
	ipLimit, ipKey := ipPerMinute(t, effective), p.client.route(p.req.Route)
	if g.ipL1(ctx, p, ipKey, ipLimit) {
		return nil, true, nil
	}
	// A lease's acquire and a reservation count toward the allotments as
	// a check does.
	counted := p.counted()
	return sharedCeilings(out, t, p.v.Key, effective, ipKey, ipLimit, counted), false, nil
}

// ipL1 is the per-IP L1 in this instance's memory. It reports whether it
// refused (p.v).
func (g *Gate) ipL1(ctx context.Context, p *passage, ipKey string, ipLimit int64) bool {
	d := g.l1Check(ctx, p.now, p.v.Tenant.ID, ipKey, limit.SlidingWindow, ipLimit, limit.Every(time.Minute), 1)
	if d.Allowed {
		return false
	}
	g.refuse(ctx, p, admission.Refusal{Layer: admission.LayerIP, Limit: ipLimit, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: ipKey})
	return true
}

// sharedCeilings appends to out the shared ceilings a request passes:
// per-IP L2, the tenant's quotas and, when counted (a check, a lease), the
// allotment or the sandbox's.
func sharedCeilings(out []layerItem, t tenant.Tenant, key tenant.Key, effective tenant.Plan, ipKey string, ipLimit int64, counted bool) []layerItem {
	qMin, qHour := effective.QuotaPerMinute, effective.QuotaPerHour
	if t.QuotaPerMinute != nil {
		qMin = *t.QuotaPerMinute
	}
	if t.QuotaPerHour != nil {
		qHour = *t.QuotaPerHour
	}
	out = append(out,
		layerItem{Item: counter.Item{Key: ipKey, Algorithm: limit.SlidingWindow, Limit: ipLimit, Window: limit.Every(time.Minute), Cost: 1}, layer: admission.LayerIP},
		layerItem{Item: counter.Item{Key: "quota:minute", Algorithm: limit.FixedWindow, Limit: qMin, Window: limit.Every(time.Minute), Cost: 1}, layer: admission.LayerQuota, scope: "minute"},
		layerItem{Item: counter.Item{Key: "quota:hour", Algorithm: limit.FixedWindow, Limit: qHour, Window: limit.Every(time.Hour), Cost: 1}, layer: admission.LayerQuota, scope: "hour"},
	)
	switch {
	case !counted:
	case key.Test:
		out = append(out, layerItem{Item: counter.Item{Key: "sandbox", Algorithm: limit.SlidingWindow, Limit: tenant.SandboxAllotment, Window: limit.Every(30 * 24 * time.Hour), Cost: 1}, layer: admission.LayerSandbox})
	case effective.MonthlyChecks != nil:
		out = append(out, layerItem{
			Item:    counter.Item{Key: "allotment", Algorithm: limit.FixedWindow, Limit: *effective.MonthlyChecks, Window: limit.Month, Cost: 1},
			layer:   admission.LayerAllotment,
			payment: tenant.HeldToStarter(t),
			plan:    effective.Name,
		})
	}
	return out
}

// ipPerMinute is the tenant's per-IP limit: its own, else its plan's, else
// the default.
func ipPerMinute(t tenant.Tenant, effective tenant.Plan) int64 {
	ipLimit := t.RateLimitPerMinute
	if ipLimit <= 0 {
		ipLimit = effective.IPPerMinute
	}
	if ipLimit <= 0 {
		ipLimit = tenant.DefaultIPPerMinute
	}
	return ipLimit
}

// storeRequest builds the one counter request, its items appended to items:
// the ceilings' (ceilingItems), then the policies', which always go to the
// store, exact per check. It sets every item's index.
func (g *Gate) storeRequest(p *passage, ceilings []layerItem, pols []policyItem, items []counter.Item, spent []*units) (counter.Request, []counter.Item, []*units) {
	creq := counter.Request{Group: p.v.Tenant.ID}
	if p.req.Check != nil {
		creq.Mode = p.req.Check.Mode
	}
	items, spent = g.ceilingItems(p, ceilings, items, spent)
	creq.Ceilings = len(items)
	for i := range pols {
		pols[i].index = len(items)
		items = append(items, pols[i].Item)
	}
	return creq, items, spent
}

// ceilingItems appends to items what the ceilings ask of the store, a
// check's or an acquire's: each ceiling spends a unit of this instance's
// advance on its counter when it has one, or was paid one by its batch
// (advance.go; the unit is appended to spent, to be given back if another
// ceiling refuses), or goes to the
// store in this request, renewing the advance on the way. It sets every
// ceiling's index.
func (g *Gate) ceilingItems(p *passage, ceilings []layerItem, items []counter.Item, spent []*units) ([]counter.Item, []*units) {
	t, now := p.v.Tenant, p.now
	for i := range ceilings {
		c := &ceilings[i]
		// A plan may allow more than a counter holds; beyond MaxLimit a
		// ceiling is as good as none.
		c.Limit = min(c.Limit, limit.MaxLimit)
		c.advance = advanceID{t.ID, c.Key}
		c.index, c.topUp = noIndex, noIndex
		ok, remaining, resetIn, from := c.paid.from != nil, c.paid.remaining, c.paid.resetIn, c.paid.from
		if !ok {
			ok, remaining, resetIn, from = g.advances.take(c.advance, now)
		}
		if ok {
			spent = append(spent, from)
			p.v.Tightest = tighter(p.v.Tightest, Quota{Name: c.layer, Limit: c.Limit, Remaining: remaining, Window: windowLength(c.Window, now), ResetIn: resetIn})
			continue
		}
		c.index = len(items)
		c.size = g.advances.size(c.advance, now, advanceEnd(c.Window, now, now))
		if c.size > 1 {
			c.topUp = c.index + 1
		}
		items = append(items, advanceItems(c.Item, c.size)...)
	}
	return items, spent
}

// settle reads the store's answer to creq: a ceiling's refusal, or the
// advances renewed and the policies' verdicts (policyVerdict, into items).
func (g *Gate) settle(ctx context.Context, p *passage, ceilings []layerItem, pols []policyItem, spent []*units, creq counter.Request, res counter.Result, items []ItemVerdict) Verdict {
	if g.ceilingRefused(ctx, p, ceilings, spent, res) {
		return p.v
	}
	g.renewAdvances(p, ceilings, creq, res)
	return g.policyVerdict(ctx, p, pols, res, items)
}

// ceilingRefused reports whether a ceiling that went to the store refused
// in res, and then sets p.v to its refusal: the store counted none of the
// ceilings, and what the advances spent is given back.
func (g *Gate) ceilingRefused(ctx context.Context, p *passage, ceilings []layerItem, spent []*units, res counter.Result) bool {
	for _, c := range ceilings {
		if c.index == noIndex {
			continue
		}
		if d := res.Decisions[c.index]; !d.Allowed {
			for _, u := range spent {
				g.advances.giveBack(u)
			}
			g.refuse(ctx, p, admission.Refusal{
				Layer: c.layer, Scope: c.scope, Limit: c.Limit, Window: windowLength(c.Window, res.Now),
				RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, PaymentRequired: c.payment, Plan: c.plan, Key: c.Key,
			})
			return true
		}
	}
	return false
}

// renewAdvances gives each ceiling that went to the store what the store
// granted its advance: the unit this request spent and, when the top-up
// was granted, the rest.
func (g *Gate) renewAdvances(p *passage, ceilings []layerItem, creq counter.Request, res counter.Result) {
	for _, c := range ceilings {
		if c.index == noIndex {
			continue
		}
		d := res.Decisions[c.index]
		granted, remaining := int64(1), d.Remaining
		if c.topUp != noIndex && res.Decisions[c.topUp].Allowed {
			granted, remaining = 1+creq.Items[c.topUp].Cost, res.Decisions[c.topUp].Remaining
		}
		g.advances.grant(c.advance, p.now, advanceEnd(c.Window, p.now, res.Now), c.Limit, granted, remaining)
		p.v.Tightest = tighter(p.v.Tightest, Quota{Name: c.layer, Limit: c.Limit, Remaining: remaining + granted - 1, Window: windowLength(c.Window, res.Now), ResetIn: d.ResetAt.Sub(res.Now)})
	}
}

// policyVerdict answers a request no ceiling refused with its policies'
// decisions, their item verdicts appended to items[:0] (nil: a slice of
// their own).
func (g *Gate) policyVerdict(ctx context.Context, p *passage, pols []policyItem, res counter.Result, items []ItemVerdict) Verdict {
	v := p.v
	v.Allowed = true
	var refusals []admission.Refusal
	v.Items = items[:0]
	if items == nil {
		v.Items = make([]ItemVerdict, 0, len(pols))
	}
	for _, pol := range pols {
		d := res.Decisions[pol.index]
		iv := ItemVerdict{Policy: pol.name, Decision: d, Window: windowLength(pol.Window, res.Now), Shadow: pol.shadow}
		if !d.Allowed {
			refusals = append(refusals, admission.Refusal{Layer: admission.LayerPolicy, Policy: pol.name, Limit: pol.Limit, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: pol.Key, Shadow: pol.shadow, AlertAfter: pol.alertAfter})
			// A shadow policy reports what it would decide (this item's
			// allowed) and never refuses the check (the answer's allowed).
			if !pol.shadow {
				v.Allowed = false
			}
		}
		v.Items = append(v.Items, iv)
		if !pol.shadow {
			v.Tightest = tighter(v.Tightest, Quota{Name: pol.name, Limit: pol.Limit, Remaining: d.Remaining, Window: windowLength(pol.Window, res.Now), ResetIn: d.ResetAt.Sub(res.Now)})
		}
	}
	return g.answer(ctx, p, v, false, refusals)
}

// answer counts and reports v, which no ceiling refused, as p's answer:
// allowed, or refused by the tenant's policies.
func (g *Gate) answer(ctx context.Context, p *passage, v Verdict, degraded bool, refusals []admission.Refusal) Verdict {
	outcome := admission.OutcomeAllowed
	if !v.Allowed {
		outcome = admission.LayerPolicy
	}
	g.met.answered(v.Allowed, degraded)
	g.observe(ctx, p, v, outcome, degraded, refusals)
	return v
}

// refuse records a ceiling's refusal r of p, and makes p.v the verdict
// carrying it.
func (g *Gate) refuse(ctx context.Context, p *passage, r admission.Refusal) {
	p.v.Refusal = &r
	p.v.Allowed = false
	g.met.refused[r.Layer].Inc()
	if p.v.Tenant.ID != "" {
		g.observe(ctx, p, p.v, r.Layer, r.Degraded, []admission.Refusal{r})
	}
}

// counted reports whether p counts as a check: a check (but a charge, which
// counts usage a check admitted before), a lease's acquire or a
// reservation.
func (p *passage) counted() bool {
	return (p.req.Check != nil && p.req.Check.Mode != Charge) || p.lease != nil || p.reservation != nil
}

// observe tells the observers what became of p: v, its outcome.
func (g *Gate) observe(ctx context.Context, p *passage, v Verdict, outcome string, degraded bool, refusals []admission.Refusal) {
	if g.cfg.Observer == nil {
		return
	}
	at := p.at
	if at.IsZero() {
		at = g.cfg.Now()
	}
	g.cfg.Observer.Observe(ctx, admission.Event{
		At: at, TenantID: v.Tenant.ID, KeyID: v.Key.ID, Live: !v.Key.Test, Route: p.req.Route,
		Checked: p.counted(), Outcome: outcome, Degraded: degraded, Refusals: refusals, Policies: p.policies,
	})
}

// l1Check consumes cost from an in-memory counter of this instance at now.
func (g *Gate) l1Check(ctx context.Context, now time.Time, group, key string, alg limit.Algorithm, lim int64, w limit.Window, cost int64) limit.Decision {
	d, err := g.localCheck(ctx, counter.Request{Now: now, Group: group}, counter.Item{Key: key, Algorithm: alg, Limit: lim, Window: w, Cost: cost})
	if err != nil {
		g.l1Bug(ctx, err)
		return limit.Decision{Allowed: true}
	}
	return d[0]
}

// localBuf holds the items and decisions of a call of the local store,
// reused across requests: Local is an interface, so a slice literal passed
// to it, or a Result's decisions, would be allocated on every request.
type localBuf struct {
	items     [2]counter.Item
	decisions [2]limit.Decision
}

var localBufs = sync.Pool{New: func() any { return new(localBuf) }}

// localCheck asks the local store about req with items (one or two) and
// returns their decisions.
func (g *Gate) localCheck(ctx context.Context, req counter.Request, items ...counter.Item) ([2]limit.Decision, error) {
	buf := localBufs.Get().(*localBuf)
	req.Items = buf.items[:copy(buf.items[:], items)]
	res, err := g.cfg.Local.CheckInto(ctx, req, buf.decisions[:0])
	var d [2]limit.Decision
	copy(d[:], res.Decisions)
	*buf = localBuf{}
	localBufs.Put(buf)
	return d, err
}

// l1Bug logs an in-memory layer's refusal of its own request. Only an
// invalid request fails in memory: a bug, so the caller lets the request in
// and says so.
func (g *Gate) l1Bug(ctx context.Context, err error) {
	g.cfg.Logger.ErrorContext(ctx, "bug: in-memory layer refused its own request", "err", err)
}

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
