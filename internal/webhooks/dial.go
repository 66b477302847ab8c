package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrRefusedAddress is a receiver whose address delivery will not connect
// to (loopback, private, link-local, metadata, multicast, unspecified).
var ErrRefusedAddress = errors.New("refused address")

// metadataAddrs are cloud metadata services, refused even when private
// addresses are allowed.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
}

var (
	cgnat   = netip.MustParsePrefix("100.64.0.0/10")
	thisNet = netip.MustParsePrefix("0.0.0.0/8")
)

// refusedAddr names the kind of address ip is when delivery may not
// connect to it, or returns "". Link-local, metadata, multicast and
// unspecified addresses are always refused; loopback and private ones
// unless allowPrivate.
func refusedAddr(ip netip.Addr, allowPrivate bool) string {
	ip = ip.Unmap()
	for _, m := range metadataAddrs {
		if ip == m {
			return "metadata service"
		}
	}
	switch {
	case ip.IsUnspecified() || thisNet.Contains(ip):
		return "unspecified"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsLinkLocalMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "multicast or broadcast"
	case allowPrivate:
		return ""
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate() || cgnat.Contains(ip):
		return "private"
	}
	return ""
}

// guard is the net.Dialer Control that refuses an address at connect
// time, after DNS, so a name that resolves (or rebinds) to an internal
// address is refused too.
func guard(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrRefusedAddress, address)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrRefusedAddress, address)
		}
		if why := refusedAddr(ip, allowPrivate); why != "" {
			return fmt.Errorf("%w: %s is a %s address", ErrRefusedAddress, ip, why)
		}
		return nil
	}
}

// NewClient returns the HTTP client deliveries go out with: every
// connection checked by guard, no proxy from the environment (it would
// connect on the receiver's behalf, past the guard), no redirects followed
// (a 3xx is a failed delivery), timeout per request.
func NewClient(allowPrivate bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: guard(allowPrivate)}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    5 * time.Second,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 16 << 10,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
