package gate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/policy"
)

// Try answers, without counting, what a check of one of a tenant's
// policies for subject at cost would get now: the policy's item as a
// /v1/check in mode peek answers it, with the RateLimit fields of that
// answer (Verdict.RateLimit), live counters or the sandbox's (test). It is
// for the tenant's own console, which holds no API key: it takes neither
// the key's nor the client's ceilings, and counts in no usage. The item is
// read as a check's is (overrides, cost, subject); its faults are
// *policy.FieldErrors named for the field ("subject", "cost", "policy"),
// not the check's items[0] path. Other errors wrap ErrUnavailable (the
// policies could not be read), ErrBusy or ErrStoreUnavailable.
func (g *Gate) Try(ctx context.Context, tenantID string, test bool, name, subject string, cost int64) (Verdict, error) {
	set, err := g.cfg.Policies.For(ctx, tenantID)
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, tenantID, err)
	}
	now := g.cfg.Now()
	c := Check{Mode: Peek, Items: []Item{{Policy: name, Subject: subject, Cost: cost}}}
	pols, _, err := g.policyItems(nil, tenantID, set, test, &c, now)
	var fe *policy.FieldError
	if errors.As(err, &fe) {
		return Verdict{}, &policy.FieldError{Field: strings.TrimPrefix(fe.Field, "items[0]."), Reason: fe.Reason}
	}
	if err != nil {
		return Verdict{}, err
	}
	work, err := g.hold(ctx, tenantID)
	if err != nil {
		return Verdict{}, err
	}
	defer work.release()
	pol := pols[0]
	var res counter.Result
	err = g.storeCall(ctx, opCheck, func() (err error) {
		res, err = g.cfg.Store.Check(ctx, counter.Request{Mode: counter.Peek, Group: tenantID, Items: []counter.Item{pol.Item}})
		return err
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("try policy %s of tenant %s: %w", name, tenantID, err)
	}
	d := res.Decisions[0]
	w := windowLength(pol.Window, res.Now)
	v := Verdict{Allowed: d.Allowed || pol.shadow,
		Items: []ItemVerdict{{Policy: pol.name, Decision: d, Window: w, Shadow: pol.shadow}}}
	if !pol.shadow {
		v.Tightest = Quota{Name: pol.name, Limit: pol.Limit, Remaining: d.Remaining, Window: w, ResetIn: d.ResetAt.Sub(res.Now)}
	}
	return v, nil
}
