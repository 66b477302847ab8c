package gate

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/limit"
)

// degraded answers without the shared store: the ceilings have passed L1 and
// allow; each policy follows its fail mode, its item verdict appended to
// items[:0] (nil: a slice of its own).
func (g *Gate) degraded(ctx context.Context, req Request, v Verdict, ceilings []layerItem, pols []policyItem, cause error, items []ItemVerdict) Verdict {
	g.logDegraded(ctx, v.Tenant.ID, cause)
	now := g.cfg.Now()
	v.Degraded = true
	v.Allowed = true
	v.Items = items[:0]
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
		g.met.degraded[admission.LayerPolicy].Inc()
		v.Items = append(v.Items, ItemVerdict{Policy: p.name, Decision: d, Window: windowLength(p.Window, now), Shadow: p.shadow, Degraded: true})
	}
	return g.answer(ctx, req, v, true, nil)
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
