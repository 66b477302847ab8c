// Package gate is Tollgate's admission pipeline. For every tenant request it
// runs, in order, the instance ceiling, the per-IP layer (a pre-authentication
// bucket, then L1 in memory and L2 in the shared counter store), the tenant
// quota (minute and hour), the monthly allotment or the sandbox allotment,
// and finally the tenant's own policies, and returns a Verdict naming the
// layer that refused, if one did.
//
// Everything that lives in the shared counter store (L2 per-IP, quotas,
// allotments and policies) goes in ONE counter.Request: a check costs one
// round trip whatever the number of layers and items. The ceilings are that
// request's first items (counter.Request.Ceilings), so they count every call
// that passes them even when a policy then refuses.
//
// What is exact and what is taken in advance: a tenant's policies are
// decided in the counter store on every check, exactly, in one round trip.
// The service's own shared ceilings (per-IP L2, quotas, allotment, sandbox)
// are taken in advance (advance.go): an instance takes advances, blocks of
// units, from their counters in the
// round trips of checks that need the store anyway and spends them
// locally, so that the store sees about one write per check; the fleet
// never admits more than a ceiling's limit, and under-admits only by what
// other instances hold when a counter runs out.
//
// One tenant cannot hurt another through the pipeline: each tenant has its
// own circuit breaker (breaker.go), its own bound on work in progress and
// on time spent matching wildcard overrides (inflight.go).
//
// When the store cannot answer within its deadline the pipeline degrades
// instead of failing: the ceilings keep their L1 verdicts, each policy
// follows its fail_mode, and the Verdict says Degraded. A circuit breaker
// keeps calls away from a store that keeps failing.
//
// Where things are: gate.go configures a Gate; pipeline.go runs Admit;
// validate.go checks a check's items and makes their counter keys (the
// digests of subjects and client addresses); degraded.go answers without the
// shared store; advance.go advances the ceilings' units to this instance;
// concurrency.go holds the leases of concurrency policies; inflight.go
// bounds each tenant's work in progress and wildcard matching; breaker.go
// is the circuit breaker; clientkeys.go caches a client's keys; public.go
// is the ceiling of the pages without an API key; reset.go resets a
// subject's counters; internal/admission holds what observers (usage,
// audit, traffic) are told; instruments.go the metrics.
//
// gate imports no driver and no net/http; the counter stores, shared and
// local, come from its caller as counter.Store.
package gate
