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
// units, from their counters in the round trips of checks that need the
// store anyway and spends them locally, so that the store sees about one
// write per check; the fleet never admits more than a ceiling's limit, and
// under-admits only by what other instances hold when a counter runs out.
// (Leases are something else: the places of concurrency policies that
// tenants take with /v1/leases, concurrency.go.)
//
// Each kind of request has one door, and the HTTP layer calls each by its
// name (httpapi.Gate): Identify (the headers, before a body is read),
// Admit (a check, or any other /v1 request that takes no new place),
// AdmitBatch (POST /v1/check/batch), Acquire (POST /v1/leases, with its
// Lease), Reserve (POST /v1/reservations, with its Reservation), Release,
// Renew, Settle and Reset. No door hands a request to another.
//
// The path of one request (pipeline.go), a step a function, each reading
// and writing the request's passage (its Verdict so far, its client keys,
// its tenant's policies, its lease) and stopping it with a refusal or an
// error:
//
//	Admit (a check, or any other /v1 route)
//	  pass              the steps Acquire takes too:
//	    identify          unless Identify took them:
//	      enter             the instance ceiling, in memory
//	      preAuthenticate   the client's pre-authentication bucket and its
//	                        keys that failed, in memory
//	      authenticate      the key and its tenant
//	    reserveWork       the tenant's work in progress and matching time
//	                      (a check weighs its items)
//	    ceilings          the per-IP L1, then the shared ceilings to ask for
//	  policyItems       the check's policy items (validate.go)
//	  storeRequest      the ceilings' advances and the one counter.Request,
//	                    each item at its named index
//	  Store.Check       the round trip, through the tenant's breaker
//	                    (degraded.go when it fails)
//	  settle            a ceiling's refusal, or renewAdvances then
//	                    policyVerdict; answer
//
//	Acquire (POST /v1/leases)
//	  pass              as above
//	  acquire           the ceilings' advances (ceilingItems, as
//	                    storeRequest's), then the ceilings whose advance ran
//	                    out and the lease in one counter.Store.Acquire
//	                    (concurrency.go); ceilingRefused, renewAdvances
//
//	Reserve (POST /v1/reservations)
//	  pass              as above
//	  reserve           as acquire, with the amount on the policy's counter
//	                    in one counter.Store.Reserve (reserve.go)
//
//	AdmitBatch (POST /v1/check/batch, batch.go)
//	  identify          for the request as a whole
//	  reserveWork       the work of every check at once
//	  batchItems        each check's policy items
//	  batchRequests     per check: ipL1, sharedCeilings, storeRequest
//	  batchSettle       one counter.Store.CheckBatch; each check degraded
//	                    or settled as Admit's
//
// The steps live in pipeline.go, each small enough to read on its own
// (ceilings is ipL1 then sharedCeilings). Everything a step needs that is not in the
// passage is on the Gate; the buffers of the common check (ceilings,
// policy items, counter items) live on Admit's stack, so that a check
// allocates no more for being split into steps (TestCheckAllocations in
// internal/httpapi).
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
// Where things are: gate.go configures a Gate; pipeline.go runs Admit and
// Acquire's first steps;
// validate.go checks a check's items and makes their counter keys (the
// digests of subjects and client addresses); degraded.go answers without the
// shared store; advance.go advances the ceilings' units to this instance;
// concurrency.go holds the leases of concurrency policies; reserve.go the
// reservations of budgets and their settlements; inflight.go
// bounds each tenant's work in progress and wildcard matching; breaker.go
// is the circuit breaker; clientkeys.go caches a client's keys; public.go
// is the ceiling of the pages without an API key; reset.go resets a
// subject's counters; limiter.go is the Limiter of Tollgate's own limits
// outside the pipeline (the dashboard's sign-ins, the billing links);
// internal/admission holds what observers (usage, audit, traffic) are
// told; instruments.go the metrics.
//
// gate imports no driver and no net/http; the counter stores, shared and
// local, come from its caller as counter.Store.
package gate
