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

// Bounds of a batch of checks (POST /v1/check/batch).
const (
	MaxBatchChecks = counter.MaxBatch
	MaxBatchItems  = 4000
)

// BatchVerdict answers a batch of checks. admission.Refusal set means the batch was
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
	p        passage
	ceilings []layerItem
	pols     []policyItem
	spent    []*units
	// index is where the check's counter request sits in the batch's store
	// call; noIndex when it needs none (refused by L1, or every ceiling
	// served by its advance and no policy).
	index int
	creq  counter.Request
	done  bool
}

// batchBufs holds the slices a batch's checks take their parts from, one
// slice for each part of every check: a batch of checks allocates about
// as often as one check. They are pooled, so none of them is handed to
// anyone who might keep it once AdmitBatch returns: not to the store (the
// counter items go to it in a slice of their own, some stores still
// reading a call they gave up on), not to the caller (the verdicts and
// their items are the batch's own).
type batchBufs struct {
	checks   []batchCheck
	pols     []policyItem
	ceilings []layerItem
	items    []counter.Item
	spent    []*units
}

var batchBufPool = sync.Pool{New: func() any { return new(batchBufs) }}

// release empties b, so that it keeps nothing of the batch alive, and puts
// it back in batchBufPool. (What it holds is bounded by the largest batch,
// MaxBatchChecks checks of MaxBatchItems items.)
func (b *batchBufs) release() {
	clear(b.checks)
	clear(b.pols)
	clear(b.ceilings)
	clear(b.items)
	clear(b.spent)
	b.checks, b.pols, b.ceilings, b.items, b.spent = b.checks[:0], b.pols[:0], b.ceilings[:0], b.items[:0], b.spent[:0]
	batchBufPool.Put(b)
}

// AdmitBatch runs the pipeline for checks sent in one request. The request
// passes the instance ceiling, the per-IP bucket before authentication,
// authentication, and the tenant's work in progress (weighed by every
// check's items) once; then each check passes the per-IP layer, the quotas
// and the allotment or sandbox as one check, as Admit passes it, and the
// counter requests of all of them go to the store in one round trip
// (counter.Store.CheckBatch). Errors are Admit's; a malformed check is a
// policy.FieldError whose Field names it ("checks[3].items[0].policy").
func (g *Gate) AdmitBatch(ctx context.Context, req Request, checks []Check) (BatchVerdict, error) {
	var bv BatchVerdict
	if err := batchShape(checks); err != nil {
		return bv, err
	}
	// The request as a whole: the ceilings before authentication and the
	// key (identify), as Admit takes them, unless Identify took them.
	p := passage{req: req, now: g.cfg.Now()}
	if stop, err := g.identify(ctx, &p); stop {
		bv.Verdict = p.v
		return bv, err
	}
	bv.Tenant, bv.Key = p.v.Tenant, p.v.Key
	var err error
	if p.set, err = g.cfg.Policies.For(ctx, p.v.Tenant.ID); err != nil {
		return bv, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, p.v.Tenant.ID, err)
	}
	var weight, items int64
	for i := range checks {
		weight += checkWeight(p.set, &checks[i])
		items += int64(len(checks[i].Items))
	}
	work, stop, err := g.reserveWork(ctx, &p, weight, items)
	if stop {
		bv.Verdict = p.v
		return bv, err
	}
	defer work.release()
	bufs := batchBufPool.Get().(*batchBufs)
	defer bufs.release()
	bcs, err := g.batchItems(&p, checks, bufs, int(items))
	if err != nil {
		return bv, err
	}
	creqs, refills, err := g.batchRequests(ctx, &p, bcs, bufs)
	if err != nil {
		return bv, err
	}
	return g.batchSettle(ctx, &p, bv, bcs, creqs, refills, int(items))
}

// batchItems resolves every check against the policies before anything is
// counted: a batch is decided whole or refused whole as malformed. It
// settles the matching time reserveWork reserved. The checks, and their
// policy items (items of them in all), are taken from bufs.
func (g *Gate) batchItems(p *passage, checks []Check, bufs *batchBufs, items int) ([]batchCheck, error) {
	t, key := p.v.Tenant, p.v.Key
	bcs := slices.Grow(bufs.checks[:0], len(checks))[:len(checks)]
	bufs.checks = bcs
	pols := slices.Grow(bufs.pols[:0], items)
	var matching time.Duration
	for i := range checks {
		bc := &bcs[i]
		bc.p = passage{req: Request{Route: p.req.Route, ClientIP: p.req.ClientIP, Bearer: p.req.Bearer, Check: &checks[i]}, now: p.now, v: Verdict{Tenant: t, Key: key}}
		var took time.Duration
		var err error
		// Each check's policy items fit where they are appended: there are
		// as many as its items.
		n := len(pols)
		bc.pols, took, err = g.policyItems(pols[n:n:n+len(checks[i].Items)], t.ID, p.set, key.Test, &checks[i], p.now)
		pols = pols[:n+len(bc.pols)]
		bufs.pols = pols
		matching += took
		if err != nil {
			var fe *policy.FieldError
			if errors.As(err, &fe) {
				return nil, &policy.FieldError{Field: fmt.Sprintf("checks[%d].%s", i, fe.Field), Reason: fe.Reason}
			}
			return nil, err
		}
	}
	if p.matchEstimate > 0 {
		g.matching.settle(t.ID, g.cfg.Now(), matching, p.matchEstimate)
	}
	return bcs, nil
}

// batchRequests passes each check through the per-IP L1 and lays out its
// counter request (storeRequest), as Admit does for one check; it returns
// the requests that need the store, each check's index among them set, and
// after them the refills of the ceilings' advances the batch asks for. The
// ceilings, spent units and counter items are laid out in bufs; the items
// the store is given are then copied into one slice of the batch's own.
//
// The per-IP L1 and each ceiling's advance are asked once for all the
// checks when they can take them all (batchL1, batchPaid): n units taken
// at once are n checks each taking one, the last of which decides. When
// they cannot, each check asks alone, as Admit does. An advance that paid
// them and runs low is refilled (batchRefills).
func (g *Gate) batchRequests(ctx context.Context, p *passage, bcs []batchCheck, bufs *batchBufs) ([]counter.Request, []refill, error) {
	t, key := p.v.Tenant, p.v.Key
	effective, err := g.cfg.Tenants.Plan(ctx, tenant.EffectivePlanName(t.Plan, t.BillingStatus))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: effective plan of tenant %s: %w", ErrUnavailable, t.ID, err)
	}
	ipLimit, ipKey := ipPerMinute(t, effective), g.clients.get(p.req.ClientIP.Unmap(), g.ipDigest).route(p.req.Route)
	passed := g.batchL1(ctx, p, bcs, ipKey, ipLimit)
	// Every check passes the same ceilings: laid out once, copied for each
	// check (storeRequest writes each copy's indexes).
	var shared [4]layerItem
	ceilings := sharedCeilings(shared[:0], t, key, effective, ipKey, ipLimit, true)
	var paid [len(shared)]paidUnit
	g.batchPaid(p, ceilings, paid[:len(ceilings)], passed)
	refills := g.batchRefills(p, ceilings, paid[:len(ceilings)], passed)
	all := slices.Grow(bufs.ceilings[:0], len(ceilings)*len(bcs))
	spent := slices.Grow(bufs.spent[:0], len(ceilings)*len(bcs))
	// A ceiling asks for at most two items (its unit and its top-up), a
	// policy for one.
	items := slices.Grow(bufs.items[:0], 2*len(ceilings)*len(bcs)+len(bufs.pols))
	creqs := make([]counter.Request, 0, len(bcs))
	stored, k := 0, int64(0)
	for i := range bcs {
		bc := &bcs[i]
		if bc.done {
			continue
		}
		n := len(all)
		all = append(all, ceilings...)
		bc.ceilings = all[n:len(all):len(all)]
		for j := range paid[:len(ceilings)] {
			if paid[j].from != nil {
				// The k-th of the passed checks, taking its unit alone,
				// would have left what the last leaves and the units of
				// the checks after it.
				bc.ceilings[j].paid = paidUnit{paid[j].from, paid[j].remaining + passed - 1 - k, paid[j].resetIn}
			}
		}
		k++
		ni, ns := len(items), len(spent)
		creq, its, sp := g.storeRequest(&bc.p, bc.ceilings, bc.pols, items[ni:ni], spent[ns:ns])
		items, spent = items[:ni+len(its)], spent[:ns+len(sp)]
		if len(its) == 0 {
			bc.p.v.Allowed = true
			bc.p.v = g.answer(ctx, &bc.p, bc.p.v, false, nil)
			bc.done = true
			continue
		}
		creq.Items, bc.spent = its, slices.Clip(sp)
		bc.creq, bc.index = creq, len(creqs)
		creqs = append(creqs, creq)
		stored += len(its)
	}
	bufs.ceilings, bufs.spent, bufs.items = all, spent, items
	// The store's items, in one slice of their exact size.
	own := make([]counter.Item, 0, stored)
	for i := range bcs {
		bc := &bcs[i]
		if bc.index == noIndex {
			continue
		}
		n := len(own)
		own = append(own, bc.creq.Items...)
		bc.creq.Items = own[n:len(own):len(own)]
		creqs[bc.index].Items = bc.creq.Items
	}
	// A refill only tops an advance up early: those the store call has no
	// room for (counter.MaxBatch requests, which a full batch's checks
	// take) wait for a later batch, or the checks' own renewals.
	refills = refills[:min(len(refills), max(counter.MaxBatch-len(creqs), 0))]
	for i := range refills {
		refills[i].index = len(creqs)
		creqs = append(creqs, counter.Request{Group: t.ID, Ceilings: 1, Items: []counter.Item{refills[i].item}})
	}
	return creqs, refills, nil
}

// refill is a request of a batch's for more units of a ceiling's advance,
// on its own (advances.refillSize): its ceiling's advisory item asking for
// them, and where the request sits in the batch's store call.
type refill struct {
	ceiling layerItem
	item    counter.Item
	index   int
}

// batchRefills returns the refills of the fixed-window ceilings whose
// advances paid the batch's n checks (batchPaid) and run low. A refill's
// item is advisory: it is granted only when the counter has room for all of
// it, refuses nothing, and counts nothing when it is not granted. A
// fixed window's units that lapse unspent lapse with their window, so one
// instance stays exact however early it takes them; a sliding window's
// would weigh on the next window's estimate (the per-IP ceiling's advances
// are renewed as a single check's are).
func (g *Gate) batchRefills(p *passage, ceilings []layerItem, paid []paidUnit, n int64) []refill {
	if g.noRefills {
		return nil
	}
	var out []refill
	for j := range ceilings {
		if paid[j].from == nil || ceilings[j].Algorithm != limit.FixedWindow {
			continue
		}
		c := ceilings[j]
		c.Limit = min(c.Limit, limit.MaxLimit)
		c.advance = advanceID{p.v.Tenant.ID, c.Key}
		size := g.advances.refillSize(c.advance, p.now, advanceEnd(c.Window, p.now, p.now), n)
		if size < 2 {
			continue
		}
		it := c.Item
		it.Cost, it.Advisory = min(size, c.Limit), true
		out = append(out, refill{ceiling: c, item: it})
	}
	return out
}

// settleRefills records the refills the store granted.
func (g *Gate) settleRefills(p *passage, refills []refill, results []counter.Result, errs []error) {
	for _, r := range refills {
		if errs[r.index] != nil {
			continue
		}
		res := results[r.index]
		if d := res.Decisions[0]; d.Allowed {
			g.refills.Add(1)
			c := r.ceiling
			g.advances.refill(c.advance, p.now, advanceEnd(c.Window, p.now, res.Now), c.Limit, r.item.Cost, d.Remaining)
		}
	}
}

// batchL1 passes the batch's checks through the per-IP L1: at once when it
// admits them all, else one by one, a check it refuses done with its
// refusal. It returns how many passed. Every check's index is noIndex after
// it.
func (g *Gate) batchL1(ctx context.Context, p *passage, bcs []batchCheck, ipKey string, ipLimit int64) int64 {
	for i := range bcs {
		bcs[i].index = noIndex
	}
	if !g.takeAlone && g.l1Check(ctx, p.now, p.v.Tenant.ID, ipKey, limit.SlidingWindow, ipLimit, limit.Every(time.Minute), int64(len(bcs))).Allowed {
		return int64(len(bcs))
	}
	// Refused, the call counted nothing.
	passed := int64(0)
	for i := range bcs {
		bc := &bcs[i]
		if g.ipL1(ctx, &bc.p, ipKey, ipLimit) {
			bc.done = true
			continue
		}
		passed++
	}
	return passed
}

// batchPaid takes from each ceiling's advance a unit for each of the n
// checks that passed the per-IP L1, when it holds n: paid[j] is ceiling
// j's, its from nil when the checks are to take their units one by one.
func (g *Gate) batchPaid(p *passage, ceilings []layerItem, paid []paidUnit, n int64) {
	if n < 2 || g.takeAlone {
		return
	}
	for j := range ceilings {
		if ok, remaining, resetIn, from := g.advances.takeN(advanceID{p.v.Tenant.ID, ceilings[j].Key}, p.now, n); ok {
			paid[j] = paidUnit{from, remaining, resetIn}
		}
	}
}

// batchSettle makes the batch's one round trip and answers each check from
// it, as Admit does after its own: degraded, or settled. The checks' item
// verdicts (items of them at most) share one slice.
func (g *Gate) batchSettle(ctx context.Context, p *passage, bv BatchVerdict, bcs []batchCheck, creqs []counter.Request, refills []refill, items int) (BatchVerdict, error) {
	var results []counter.Result
	var errs []error
	if len(creqs) > 0 {
		var err error
		results, errs, err = g.storeBatch(ctx, p.v.Tenant.ID, creqs)
		if err != nil && errors.Is(err, counter.ErrInvalid) {
			return bv, fmt.Errorf("counter requests of tenant %s: %w", p.v.Tenant.ID, err)
		}
		g.settleRefills(p, refills, results, errs)
	}
	bv.Checks = make([]Verdict, len(bcs))
	ivs := make([]ItemVerdict, 0, items)
	// The names the checks' observers are told share one slice too.
	names := make([]string, 0, items)
	at := g.cfg.Now()
	for i := range bcs {
		bc := &bcs[i]
		if !bc.done {
			bc.p.at = at
			k := len(names)
			names = appendPolicyNames(names, bc.pols)
			bc.p.policies = names[k:len(names):len(names)]
			n := len(ivs)
			out := ivs[n : n : n+len(bc.pols)]
			if err := errs[bc.index]; err != nil {
				bc.p.v = g.degraded(ctx, &bc.p, bc.ceilings, bc.pols, err, out)
			} else {
				bc.p.v = g.settle(ctx, &bc.p, bc.ceilings, bc.pols, bc.spent, bc.creq, results[bc.index], out)
			}
			ivs = ivs[:n+len(bc.p.v.Items)]
		}
		bv.Checks[i] = bc.p.v
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
		res, errs := g.cfg.Store.CheckBatch(ctx, reqs)
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
