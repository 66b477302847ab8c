package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// bodyBytesInFlight scrapes the server's gauge of request body bytes in
// flight; -1 when it is not there.
func bodyBytesInFlight(t *testing.T, base string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "tollgate_http_body_bytes_in_flight "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// TestSlowClientsAreCutOff runs the real server (serve's http.Server and
// its settings) against clients that send a webhook's headers, declare a
// 500 KB body and trickle it a byte at a time, as in the attack that held
// 400 connections and 200 MB. Those that fit in the address's share of
// body bytes are cut off by the read timeout; the rest are refused at once;
// the body bytes in flight never pass the share; and the server goes on
// serving.
func TestSlowClientsAreCutOff(t *testing.T) {
	const readTimeout = 2 * time.Second
	base, _, _ := startServer(t, map[string]string{
		"DATABASE_URL": pgtest.New(t), "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": "memory",
		"TOLLGATE_READ_TIMEOUT": readTimeout.String(), "STRIPE_WEBHOOK_SECRET": "whsec_slow_clients_0123",
	})
	addr := strings.TrimPrefix(base, "http://")

	const clients, length = 12, 500_000
	type outcome struct {
		status int           // 0: no answer
		closed time.Duration // from the headers to the server closing
	}
	out := make([]outcome, clients)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range clients {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: tollgate.test\r\nStripe-Signature: t=1,v1=00\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", length)
		start := time.Now()
		// The trickle: a byte every 50 ms, for as long as the server takes
		// it (a 500 KB body would take seven hours).
		wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte{'x'}); err != nil {
						return
					}
				}
			}
		})
		wg.Go(func() {
			conn.SetReadDeadline(start.Add(4 * readTimeout))
			r := bufio.NewReader(conn)
			if resp, err := http.ReadResponse(r, nil); err == nil {
				out[i].status = resp.StatusCode
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			// Closed by the server: EOF (or a reset), not our deadline.
			if _, err := r.ReadByte(); err != nil && !isTimeout(err) {
				out[i].closed = time.Since(start)
			}
		})
	}
	peak := 0.0
	for end := time.Now().Add(readTimeout / 2); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		peak = max(peak, bodyBytesInFlight(t, base))
	}
	close(stop)
	wg.Wait()

	held, refused := 0, 0
	for i, o := range out {
		switch {
		case o.status == http.StatusTooManyRequests:
			refused++
		case o.closed > 0:
			held++
		}
		if o.closed == 0 || o.closed > readTimeout+2*time.Second {
			t.Errorf("client %d: status %d, closed after %s; want the server to close it within %s", i, o.status, o.closed, readTimeout+2*time.Second)
		}
	}
	if want := httpapi.DefaultBodyBytesPerIP / length; held != want || refused != clients-want {
		t.Errorf("%d clients held until the read timeout and %d refused at once, want %d and %d", held, refused, want, clients-want)
	}
	if peak <= 0 || peak > httpapi.DefaultBodyBytesPerIP {
		t.Errorf("body bytes in flight peaked at %.0f, want some and at most %d", peak, httpapi.DefaultBodyBytesPerIP)
	}
	if got := status(t, base+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz after the slow clients: %d", got)
	}
	if got := bodyBytesInFlight(t, base); got != 0 {
		t.Errorf("%.0f body bytes still in flight after the clients were cut off", got)
	}
	t.Logf("%d held and cut off, %d refused; body bytes in flight peaked at %.0f", held, refused, peak)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestConnectionsAreSharedByAddress runs the real server against a client
// that opens connections from one address and sends nothing on them, as a
// client without a key holding an instance's connections would: it holds
// its share (TOLLGATE_CONNS_PER_IP), the next is answered 429 and closed at
// once, and another address is served beside it.
func TestConnectionsAreSharedByAddress(t *testing.T) {
	base, _, _ := startServer(t, map[string]string{
		"DATABASE_URL": pgtest.New(t), "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": "memory",
		"TOLLGATE_CONNS_PER_IP": "20",
	})
	addr := strings.TrimPrefix(base, "http://")
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	answer := func(conn net.Conn, within time.Duration) int {
		conn.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 20 {
		if got := answer(dial("127.0.0.2"), 20*time.Millisecond); got != 0 {
			t.Fatalf("connection %d of the address's 20: answered %d, want held", i+1, got)
		}
	}
	if got := answer(dial("127.0.0.2"), 2*time.Second); got != http.StatusTooManyRequests {
		t.Fatalf("the address's 21st connection: %d (0: held), want 429 at once", got)
	}
	conn := dial("127.0.0.3")
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: tollgate.test\r\n\r\n")
	if got := answer(conn, 2*time.Second); got != http.StatusOK {
		t.Fatalf("/healthz from another address: %d", got)
	}
}
