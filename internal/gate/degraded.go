package gate

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/limit"
)

// degraded answers p without the shared store: the ceilings have passed L1
// and allow; each policy follows its fail mode, its item verdict appended to
// items[:0] (nil: a slice of its own).
func (g *Gate) degraded(ctx context.Context, p *passage, ceilings []layerItem, pols []policyItem, cause error, items []ItemVerdict) Verdict {
	v := p.v
	g.logDegraded(ctx, v.Tenant.ID, cause)
	now := g.cfg.Now()
	v.Degraded = true
	v.Allowed = true
	v.Items = items[:0]
	for _, c := range ceilings {
		g.met.degraded[c.layer].Inc()
	}
	for _, pol := range pols {
		d := limit.Decision{Allowed: pol.failOpen, Limit: pol.Limit, ResetAt: now.Add(time.Second)}
		if !pol.failOpen {
			// Closed: refuse, and suggest a retry once the store may be back.
			d.RetryAfter = time.Second
			if !pol.shadow {
				v.Allowed = false
			}
		}
		g.met.degraded[admission.LayerPolicy].Inc()
		v.Items = append(v.Items, ItemVerdict{Policy: pol.name, Decision: d, Window: windowLength(pol.Window, now), Shadow: pol.shadow, Degraded: true})
	}
	return g.answer(ctx, p, v, true, nil)
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
