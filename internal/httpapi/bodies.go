package httpapi

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/kit/atomicmap"
	"github.com/tollgate/tollgate/internal/metrics"
)

// Bounds of the request bodies in flight, defaults of the Config fields
// of the same names. Bodies are divided between parties: the tenant API's
// (/v1) are read only once the request's key is known, within its
// tenant's share; every other body (the Stripe webhook, the dashboard's
// forms) has not shown a key, and gets its address's share of a pool of
// its own, so that no client without a key can take what tenants need.
const (
	// DefaultBodyBytesPerIP is one keyless client's share: three
	// webhook-sized bodies of unknown length at once (four of a declared
	// 500 KB), or hundreds of dashboard forms.
	DefaultBodyBytesPerIP = 2 << 20
	// DefaultBodyBytesKeyless is what the keyless clients hold in all:
	// sixteen webhook-sized bodies at once.
	DefaultBodyBytesKeyless = 8 << 20
	// DefaultBodyBytesPerTenant is one tenant's share: four batches of
	// unknown length at once (maxBatchBody), or thousands of ordinary
	// checks, whose Content-Length is what they reserve.
	DefaultBodyBytesPerTenant = 4 << 20
	// DefaultBodyBytesTotal is what the tenants hold in all, beyond each
	// one's floor: eight tenants' shares. With the keyless pool, the
	// memory bodies take may reach about twice the sum before the garbage
	// collector returns it.
	DefaultBodyBytesTotal = 32 << 20
	// bodyFloor is what a tenant may always hold, whatever the others
	// hold: a /v1/check body of the largest size, or hundreds of ordinary
	// ones. Tenants that fill the total between them cannot refuse
	// another's checks; they can refuse only its larger bodies (batches of
	// unknown length) while they hold the total.
	bodyFloor = maxCheckBody + 1
)

// maxOtherBody is the most any route but the webhook, a check, a batch and
// a lease reads of a body: a dashboard form or a policy is at most 64 KiB,
// and the readers read one byte more to tell an oversized body.
const maxOtherBody = 64<<10 + 1

// bodyBound is the most the handlers of a keyless path read of a body.
func bodyBound(path string) int64 {
	if path == "/webhooks/stripe" {
		return MaxWebhookBody + 1
	}
	return maxOtherBody
}

// bodyBudget bounds the request body bytes in flight: the keyless pool,
// shared by address, and the tenants' pool, shared by tenant. A request
// with a body reserves, before anything reads it, the most its handler can
// read: its Content-Length, or its route's bound when the length is unknown
// or larger. One that would pass its party's share or its pool's total is
// refused at once, without reading its body, and its connection closed;
// its reservation is returned when its handler is done. So however many
// slow clients trickle bodies, the bodies held in memory stay under the
// totals, and one party (a tenant; an address, or one IPv6 network where
// the IP extractor keys by network, for the keyless) cannot take more
// than its share.
type bodyBudget struct {
	keyless, tenants *bodyPool
	metrics          *metrics.Metrics
}

func newBodyBudget(cfg Config, m *metrics.Metrics) *bodyBudget {
	if m == nil {
		m = metrics.New()
	}
	return &bodyBudget{
		keyless: newBodyPool("ip", "keyless", cmp.Or(cfg.BodyBytesPerIP, DefaultBodyBytesPerIP), cmp.Or(cfg.BodyBytesKeyless, DefaultBodyBytesKeyless), 0, m),
		tenants: newBodyPool("tenant", "instance", cmp.Or(cfg.BodyBytesPerTenant, DefaultBodyBytesPerTenant), cmp.Or(cfg.BodyBytesTotal, DefaultBodyBytesTotal), bodyFloor, m),
		metrics: m,
	}
}

// bodyPool is one pool of body bytes divided between parties: each party
// may hold up to per, and all of them up to total beyond what each holds
// within its floor.
//
// Every request with a body passes through one, so it takes no lock: the
// total is one atomic counter, and each party has a counter of its own in
// an atomicmap.Map. A party's counter stays while it is in use (making it
// again for each request of a busy party would cost allocations); counters
// at zero are swept at most once every sweepEvery (a second), once
// sweepAfter of them have dropped to zero since the last sweep, so the map
// holds about the parties of the last sweepEvery. It is safe for
// concurrent use.
type bodyPool struct {
	// party names the pool's parties and all the whole pool, in refusals
	// and metrics: "ip" and "keyless", "tenant" and "instance".
	party, all        string
	per, total, floor int64
	metrics           *metrics.Metrics
	sweepEvery        time.Duration
	sweepAfter        int64

	used      atomic.Int64
	byParty   atomicmap.Map[string] // party -> bytes reserved
	idle      atomic.Int64          // counters dropped to zero since the last sweep
	lastSweep atomic.Int64          // Unix nanoseconds
}

// defaultSweepAfter is bodyPool.sweepAfter: how many counters must have
// dropped to zero before a sweep.
const defaultSweepAfter = 1024

func newBodyPool(party, all string, per, total, floor int64, m *metrics.Metrics) *bodyPool {
	return &bodyPool{party: party, all: all, per: per, total: total, floor: min(floor, per), metrics: m, sweepEvery: time.Second, sweepAfter: defaultSweepAfter}
}

// bodyHold is one request's reservation: n bytes in a party's counter,
// and in the pool's total unless they were within the party's floor.
type bodyHold struct {
	pool   *bodyPool
	cell   *atomicmap.Cell
	n      int64
	pooled bool
}

// take reserves n bytes for party; it returns the reservation and "" when
// it did, else the scope that has no room: b.party, or b.all.
func (b *bodyPool) take(party string, n int64) (bodyHold, string) {
	// The party's share first: a party past it touches nothing the
	// others see. Each reservation is a compare-and-swap, not an add and an
	// undo, so that one that does not fit never shows, however briefly.
	var after int64
	c, ok := b.byParty.Update(party, func(held int64) (int64, bool) { after = held + n; return after, after <= b.per })
	if !ok {
		return bodyHold{}, b.party
	}
	h := bodyHold{pool: b, cell: c, n: n}
	if after > b.floor {
		h.pooled = true
		for {
			used := b.used.Load()
			if used+n > b.total {
				b.returnParty(c, n)
				return bodyHold{}, b.all
			}
			if b.used.CompareAndSwap(used, used+n) {
				break
			}
		}
	}
	b.metrics.BodyBytes.Add(float64(n))
	return h, ""
}

// give returns h's bytes; the zero bodyHold is nothing to return.
func (h bodyHold) give() {
	b := h.pool
	if b == nil {
		return
	}
	if h.pooled {
		b.used.Add(-h.n)
	}
	b.metrics.BodyBytes.Sub(float64(h.n))
	b.returnParty(h.cell, h.n)
}

// returnParty returns n bytes to a party's counter c.
func (b *bodyPool) returnParty(c *atomicmap.Cell, n int64) {
	// Never retired here: only counters at zero are, and c holds n.
	if left, _ := c.Add(-n); left == 0 && b.idle.Add(1) >= b.sweepAfter {
		b.sweep(false)
	}
}

// sweep removes the counters at zero, unless another sweep ran less than
// b.sweepEvery ago (force: whenever, and before it returns). A sweep walks
// the parties of the last second, tens of thousands under a flood of
// addresses: it runs beside the request that called for it, not in it.
func (b *bodyPool) sweep(force bool) {
	now := time.Now().UnixNano()
	last := b.lastSweep.Load()
	if !force && now-last < int64(b.sweepEvery) || !b.lastSweep.CompareAndSwap(last, now) {
		return
	}
	b.idle.Store(0)
	if force {
		b.byParty.Sweep()
		return
	}
	go b.byParty.Sweep()
}

// hasBody reports whether r may have a body to read.
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// reserve reserves in pool, for party, what r's handler may read of its
// body: its Content-Length, or bound when that is unknown or larger.
func reserve(pool *bodyPool, r *http.Request, party string, bound int64) (bodyHold, string) {
	n := bound
	if r.ContentLength > 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	return pool.take(party, n)
}

// around serves c with next within the keyless pool, by the client's
// address: every request with a body outside /v1 (edge calls it for every
// request). The tenant API reserves its bodies itself, once the key is
// known (api.open), in its tenant's share: a body sent to /v1 without a
// key that authenticates is never read.
func (b *bodyBudget) around(c echo.Context, next echo.HandlerFunc) error {
	r := c.Request()
	if !hasBody(r) || strings.HasPrefix(r.URL.Path, "/v1/") {
		return next(c)
	}
	held, scope := reserve(b.keyless, r, c.RealIP(), bodyBound(r.URL.Path))
	if scope != "" {
		return b.refuse(c, b.keyless, scope)
	}
	defer held.give()
	return next(c)
}

// forTenant reserves, in tenantID's share, what c's handler may read of
// its body, bound at most; it answers c itself when there is no room
// (refused reports it). The caller gives the reservation back when its
// handler is done.
func (b *bodyBudget) forTenant(c echo.Context, tenantID string, bound int64) (held bodyHold, refused bool) {
	r := c.Request()
	if !hasBody(r) {
		return bodyHold{}, false
	}
	held, scope := reserve(b.tenants, r, tenantID, bound)
	if scope != "" {
		_ = b.refuse(c, b.tenants, scope)
		return bodyHold{}, true
	}
	return held, false
}

// refuse answers a request whose body has no room in pool, without
// reading the body: the connection closes after the answer instead of
// draining it.
func (b *bodyBudget) refuse(c echo.Context, pool *bodyPool, scope string) error {
	b.metrics.BodiesRefused.WithLabelValues(scope).Inc()
	closeUnread(c)
	c.Response().Header().Set("Retry-After", "1")
	p := problem{Problem: Problem{Type: problemBase + "too-many-requests", Title: "Too many requests", Status: http.StatusTooManyRequests}}
	switch scope {
	case "ip":
		p.Detail = fmt.Sprintf("Too many request bodies in flight from this address: at most %s at once; retry in 1 s.", byteSize(pool.per))
	case "tenant":
		// The tenant's work in progress, as the gate's own bound on it.
		scope = admission.LayerInflight
		p.Detail = fmt.Sprintf("Too many request bodies in flight for this tenant on this instance: at most %s at once; retry in 1 s.", byteSize(pool.per))
	default:
		// The pool is full: the instance's, for whoever asked.
		scope = admission.LayerInstance
		p.Type, p.Title, p.Status = problemBase+"busy", "Busy", http.StatusServiceUnavailable
		p.Detail = "This Tollgate instance is reading as many request bodies as it holds at once; retry in 1 s."
	}
	c.Response().Header().Set("X-RateLimit-Layer", scope)
	sendProblem(c, p)
	return nil
}

// byteSize says n bytes in KiB or MiB when it is a whole number of them.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
