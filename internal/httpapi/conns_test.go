package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// sharedServer serves a's API through a ConnShare of cfg, as serve does.
func sharedServer(t *testing.T, a *tenantAPI, cfg ConnConfig) (*httptest.Server, *ConnShare) {
	t.Helper()
	cfg.Metrics = a.met
	share := NewConnShare(cfg)
	srv := httptest.NewUnstartedServer(a.e)
	srv.Listener = share.Listener(srv.Listener)
	srv.Config.ConnState, srv.Config.ConnContext = share.ConnState, share.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, share
}

// dialFrom opens a connection to srv from the loopback address from.
func dialFrom(t *testing.T, srv *httptest.Server, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ask sends a request with key (none when "") on conn, kept alive, and
// returns its status.
func ask(t *testing.T, conn net.Conn, br *bufio.Reader, method, path, key, body string) int {
	t.Helper()
	h := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: tollgate.test\r\nContent-Length: %d\r\n", method, path, len(body))
	if key != "" {
		h += "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := io.WriteString(conn, h+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestConnsShareByAddress: one address holds at most its share of
// connections that have shown no key, however idle; the next is answered
// 429 and closed at once, while another address is served. A connection
// whose request showed a key counts against its tenant from then on, and
// leaves its address's place to others.
func TestConnsShareByAddress(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	srv, _ := sharedServer(t, a, ConnConfig{PerIP: 8, Keyless: 100})
	for i := range 8 {
		if got := answerWithin(dialFrom(t, srv, "127.0.0.2"), 50*time.Millisecond); got != 0 {
			t.Fatalf("connection %d of 8 from one address: answered %d, want held", i+1, got)
		}
	}
	conn := dialFrom(t, srv, "127.0.0.2")
	if got := answerWithin(conn, 2*time.Second); got != http.StatusTooManyRequests {
		t.Fatalf("the address's 9th connection: %d, want 429 at once", got)
	}
	other := dialFrom(t, srv, "127.0.0.3")
	br := bufio.NewReader(other)
	if got := ask(t, other, br, http.MethodGet, "/healthz", "", ""); got != http.StatusOK {
		t.Fatalf("another address beside the full one: %d", got)
	}
	// 127.0.0.3 fills its share; then one of its connections shows a key,
	// and leaves its place.
	for range 7 {
		dialFrom(t, srv, "127.0.0.3")
	}
	eventually.True(t, 2*time.Second, "127.0.0.3 at its share", func() bool { return value(t, a.met.Conns.WithLabelValues("keyless")) == 16 })
	if got := answerWithin(dialFrom(t, srv, "127.0.0.3"), 2*time.Second); got != http.StatusTooManyRequests {
		t.Fatalf("127.0.0.3's 9th connection: %d, want 429", got)
	}
	if got := ask(t, other, br, http.MethodGet, "/v1/usage", key, ""); got != http.StatusOK {
		t.Fatalf("a tenant's request: %d", got)
	}
	if got := value(t, a.met.Conns.WithLabelValues("tenant")); got != 1 {
		t.Fatalf("tenant connections %v, want 1", got)
	}
	if got := answerWithin(dialFrom(t, srv, "127.0.0.3"), 200*time.Millisecond); got != 0 {
		t.Fatalf("a connection in the place a keyed one left: %d, want held", got)
	}
}

// TestKeylessConnsCannotShutOutTenants: clients without a key fill the
// keyless total from four addresses, each at its share, sending nothing.
// A tenant's server connecting from an address of its own takes the place
// of one of theirs, and its checks are answered exactly; the attackers'
// further connections are refused, and the connections held never pass
// the total.
func TestKeylessConnsCannotShutOutTenants(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	key, _ := a.tenant(tenant.PlanPro)
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/two", `{"limit":2,"window":"1h"}`), http.StatusOK)
	srv, _ := sharedServer(t, a, ConnConfig{PerIP: 10, Keyless: 40})
	for addr := 2; addr < 6; addr++ {
		for range 10 {
			dialFrom(t, srv, fmt.Sprintf("127.0.0.%d", addr))
		}
	}
	eventually.True(t, 2*time.Second, "the keyless total full", func() bool { return value(t, a.met.Conns.WithLabelValues("keyless")) == 40 })
	if got := answerWithin(dialFrom(t, srv, "127.0.0.2"), 2*time.Second); got != http.StatusTooManyRequests {
		t.Fatalf("an attacker's 11th connection: %d, want 429", got)
	}
	conn := dialFrom(t, srv, "127.0.0.9")
	br := bufio.NewReader(conn)
	check := `{"items":[{"policy":"two","subject":"s"}]}`
	for i, want := range []bool{true, true, false} {
		h := fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: tollgate.test\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", key, len(check), check)
		if _, err := io.WriteString(conn, h); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the tenant's check %d beside the full keyless total: %v", i+1, err)
		}
		var v struct {
			Allowed bool `json:"allowed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || v.Allowed != want {
			t.Fatalf("the tenant's check %d: %d (%v), allowed %v, want %v", i+1, resp.StatusCode, err, v.Allowed, want)
		}
	}
	if got := value(t, a.met.ConnsRefused.WithLabelValues("evicted")); got != 1 {
		t.Errorf("attackers' connections closed for the tenant: %v, want 1", got)
	}
	if got := value(t, a.met.Conns.WithLabelValues("keyless")) + value(t, a.met.Conns.WithLabelValues("tenant")); got != 40 {
		t.Errorf("connections held: %v, want the 40 of the total", got)
	}
}
