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
	// IPv6 prefixes that carry or reach IPv4 addresses. A translator or
	// relay on the way (a DNS64/NAT64 gateway on an IPv6-only subnet)
	// delivers to the IPv4 address, which the rules for IPv6 would never
	// see.
	nat64      = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052: the last 32 bits
	translated = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 (SIIT): the last 32 bits
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215: embedding chosen by the operator
	sixToFour  = netip.MustParsePrefix("2002::/16")       // RFC 3056: bits 16 to 47
	teredo     = netip.MustParsePrefix("2001::/32")       // RFC 4380: the IPv4 address obfuscated
	v4Compat   = netip.MustParsePrefix("::/96")           // RFC 4291: deprecated ::a.b.c.d
)

// refusedAddr names the kind of address ip is when delivery may not
// connect to it, or returns "". Link-local, metadata, multicast and
// unspecified addresses are always refused; loopback and private ones
// unless allowPrivate. An IPv6 address that carries an IPv4 address
// (NAT64's 64:ff9b::/96, SIIT's ::ffff:0:0:0/96, 6to4's 2002::/16) is
// judged by the IPv4 address,
// so that a public name answered by DNS64 still works; local-use NAT64,
// Teredo and IPv4-compatible addresses, whose IPv4 address cannot be
// told or that nothing should route, are refused.
func refusedAddr(ip netip.Addr, allowPrivate bool) string {
	ip = ip.Unmap()
	if ip.Is6() {
		// Prefix.Contains is false for an address with a zone.
		bare, a := ip.WithZone(""), ip.As16()
		switch {
		case nat64.Contains(bare):
			if why := refusedAddr(netip.AddrFrom4([4]byte(a[12:16])), allowPrivate); why != "" {
				return "NAT64 " + why
			}
		case translated.Contains(bare):
			if why := refusedAddr(netip.AddrFrom4([4]byte(a[12:16])), allowPrivate); why != "" {
				return "IPv4-translated " + why
			}
		case nat64Local.Contains(bare):
			return "local-use NAT64"
		case sixToFour.Contains(bare):
			if why := refusedAddr(netip.AddrFrom4([4]byte(a[2:6])), allowPrivate); why != "" {
				return "6to4 " + why
			}
		case teredo.Contains(bare):
			return "Teredo"
		case v4Compat.Contains(bare) && !bare.IsUnspecified() && !bare.IsLoopback():
			return "deprecated IPv4-compatible"
		}
	}
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
