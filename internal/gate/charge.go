package gate

import (
	"context"
	"fmt"
	"slices"

	"github.com/tollgate/tollgate/internal/counter"
)

// charge answers a check of mode Charge that pass admitted, its policy
// items resolved: the ceilings that go to the store are decided first, in
// a check of their own (a charge is never refused by its policies, so it
// cannot share their all-or-nothing request), then the items are charged
// (counter.Charger) through the tenant's breaker. The answer is allowed,
// each item's decision the counter as the charge left it: Allowed when it
// is within its limit, Remaining 0 when it is overdrawn. A store that does
// not answer is an error wrapping ErrStoreUnavailable (the charge may be
// sent again: the fail modes decide admissions, and there is nothing to
// admit).
func (g *Gate) charge(ctx context.Context, p *passage, ceilings []layerItem, pols []policyItem) (Verdict, error) {
	tid := p.v.Tenant.ID
	var itemBuf [8]counter.Item
	var spentBuf [4]*units
	creq, items, spent := g.storeRequest(p, ceilings, nil, itemBuf[:0], spentBuf[:0])
	if len(items) > 0 {
		creq.Mode, creq.Items = Consume, slices.Clone(items)
		res, err := throughBreaker(ctx, g, opCheck, tid, func() (counter.Result, error) { return g.cfg.Store.Check(ctx, creq) })
		if err != nil {
			for _, u := range spent {
				g.advances.giveBack(u)
			}
			return p.v, fmt.Errorf("charge of tenant %s: ceilings: %w", tid, err)
		}
		if g.ceilingRefused(ctx, p, ceilings, spent, res) {
			return p.v, nil
		}
		g.renewAdvances(p, ceilings, creq, res)
	}
	req := counter.Request{Group: tid, Mode: Consume, Items: make([]counter.Item, len(pols))}
	for i, pol := range pols {
		req.Items[i] = pol.Item
	}
	res, err := throughBreaker(ctx, g, opCharge, tid, func() (counter.Charged, error) { return g.cfg.Store.Charge(ctx, req) })
	if err != nil {
		return p.v, fmt.Errorf("charge of tenant %s: %w", tid, err)
	}
	v := p.v
	v.Allowed = true
	v.Items = make([]ItemVerdict, len(pols))
	for i, pol := range pols {
		it := res.Items[i]
		d := it.Decision()
		v.Items[i] = ItemVerdict{Policy: pol.name, Decision: d, Window: windowLength(pol.Window, res.Now), Shadow: pol.shadow}
		if !pol.shadow {
			v.Tightest = tighter(v.Tightest, Quota{Name: pol.name, Limit: pol.Limit, Remaining: d.Remaining, Window: windowLength(pol.Window, res.Now), ResetIn: d.ResetAt.Sub(res.Now)})
		}
	}
	return g.answer(ctx, p, v, false, nil), nil
}
