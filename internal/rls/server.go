package rls

import (
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Bounds of the server's connections and streams.
const (
	// DefaultConnsPerIP is what one address may hold of the server's
	// connections: an Envoy holds a few to each rate limit service.
	DefaultConnsPerIP = 64
	// DefaultConns is what all addresses together may hold.
	DefaultConns = 4096
	// MaxStreams bounds the calls in flight on one connection; a tenant's
	// calls in flight on the instance are bounded by the gate's work in
	// progress (TOLLGATE_TENANT_INFLIGHT), whatever their connections.
	MaxStreams = 1024
	// StreamWorkers are the goroutines kept to answer calls: grpc-go
	// otherwise starts a goroutine a call, whose stack the pipeline
	// outgrows and copies every time (a fifth of a decision's CPU on the
	// memory store, make bench-gateways). Past them, a call gets a
	// goroutine of its own as before.
	StreamWorkers = 256
)

// ServerConfig configures a Server; zero fields take the defaults.
type ServerConfig struct {
	// TLS, when set, serves gRPC over TLS; otherwise plaintext HTTP/2.
	TLS             *tls.Config
	ConnsPerIP      int
	Conns           int
	ShutdownTimeout time.Duration
}

// Server is the gRPC server of the rate limit service, with gRPC's
// standard health checking and reflection.
type Server struct {
	g      *grpc.Server
	health *health.Server
	cfg    ServerConfig
	// prefix is the IPv6 network a peer's connections count against, as
	// its calls do in the per-IP layers.
	prefix int
}

// NewServer returns a Server of s.
func NewServer(s *Service, cfg ServerConfig) *Server {
	if cfg.ConnsPerIP <= 0 {
		cfg.ConnsPerIP = DefaultConnsPerIP
	}
	if cfg.Conns <= 0 {
		cfg.Conns = DefaultConns
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessage),
		grpc.MaxConcurrentStreams(MaxStreams),
		grpc.NumStreamWorkers(StreamWorkers),
		// A client that pings more often than this is cut off.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 15 * time.Minute, Time: time.Minute, Timeout: 20 * time.Second}),
		// A connection that has not finished its handshake within this
		// holds no place for long.
		grpc.ConnectionTimeout(10 * time.Second),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	srv := &Server{g: grpc.NewServer(opts...), health: health.NewServer(), cfg: cfg, prefix: s.cfg.IPv6Prefix}
	s.Register(srv.g)
	healthpb.RegisterHealthServer(srv.g, srv.health)
	srv.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	srv.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(srv.g)
	return srv
}

// Serve serves on ln, each address holding at most its share of
// connections, until Stop.
func (s *Server) Serve(ln net.Listener) error {
	return s.g.Serve(&shareListener{Listener: ln, perIP: s.cfg.ConnsPerIP, total: s.cfg.Conns, prefix: s.prefix, byAddr: map[netip.Addr]int{}})
}

// Stop reports NOT_SERVING, lets the calls in flight finish within the
// shutdown timeout, then closes every connection.
func (s *Server) Stop() {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.g.Stop()
		<-done
	}
}

// shareListener closes, as soon as it is accepted, a connection of an
// address that holds its share, or one past the total.
type shareListener struct {
	net.Listener
	perIP, total, prefix int

	mu     sync.Mutex
	byAddr map[netip.Addr]int
	n      int
}

func (l *shareListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a := addrOf(c.RemoteAddr(), l.prefix)
		l.mu.Lock()
		if l.n >= l.total || l.byAddr[a] >= l.perIP {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.n++
		l.byAddr[a]++
		l.mu.Unlock()
		return &sharedConn{Conn: c, l: l, addr: a}, nil
	}
}

func (l *shareListener) release(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.byAddr[a]--; l.byAddr[a] <= 0 {
		delete(l.byAddr, a)
	}
}

// addrOf is a peer's address, an IPv6 one cut to its network of bits
// (the per-IP layers' keying); the zero Addr when it has none.
func addrOf(na net.Addr, bits int) netip.Addr {
	var ap netip.AddrPort
	if t, ok := na.(*net.TCPAddr); ok {
		// Every call asks: formatting the address to parse it again took
		// 1.5 % of the service's CPU.
		ap = t.AddrPort()
	} else {
		var err error
		if ap, err = netip.ParseAddrPort(na.String()); err != nil {
			return netip.Addr{}
		}
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		if p, err := a.Prefix(bits); err == nil {
			return p.Addr()
		}
	}
	return a
}

type sharedConn struct {
	net.Conn
	l    *shareListener
	addr netip.Addr
	once sync.Once
}

func (c *sharedConn) Close() error {
	c.once.Do(func() { c.l.release(c.addr) })
	return c.Conn.Close()
}
