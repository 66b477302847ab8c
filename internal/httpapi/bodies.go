package httpapi

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/atomicmap"
	"github.com/tollgate/tollgate/internal/metrics"
)

// Bounds of the request bodies in flight, defaults of Config.BodyBytesPerIP
// and Config.BodyBytesTotal.
const (
	// DefaultBodyBytesPerIP is one client's share: three webhook-sized
	// bodies of unknown length at once (four of a declared 500 KB), or
	// thousands of ordinary checks, whose Content-Length is what they
	// reserve.
	DefaultBodyBytesPerIP = 2 << 20
	// DefaultBodyBytesTotal is the instance's total: 64 webhook-sized
	// bodies at once. The memory they take may reach about twice that
	// before the garbage collector returns it.
	DefaultBodyBytesTotal = 32 << 20
)

// maxOtherBody is the most any route but the webhook reads of a body: a
// check or a dashboard form is at most 64 KiB, and the readers read one
// byte more to tell an oversized body.
const maxOtherBody = 64<<10 + 1

// bodyBound is the most the handlers of path read of a body.
func bodyBound(path string) int64 {
	if path == "/webhooks/stripe" {
		return MaxWebhookBody + 1
	}
	return maxOtherBody
}

// bodyBudget bounds the request body bytes in flight, per client IP and in
// total. A request with a body reserves, before anything reads it, the most
// its handler can read: its Content-Length, or its route's bound when the
// length is unknown or larger. A request that would pass either bound is
// refused at once, without reading its body, and its connection closed; its
// reservation is returned when its handler is done. So however many slow
// clients trickle bodies, the bodies held in memory stay under the total,
// and one client (one address, or one IPv6 network where the IP extractor
// keys by network) cannot take more than its share.
//
// Every request with a body passes through it, so it takes no lock: the
// total is one atomic counter, and each client has a counter of its own in
// an atomicmap.Map. A client's counter stays while it is in use (making
// it again for each request of a busy client would cost allocations);
// counters at zero are swept at most once every sweepEvery (a second), once
// sweepAfter of them have dropped to zero since the last sweep, so the map
// holds about the clients of the last sweepEvery. It is safe for
// concurrent use.
type bodyBudget struct {
	perIP, total int64
	metrics      *metrics.Metrics
	sweepEvery   time.Duration
	sweepAfter   int64

	used      atomic.Int64
	byIP      atomicmap.Map[string] // client IP -> bytes reserved
	idle      atomic.Int64          // counters dropped to zero since the last sweep
	lastSweep atomic.Int64          // Unix nanoseconds
}

// defaultSweepAfter is bodyBudget.sweepAfter: how many counters must have
// dropped to zero before a sweep.
const defaultSweepAfter = 1024

func newBodyBudget(perIP, total int64, m *metrics.Metrics) *bodyBudget {
	if perIP <= 0 {
		perIP = DefaultBodyBytesPerIP
	}
	if total <= 0 {
		total = DefaultBodyBytesTotal
	}
	if m == nil {
		m = metrics.New()
	}
	return &bodyBudget{perIP: perIP, total: total, metrics: m, sweepEvery: time.Second, sweepAfter: defaultSweepAfter}
}

// take reserves n bytes for ip; it returns the client's counter and "" when
// it did, else the scope that has no room ("ip" or "instance").
func (b *bodyBudget) take(ip string, n int64) (*atomicmap.Cell, string) {
	// The client's share first: a client past it touches nothing the
	// others see. Each reservation is a compare-and-swap, not an add and an
	// undo, so that one that does not fit never shows, however briefly.
	c := b.takeIP(ip, n)
	if c == nil {
		return nil, "ip"
	}
	for {
		used := b.used.Load()
		if used+n > b.total {
			b.returnIP(c, n)
			return nil, "instance"
		}
		if b.used.CompareAndSwap(used, used+n) {
			b.metrics.BodyBytes.Add(float64(n))
			return c, ""
		}
	}
}

// takeIP reserves n bytes in ip's counter and returns it, or nil when the
// client's share has no room.
func (b *bodyBudget) takeIP(ip string, n int64) *atomicmap.Cell {
	c, ok := b.byIP.Update(ip, func(held int64) (int64, bool) { return held + n, held+n <= b.perIP })
	if !ok {
		return nil
	}
	return c
}

// give returns n bytes taken in c.
func (b *bodyBudget) give(c *atomicmap.Cell, n int64) {
	b.used.Add(-n)
	b.metrics.BodyBytes.Sub(float64(n))
	b.returnIP(c, n)
}

// returnIP returns n bytes to a client's counter c.
func (b *bodyBudget) returnIP(c *atomicmap.Cell, n int64) {
	// Never retired here: only counters at zero are, and c holds n.
	if left, _ := c.Add(-n); left == 0 && b.idle.Add(1) >= b.sweepAfter {
		b.sweep(false)
	}
}

// sweep removes the counters at zero, unless another sweep ran less than
// b.sweepEvery ago (force: whenever, and before it returns). A sweep walks
// the clients of the last second, tens of thousands under a flood of
// addresses: it runs beside the request that called for it, not in it.
func (b *bodyBudget) sweep(force bool) {
	now := time.Now().UnixNano()
	last := b.lastSweep.Load()
	if !force && now-last < int64(b.sweepEvery) || !b.lastSweep.CompareAndSwap(last, now) {
		return
	}
	b.idle.Store(0)
	if force {
		b.byIP.Sweep()
		return
	}
	go b.byIP.Sweep()
}

// around serves c with next within the budget: every request that may have
// a body (edge calls it for every request).
func (b *bodyBudget) around(c echo.Context, next echo.HandlerFunc) error {
	r := c.Request()
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return next(c)
	}
	n := bodyBound(r.URL.Path)
	if r.ContentLength > 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	ip := c.RealIP()
	held, scope := b.take(ip, n)
	if scope != "" {
		b.metrics.BodiesRefused.WithLabelValues(scope).Inc()
		return b.refuse(c, scope)
	}
	defer b.give(held, n)
	return next(c)
}

// refuse answers a request whose body has no room, without reading the
// body: the connection closes after the answer instead of draining it.
func (b *bodyBudget) refuse(c echo.Context, scope string) error {
	closeUnread(c)
	c.Response().Header().Set("Retry-After", "1")
	p := problem{Problem: Problem{Type: problemBase + "too-many-requests", Title: "Too many requests", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("Too many request bodies in flight from this address: at most %s at once; retry in 1 s.", byteSize(b.perIP))}}
	c.Response().Header().Set("X-RateLimit-Layer", scope)
	if scope == "instance" {
		p.Type, p.Title, p.Status = problemBase+"busy", "Busy", http.StatusServiceUnavailable
		p.Detail = "This Tollgate instance is reading as many request bodies as it holds at once; retry in 1 s."
	}
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
