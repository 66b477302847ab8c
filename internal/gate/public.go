package gate

import (
	"context"
	"net/netip"
	"time"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/limit"
)

// Public admits a request to a page that takes no API key (the landing
// page, the dashboard's sign-in and pages, billing links, the API
// reference): the client IP's own bucket for route, perMinute requests per
// sliding minute in this instance's memory, then the instance ceiling. A
// refusal is a Verdict with Refusal set (LayerIP or LayerInstance); nothing
// else of the pipeline runs, since there is no tenant.
//
// The per-IP bucket comes first, unlike in Admit: a flood from one address
// is stopped by its own bucket before it spends the instance ceiling that
// every tenant shares. Unresolvable clients (the zero ip) share one bucket,
// as in Admit. It is safe for concurrent use.
func (g *Gate) Public(ctx context.Context, route string, ip netip.Addr, perMinute int64) Verdict {
	p := passage{req: Request{Route: route, ClientIP: ip}}
	key := "public:" + route + ":" + g.ipDigest(ip)
	if d := g.l1Check(ctx, g.cfg.Now(), "", key, limit.SlidingWindow, perMinute, limit.Every(time.Minute), 1); !d.Allowed {
		g.refuse(ctx, &p, admission.Refusal{Layer: admission.LayerIP, Limit: perMinute, Window: time.Minute, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt, Key: key})
		return p.v
	}
	if n := g.cfg.InstanceCeiling; n > 0 {
		if d := g.l1Check(ctx, g.cfg.Now(), "", "instance", limit.TokenBucket, n, limit.Every(time.Second), 1); !d.Allowed {
			g.refuse(ctx, &p, admission.Refusal{Layer: admission.LayerInstance, Limit: n, Window: time.Second, RetryAfter: d.RetryAfter, ResetAt: d.ResetAt})
			return p.v
		}
	}
	p.v.Allowed = true
	return p.v
}
