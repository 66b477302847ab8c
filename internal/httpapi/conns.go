package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/metrics"
)

// Bounds of an instance's connections, defaults of ConnConfig's fields.
const (
	// DefaultConnsPerIP is what one address may hold of connections that
	// have not shown an API key: far above what a browser opens, and what
	// a tenant's server opens before its first requests authenticate them.
	DefaultConnsPerIP = 256
	// DefaultConnsKeyless is what every such connection together may hold.
	DefaultConnsKeyless = 4096
	// DefaultConnsPerTenant is what one tenant's connections may hold, once
	// a request on each showed its key.
	DefaultConnsPerTenant = 4096
)

// ConnConfig bounds an instance's connections; zero fields take the
// Default of the same name.
type ConnConfig struct {
	PerIP, Keyless, PerTenant int
	// ClientIP says which peers are trusted proxies: their connections
	// carry many clients, and are not counted.
	ClientIP ClientIPConfig
	Metrics  *metrics.Metrics
}

// ConnShare divides an instance's connections between parties, as the
// body budget divides bodies: a connection counts against its peer's
// address (an IPv6 peer's network, as the per-IP layers key it) until a
// request on it shows an API key that authenticates, and from then on
// against that key's tenant. An address past its share, or the keyless
// connections past their total, have a new connection answered 429 or
// 503 and closed at once; but when the total is full, a new connection
// from an address that holds fewer than the largest holder takes the place
// of one of that holder's connections that is not serving a request (one
// that has sent nothing yet, or is idle between requests). So however
// many connections clients without a key open, from however many
// addresses, a tenant's connections, and the new ones of an address that
// holds few, are served. A tenant past its share is served, and its
// connection closed after the answer.
//
// Use it as the server's listener (Listener) and ConnState and
// ConnContext hooks; the API marks a connection keyed (keyed) once its
// request authenticates. It is safe for concurrent use.
type ConnShare struct {
	perIP, keyless, perTenant int
	trusted                   func(netip.Addr) bool
	prefix                    int
	metrics                   *metrics.Metrics

	mu       sync.Mutex
	byAddr   map[netip.Addr]map[*sharedConn]struct{}
	byTenant map[string]int
	inPool   int // keyless connections, trusted proxies' apart
}

// NewConnShare returns a ConnShare for cfg.
func NewConnShare(cfg ConnConfig) *ConnShare {
	s := &ConnShare{
		perIP:     cmp.Or(cfg.PerIP, DefaultConnsPerIP),
		keyless:   cmp.Or(cfg.Keyless, DefaultConnsKeyless),
		perTenant: cmp.Or(cfg.PerTenant, DefaultConnsPerTenant),
		prefix:    cmp.Or(cfg.ClientIP.IPv6Prefix, DefaultIPv6Prefix),
		metrics:   cfg.Metrics,
		byAddr:    map[netip.Addr]map[*sharedConn]struct{}{},
		byTenant:  map[string]int{},
	}
	if s.metrics == nil {
		s.metrics = metrics.New()
	}
	proxies := cfg.ClientIP.TrustedProxies
	s.trusted = func(a netip.Addr) bool { return len(proxies) > 0 && trusted(proxies, net.IP(a.AsSlice())) }
	return s
}

// sharedConn is a connection the share counts: against addr while keyless,
// against tenant once keyed.
type sharedConn struct {
	net.Conn
	s      *ConnShare
	addr   netip.Addr
	exempt bool // a trusted proxy's: not counted
	// state is the http.ConnState the server last reported.
	state atomic.Int32
	// tenant is set once, under s.mu, when a request showed a key.
	tenant atomic.Pointer[string]
	once   sync.Once
}

// Close closes the connection and gives its place back, once.
func (c *sharedConn) Close() error {
	c.once.Do(c.s.release(c))
	return c.Conn.Close()
}

// Listener returns l, whose connections the share counts: one it has no
// place for is answered and closed before Accept returns the next.
func (s *ConnShare) Listener(l net.Listener) net.Listener { return &shareListener{Listener: l, s: s} }

type shareListener struct {
	net.Listener
	s *ConnShare
}

func (l *shareListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sc, scope := l.s.admit(c)
		if scope == "" {
			return sc, nil
		}
		l.s.metrics.ConnsRefused.WithLabelValues(scope).Inc()
		go refuseConn(c, scope)
	}
}

// refuseConn answers c, a connection that has no place, without reading
// from it, and closes it.
func refuseConn(c net.Conn, scope string) {
	defer c.Close()
	status, layer, p := "429 Too Many Requests", "ip", Problem{Type: problemBase + "too-many-requests", Title: "Too many requests", Status: http.StatusTooManyRequests,
		Detail: "Too many connections from this address; retry in 1 s."}
	if scope != "ip" {
		status, layer = "503 Service Unavailable", "instance"
		p = Problem{Type: problemBase + "busy", Title: "Busy", Status: http.StatusServiceUnavailable,
			Detail: "This Tollgate instance holds as many connections as it may; retry in 1 s."}
	}
	body, _ := json.Marshal(p)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\nX-RateLimit-Layer: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, layer, len(body), body)
}

// admit counts c, or returns the scope that has no place for it ("ip",
// "instance").
func (s *ConnShare) admit(c net.Conn) (*sharedConn, string) {
	sc := &sharedConn{Conn: c, s: s}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		sc.exempt = true // not TCP: a test's pipe
		return sc, ""
	}
	a := ap.Addr().Unmap()
	if s.trusted(a) {
		sc.exempt = true
		return sc, ""
	}
	if a.Is6() {
		a = netip.PrefixFrom(a, s.prefix).Masked().Addr()
	}
	sc.addr = a
	s.mu.Lock()
	defer s.mu.Unlock()
	mine := len(s.byAddr[a])
	if mine >= s.perIP {
		return nil, "ip"
	}
	if s.inPool >= s.keyless && !s.evictFor(mine) {
		return nil, "instance"
	}
	conns := s.byAddr[a]
	if conns == nil {
		conns = map[*sharedConn]struct{}{}
		s.byAddr[a] = conns
	}
	conns[sc] = struct{}{}
	s.inPool++
	s.metrics.Conns.WithLabelValues("keyless").Inc()
	return sc, ""
}

// evictFor closes a connection that is not serving a request of the
// address holding the most keyless connections, when that is more than
// mine, and reports whether it did. s.mu is held.
func (s *ConnShare) evictFor(mine int) bool {
	var most map[*sharedConn]struct{}
	for _, conns := range s.byAddr {
		if len(conns) > len(most) {
			most = conns
		}
	}
	if len(most) <= mine+1 {
		return false
	}
	for c := range most {
		if st := http.ConnState(c.state.Load()); st == http.StateNew || st == http.StateIdle {
			s.forget(c)
			s.metrics.ConnsRefused.WithLabelValues("evicted").Inc()
			// Its Close must not take s.mu again: forget gave its place back.
			c.once.Do(func() {})
			go c.Conn.Close()
			return true
		}
	}
	return false
}

// forget takes keyless c out of the counts. s.mu is held.
func (s *ConnShare) forget(c *sharedConn) {
	conns := s.byAddr[c.addr]
	delete(conns, c)
	if len(conns) == 0 {
		delete(s.byAddr, c.addr)
	}
	s.inPool--
	s.metrics.Conns.WithLabelValues("keyless").Dec()
}

// release returns the function that gives c's place back.
func (s *ConnShare) release(c *sharedConn) func() {
	return func() {
		if c.exempt {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if t := c.tenant.Load(); t != nil {
			if s.byTenant[*t]--; s.byTenant[*t] == 0 {
				delete(s.byTenant, *t)
			}
			s.metrics.Conns.WithLabelValues("tenant").Dec()
			return
		}
		s.forget(c)
	}
}

// ConnState is the server's ConnState hook: it tells the share which
// connections are serving a request.
func (s *ConnShare) ConnState(c net.Conn, st http.ConnState) {
	if sc, ok := c.(*sharedConn); ok {
		sc.state.Store(int32(st))
	}
}

// connKey is the context key of a request's connection.
type connKey struct{}

// ConnContext is the server's ConnContext hook: it gives each request its
// connection, for keyed.
func (s *ConnShare) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*sharedConn); ok && !sc.exempt {
		return context.WithValue(ctx, connKey{}, sc)
	}
	return ctx
}

// keyed moves the connection of the request ctx from its address's share
// to tenantID's, once: its first request that authenticates names its
// tenant. It reports false when the tenant holds its share already: the
// connection stays its address's, and the caller closes it after the
// answer.
func keyed(ctx context.Context, tenantID string) bool {
	c, ok := ctx.Value(connKey{}).(*sharedConn)
	if !ok || c.tenant.Load() != nil {
		return true
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.tenant.Load() != nil {
		return true
	}
	if _, counted := s.byAddr[c.addr][c]; !counted {
		// Evicted: closing.
		return true
	}
	if s.byTenant[tenantID] >= s.perTenant {
		return false
	}
	s.forget(c)
	s.byTenant[tenantID]++
	s.metrics.Conns.WithLabelValues("tenant").Inc()
	// A copy of its own: taking the parameter's address would move it to
	// the heap on every call, not only on a connection's first.
	id := tenantID
	c.tenant.Store(&id)
	return true
}
