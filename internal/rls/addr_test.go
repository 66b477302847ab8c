package rls

import (
	"net"
	"net/netip"
	"testing"
)

// TestAddrOf: a peer's address as the per-IP layers and the connection
// share key it: IPv4 as it is (also when it arrives IPv4-mapped), IPv6 cut
// to its network, and nothing for an address that is no IP.
func TestAddrOf(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 5000}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 5000}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5000}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 5000, Zone: "eth0"}, "fe80::"},
		{&net.UDPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5000}, "2001:db8:1:2::"},
		{&net.UnixAddr{Name: "/tmp/sock", Net: "unix"}, "invalid IP"},
	} {
		if got := addrOf(c.addr, 64); got.String() != c.want {
			t.Errorf("addrOf(%v) = %v, want %s", c.addr, got, c.want)
		}
	}
	if got := addrOf(&net.TCPAddr{IP: net.ParseIP("2001:db8::1")}, 128); got != netip.MustParseAddr("2001:db8::1") {
		t.Errorf("a /128 prefix cut the address: %v", got)
	}
}
