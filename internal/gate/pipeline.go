package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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
	pre, err := g.localCheck(ctx, counter.Request{Mode: counter.Peek, Ceilings: 1, Now: now},
		counter.Item{Key: ck.pre, Algorithm: limit.SlidingWindow, Limit: maxIP, Window: perMinute, Cost: 1},
		failItem,
	)
	switch {
	case err != nil:
		g.l1Bug(ctx, err)
	case !pre[0].Allowed:
		d := pre[0]
		return g.refuse(ctx, req, v, Refusal{Layer: LayerIP, Limit: maxIP, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt}), nil
	case !pre[1].Allowed:
		d := pre[1]
		return g.refuse(ctx, req, v, Refusal{Layer: LayerIP, Limit: failItem.Limit, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt}), nil
	}
	key, t, err := g.cfg.Tenants.Authenticate(ctx, req.Bearer)
	if err != nil {
		if !errors.Is(err, tenant.ErrUnauthorized) {
			return v, fmt.Errorf("%w: key: %w", ErrUnavailable, err)
		}
		if _, err := g.localCheck(ctx, counter.Request{Now: now}, failItem); err != nil {
			g.l1Bug(ctx, err)
		}
		g.met.authFail.Inc()
		return v, err
	}
	v.Tenant, v.Key = t, key
	if req.batch {
		return v, nil
	}

	// The tenant's work in progress on this instance is bounded before any
	// of it is done.
	var set policy.Set
	weight := int64(1)
	if req.Check != nil {
		if set, err = g.cfg.Policies.For(ctx, t.ID); err != nil {
			return v, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, t.ID, err)
		}
		weight = checkWeight(set, req.Check)
	}
	// A check that may try wildcards reserves its matching time from the
	// tenant's budget (matchBudget), waiting its turn while the budget is
	// spent; past matchWait it is refused.
	var matchEstimate time.Duration
	if req.Check != nil && weight > int64(len(req.Check.Items)) {
		matchEstimate = time.Duration(weight-int64(len(req.Check.Items))) * wildcardTries * tryCost
		retry, ok, err := g.awaitMatching(ctx, t.ID, matchEstimate)
		if err != nil {
			return v, err
		}
		if !ok {
			return g.refuse(ctx, req, v, Refusal{Layer: LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: retry, ResetAt: now.Add(retry), Key: LayerInflight}), nil
		}
	}
	work, ok := g.inflight.acquire(ctx, t.ID, weight)
	if !ok {
		return g.refuse(ctx, req, v, Refusal{Layer: LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: time.Second, ResetAt: now.Add(time.Second), Key: LayerInflight}), nil
	}
	defer work.release()
	effective, err := g.cfg.Tenants.Plan(ctx, tenant.EffectivePlanName(t.Plan, t.BillingStatus))
	if err != nil {
		return v, fmt.Errorf("%w: effective plan of tenant %s: %w", ErrUnavailable, t.ID, err)
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
	// The policy items stay on the stack for the common checks.
	var polBuf [4]policyItem
	pols := polBuf[:0]
	if req.Check != nil {
		var matching time.Duration
		pols, matching, err = g.policyItems(pols, t.ID, set, key.Test, req.Check, now)
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
	// The items are gathered on the stack and sent in a slice of their
	// exact size: with the ceilings leased, most checks send one item.
	var itemBuf [16]counter.Item
	items := itemBuf[:0]
	creq := counter.Request{Group: t.ID}
	if req.Check != nil {
		creq.Mode = req.Check.Mode
	}
	var spentBuf [4]*units
	spent := spentBuf[:0] // lease units spent here, given back if a ceiling refuses
	for i := range ceilings {
		c := &ceilings[i]
		// A plan may allow more than a counter holds; beyond MaxLimit a
		// ceiling is as good as none.
		c.Limit = min(c.Limit, limit.MaxLimit)
		c.lease = leaseID{t.ID, c.Key}
		if ok, remaining, resetIn, from := g.leases.take(c.lease, now); ok {
			spent = append(spent, from)
			c.at = -1
			v.Tightest = tighter(v.Tightest, Quota{Name: c.layer, Limit: c.Limit, Remaining: remaining, Window: windowLength(c.Window, now), ResetIn: resetIn})
			continue
		}
		c.at = len(items)
		c.size = g.leases.size(c.lease, now, leaseEnd(c.Window, now, now))
		items = append(items, leasedItems(c.Item, c.size)...)
	}
	creq.Ceilings = len(items)
	for _, p := range pols {
		items = append(items, p.Item)
	}
	if len(items) == 0 {
		// Every ceiling was served from its lease and there is no policy:
		// nothing for the store to decide.
		v.Allowed = true
		return g.answer(ctx, req, v, false, nil), nil
	}
	creq.Items = slices.Clone(items)

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
			for _, u := range spent {
				g.leases.giveBack(u)
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
		iv := ItemVerdict{Policy: p.name, Decision: d, Window: windowLength(p.Window, res.Now), Shadow: p.shadow}
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
	return g.answer(ctx, req, v, false, refusals), nil
}

// answer counts and reports v, which no ceiling refused, as the pipeline's
// answer: allowed, or refused by the tenant's policies.
func (g *Gate) answer(ctx context.Context, req Request, v Verdict, degraded bool, refusals []Refusal) Verdict {
	outcome := OutcomeAllowed
	if !v.Allowed {
		outcome = LayerPolicy
	}
	g.met.answered(v.Allowed, degraded)
	g.observe(ctx, req, v, outcome, degraded, refusals)
	return v
}

// storeCheck makes the one round trip, through the tenant's circuit breaker.
func (g *Gate) storeCheck(ctx context.Context, tenantID string, req counter.Request) (counter.Result, error) {
	return throughBreaker(ctx, g, opCheck, tenantID, func() (counter.Result, error) { return g.cfg.Store.Check(ctx, req) })
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
	d, err := g.localCheck(ctx, counter.Request{Now: now, Group: group}, counter.Item{Key: key, Algorithm: alg, Limit: lim, Window: w, Cost: 1})
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
	var res counter.Result
	var err error
	if g.l1Into != nil {
		res, err = g.l1Into.CheckInto(ctx, req, buf.decisions[:0])
	} else {
		res, err = g.l1.Check(ctx, req)
	}
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
