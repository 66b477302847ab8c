package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// Bounds of a batch of checks (POST /v1/check/batch).
const (
	MaxBatchChecks = counter.MaxBatch
	MaxBatchItems  = 4000
)

// BatchVerdict answers a batch of checks. Refusal set means the batch was
// refused whole, before any of its checks was decided (the instance
// ceiling, the per-IP bucket before authentication, the tenant's work in
// progress); otherwise Checks[i] answers the batch's i-th check exactly as
// Admit answers that check alone.
type BatchVerdict struct {
	Verdict
	Checks []Verdict
}

// batchCheck is one check of a batch on its way through the pipeline.
type batchCheck struct {
	req      Request
	v        Verdict
	ceilings []layerItem
	pols     []policyItem
	spent    []*units
	// at is the index of the check's counter request in the batch's store
	// call, -1 when it needs none (refused by L1, or every ceiling leased
	// and no policy).
	at   int
	creq counter.Request
	done bool
}

// AdmitBatch runs the pipeline for checks sent in one request. The request
// passes the instance ceiling, the per-IP bucket before authentication,
// authentication, and the tenant's work in progress (weighed by every
// check's items) once; then each check passes the per-IP layer, the quotas
// and the allotment or sandbox as one check, as Admit passes it, and the
// counter requests of all of them go to the store in one round trip
// (counter.CheckBatch). Errors are Admit's; a malformed check is a
// policy.FieldError whose Field names it ("checks[3].items[0].policy").
func (g *Gate) AdmitBatch(ctx context.Context, req Request, checks []Check) (BatchVerdict, error) {
	var bv BatchVerdict
	if err := batchShape(checks); err != nil {
		return bv, err
	}
	// The request as a whole: the ceilings before authentication and the
	// key, as Admit takes them for a request without a check.
	whole, err := g.Admit(ctx, Request{Route: req.Route, ClientIP: req.ClientIP, Bearer: req.Bearer, batch: true})
	if err != nil || whole.Refusal != nil {
		bv.Verdict = whole
		return bv, err
	}
	t, key := whole.Tenant, whole.Key
	bv.Tenant, bv.Key = t, key
	now := g.cfg.Now()

	set, err := g.cfg.Policies.For(ctx, t.ID)
	if err != nil {
		return bv, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, t.ID, err)
	}
	var weight, items int64
	for i := range checks {
		weight += checkWeight(set, &checks[i])
		items += int64(len(checks[i].Items))
	}
	var matchEstimate time.Duration
	if weight > items {
		matchEstimate = time.Duration(weight-items) * wildcardTries * tryCost
		retry, ok, err := g.awaitMatching(ctx, t.ID, matchEstimate)
		if err != nil {
			return bv, err
		}
		if !ok {
			bv.Verdict = g.refuse(ctx, req, whole, Refusal{Layer: LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: retry, ResetAt: now.Add(retry), Key: LayerInflight})
			return bv, nil
		}
	}
	work, ok := g.inflight.acquire(ctx, t.ID, weight)
	if !ok {
		bv.Verdict = g.refuse(ctx, req, whole, Refusal{Layer: LayerInflight, Limit: g.cfg.TenantInflight, Window: time.Second, RetryAfter: time.Second, ResetAt: now.Add(time.Second), Key: LayerInflight})
		return bv, nil
	}
	defer work.release()

	// Every check is resolved against the policies before anything is
	// counted: a batch is decided whole or refused whole as malformed.
	bcs := make([]batchCheck, len(checks))
	var matching time.Duration
	for i := range checks {
		bc := &bcs[i]
		bc.req = Request{Route: req.Route, ClientIP: req.ClientIP, Bearer: req.Bearer, Check: &checks[i]}
		bc.v = Verdict{Tenant: t, Key: key}
		var took time.Duration
		bc.pols, took, err = g.policyItems(nil, t.ID, set, key.Test, &checks[i], now)
		matching += took
		if err != nil {
			var fe *policy.FieldError
			if errors.As(err, &fe) {
				return bv, &policy.FieldError{Field: fmt.Sprintf("checks[%d].%s", i, fe.Field), Reason: fe.Reason}
			}
			return bv, err
		}
	}
	if matchEstimate > 0 {
		g.matching.settle(t.ID, g.cfg.Now(), matching, matchEstimate)
	}
	effective, err := g.cfg.Tenants.Plan(ctx, tenant.EffectivePlanName(t.Plan, t.BillingStatus))
	if err != nil {
		return bv, fmt.Errorf("%w: effective plan of tenant %s: %w", ErrUnavailable, t.ID, err)
	}

	ck := g.clients.get(req.ClientIP.Unmap(), g.ipDigest)
	ipKey := ck.route(req.Route)
	ipLimit := t.RateLimitPerMinute
	if ipLimit <= 0 {
		ipLimit = effective.IPPerMinute
	}
	if ipLimit <= 0 {
		ipLimit = tenant.DefaultIPPerMinute
	}
	var creqs []counter.Request
	for i := range bcs {
		bc := &bcs[i]
		bc.at = -1
		// The per-IP L1, then the shared ceilings, per check.
		if d := g.l1Check(ctx, now, t.ID, ipKey, limit.SlidingWindow, ipLimit, limit.Every(time.Minute)); !d.Allowed {
			bc.v = g.refuse(ctx, bc.req, bc.v, Refusal{Layer: LayerIP, Limit: ipLimit, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: ipKey})
			bc.done = true
			continue
		}
		bc.ceilings = checkCeilings(t, key, effective, ipKey, ipLimit)
		var creq counter.Request
		creq, bc.spent, bc.v.Tightest = g.leaseCeilings(t.ID, bc.ceilings, bc.pols, now)
		if len(creq.Items) == 0 {
			bc.v.Allowed = true
			bc.v = g.answer(ctx, bc.req, bc.v, false, nil)
			bc.done = true
			continue
		}
		creq.Mode = checks[i].Mode
		bc.creq, bc.at = creq, len(creqs)
		creqs = append(creqs, creq)
	}

	var results []counter.Result
	var errs []error
	if len(creqs) > 0 {
		results, errs, err = g.storeBatch(ctx, t.ID, creqs)
		if err != nil && errors.Is(err, counter.ErrInvalid) {
			return bv, fmt.Errorf("counter requests of tenant %s: %w", t.ID, err)
		}
	}
	bv.Checks = make([]Verdict, len(bcs))
	for i := range bcs {
		bc := &bcs[i]
		if !bc.done {
			if err := errs[bc.at]; err != nil {
				bc.v = g.degraded(ctx, bc.req, bc.v, bc.ceilings, bc.pols, err)
			} else {
				bc.v = g.settle(ctx, bc.req, bc.v, bc.ceilings, bc.pols, bc.spent, bc.creq, results[bc.at], now)
			}
		}
		bv.Checks[i] = bc.v
	}
	bv.Allowed = true
	return bv, nil
}

// batchShape checks a batch's bounds: 1 to MaxBatchChecks checks of at most
// MaxBatchItems items in all.
func batchShape(checks []Check) error {
	if len(checks) == 0 {
		return &policy.FieldError{Field: "checks", Reason: "at least one check is required"}
	}
	if len(checks) > MaxBatchChecks {
		return &policy.FieldError{Field: "checks", Reason: fmt.Sprintf("at most %d checks per batch", MaxBatchChecks)}
	}
	n := 0
	for i, c := range checks {
		n += len(c.Items)
		if n > MaxBatchItems {
			return &policy.FieldError{Field: fmt.Sprintf("checks[%d].items", i), Reason: fmt.Sprintf("the batch holds more than %d items in all", MaxBatchItems)}
		}
	}
	return nil
}

// checkCeilings lists the shared ceilings a check passes: per-IP L2, the
// tenant's quotas, the allotment or the sandbox (Admit's steps 3 and 4).
func checkCeilings(t tenant.Tenant, key tenant.Key, effective tenant.Plan, ipKey string, ipLimit int64) []layerItem {
	ceilings := make([]layerItem, 0, 4)
	ceilings = append(ceilings,
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
	return ceilings
}

// leaseCeilings spends a unit of each ceiling's lease where it has one,
// and lays out the check's counter request: the other ceilings (renewing
// their leases) and the policies, as Admit does. It returns the request
// (no items when the store need not be asked), the lease units spent, and
// the tightest of the leased ceilings.
func (g *Gate) leaseCeilings(tenantID string, ceilings []layerItem, pols []policyItem, now time.Time) (counter.Request, []*units, Quota) {
	var tightest Quota
	var spent []*units
	items := make([]counter.Item, 0, 2*len(ceilings)+len(pols))
	for i := range ceilings {
		c := &ceilings[i]
		c.Limit = min(c.Limit, limit.MaxLimit)
		c.lease = leaseID{tenantID, c.Key}
		if ok, remaining, resetIn, from := g.leases.take(c.lease, now); ok {
			spent = append(spent, from)
			c.at = -1
			tightest = tighter(tightest, Quota{Name: c.layer, Limit: c.Limit, Remaining: remaining, Window: windowLength(c.Window, now), ResetIn: resetIn})
			continue
		}
		c.at = len(items)
		c.size = g.leases.size(c.lease, now, leaseEnd(c.Window, now, now))
		items = append(items, leasedItems(c.Item, c.size)...)
	}
	creq := counter.Request{Group: tenantID, Ceilings: len(items)}
	for _, p := range pols {
		items = append(items, p.Item)
	}
	if len(items) > 0 {
		creq.Items = slices.Clip(items)
	}
	return creq, spent, tightest
}

// batchResult is what one store call for a batch returns.
type batchResult struct {
	results []counter.Result
	errs    []error
}

// storeBatch makes the batch's one round trip through the tenant's circuit
// breaker: the store's failure to answer any of the requests counts as a
// failure of the call. err is that failure, or an ErrInvalid of a request
// (a bug), or the breaker's refusal, in which case every errs[i] is it.
func (g *Gate) storeBatch(ctx context.Context, tenantID string, reqs []counter.Request) ([]counter.Result, []error, error) {
	br, err := throughBreaker(ctx, g, opCheck, tenantID, func() (batchResult, error) {
		res, errs := counter.CheckBatch(ctx, g.cfg.Store, reqs)
		var first error
		for _, e := range errs {
			if e != nil && (first == nil || errors.Is(e, counter.ErrInvalid)) {
				first = e
			}
		}
		return batchResult{res, errs}, first
	})
	if br.errs == nil {
		br.results, br.errs = make([]counter.Result, len(reqs)), make([]error, len(reqs))
		for i := range br.errs {
			br.errs[i] = err
		}
	}
	return br.results, br.errs, err
}

// settle turns the store's answer to a check's counter request into its
// verdict, as Admit does after its round trip: a ceiling's refusal (the
// leases' spent units given back), else the leases granted and the
// policies' verdicts.
func (g *Gate) settle(ctx context.Context, req Request, v Verdict, ceilings []layerItem, pols []policyItem, spent []*units, creq counter.Request, res counter.Result, now time.Time) Verdict {
	for _, c := range ceilings {
		if c.at < 0 {
			continue
		}
		if d := res.Decisions[c.at]; !d.Allowed {
			for _, u := range spent {
				g.leases.giveBack(u)
			}
			return g.refuse(ctx, req, v, Refusal{
				Layer: c.layer, Scope: c.scope, Limit: c.Limit, Window: windowLength(c.Window, res.Now),
				RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, PaymentRequired: c.payment, Plan: c.plan, Key: c.Key,
			})
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
			if !p.shadow {
				v.Allowed = false
			}
		}
		v.Items = append(v.Items, iv)
		if !p.shadow {
			v.Tightest = tighter(v.Tightest, Quota{Name: p.name, Limit: p.Limit, Remaining: d.Remaining, Window: windowLength(p.Window, res.Now), ResetIn: d.ResetAt.Sub(res.Now)})
		}
	}
	return g.answer(ctx, req, v, false, refusals)
}
