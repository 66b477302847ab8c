package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
)

// slowClient opens a connection to addr and sends a request's headers
// (and none of its body): what a client trickling a body looks like to
// the server until its next byte.
func slowClient(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

// answerWithin reads the status of the answer on conn, or 0 when none came
// within d.
func answerWithin(conn net.Conn, d time.Duration) int {
	conn.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func webhookHead(length int, signed bool) string {
	h := "POST /webhooks/stripe HTTP/1.1\r\nHost: tollgate.test\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(length) + "\r\n"
	if signed {
		h += "Stripe-Signature: t=1,v1=00\r\n"
	}
	return h + "\r\n"
}

// TestUnsignedWebhookIsRefusedBeforeItsBody: a webhook without a
// Stripe-Signature header is answered 400 at once, while its body has not
// even started to arrive, and its connection closed; nothing of it is read.
func TestUnsignedWebhookIsRefusedBeforeItsBody(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, true)
	srv := httptest.NewServer(in.e)
	t.Cleanup(srv.Close)
	conn := slowClient(t, srv.Listener.Addr().String(), webhookHead(500_000, false))
	if got := answerWithin(conn, 2*time.Second); got != http.StatusBadRequest {
		t.Fatalf("unsigned webhook with its body still to come: status %d (0: no answer), want 400 at once", got)
	}
	conn = slowClient(t, srv.Listener.Addr().String(), webhookHead(MaxWebhookBody+1, true))
	if got := answerWithin(conn, 2*time.Second); got != http.StatusRequestEntityTooLarge {
		t.Fatalf("webhook declaring a body over %d bytes: status %d (0: no answer), want 413 at once", MaxWebhookBody, got)
	}
}

// TestBodiesInFlightAreBounded: ten clients from one address start 500 KB
// webhook bodies and stall. Four fit in the address's 2 MiB and are held;
// the other six are refused at once with 429 and Retry-After, so the bodies
// in flight, which the gauge counts, never pass the share. Once the held
// clients go, their share is free again.
func TestBodiesInFlightAreBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	in := newBillingWorld(t).instance(false, true, func(c *Config) { c.Instruments = m })
	srv := httptest.NewServer(in.e)
	t.Cleanup(srv.Close)
	const clients, length = 10, 500_000
	conns := make([]net.Conn, clients)
	refused := 0
	for i := range conns {
		conns[i] = slowClient(t, srv.Listener.Addr().String(), webhookHead(length, true))
		// A refusal comes at once; a held client hears nothing.
		switch got := answerWithin(conns[i], 300*time.Millisecond); got {
		case 0:
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("client %d: status %d", i, got)
		}
	}
	held := DefaultBodyBytesPerIP / length
	if refused != clients-held {
		t.Errorf("%d of %d stalled clients refused, want %d", refused, clients, clients-held)
	}
	if got := value(t, m.BodyBytes); got != float64(held*length) || got > DefaultBodyBytesPerIP {
		t.Errorf("body bytes in flight: %.0f, want %d (at most %d)", got, held*length, DefaultBodyBytesPerIP)
	}
	if got := value(t, m.BodiesRefused.WithLabelValues("ip")); got != float64(refused) {
		t.Errorf("refusals counted: %.0f, want %d", got, refused)
	}
	for _, c := range conns {
		c.Close()
	}
	eventually.NoError(t, 5*time.Second, "body bytes drained", func() error {
		if got := value(t, m.BodyBytes); got != 0 {
			return fmt.Errorf("%.0f body bytes still in flight after the clients left", got)
		}
		return nil
	})
}

// newPublicEcho returns Tollgate's Echo with the ceilings of the pages
// without an API key: an instance ceiling of ceiling requests, then the
// per-IP limits, counted in memory on a clock that stands still. It
// believes X-Forwarded-For from 127.0.0.1 (getFrom).
func newPublicEcho(t *testing.T, ceiling int64) *echo.Echo {
	t.Helper()
	store := memory.New(memory.Config{})
	t.Cleanup(func() { store.Close() })
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	local := memory.New(memory.Config{Now: func() time.Time { return now }})
	t.Cleanup(func() { local.Close() })
	g, err := gate.New(gate.Config{Store: store, Local: local, Pepper: []byte("public pepper"), InstanceCeiling: ceiling, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	_, loopback, _ := net.ParseCIDR("127.0.0.1/32")
	return New(Config{
		Logger: slog.New(slog.DiscardHandler), Ready: func(context.Context) error { return nil },
		ClientIP: ClientIPConfig{TrustedProxies: []*net.IPNet{loopback}}, Public: g,
	})
}

// getFrom sends GET path to e as the client at the address from, through
// the trusted proxy 127.0.0.1.
func getFrom(e *echo.Echo, path, from string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("X-Forwarded-For", from)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// TestPublicPagesHaveACeiling: the pages without an API key answer one
// address's flood with the ceilings' 429 (Retry-After, X-RateLimit-Layer,
// a problem body) while other addresses, and health and readiness, go on
// being served; past the instance ceiling every page is refused but
// health, readiness and the webhook are not.
func TestPublicPagesHaveACeiling(t *testing.T) {
	t.Parallel()
	e := newPublicEcho(t, 2*publicHome.perMinute)
	get := func(path, from string) *httptest.ResponseRecorder {
		return getFrom(e, path, from)
	}
	for range publicHome.perMinute {
		if rec := get("/", "192.0.2.1"); rec.Code != http.StatusOK {
			t.Fatalf("/ within the limit: %d", rec.Code)
		}
	}
	rec := get("/", "192.0.2.1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("X-RateLimit-Layer") != "ip" || rec.Header().Get("Retry-After") == "" ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("/ past the limit: %d %v", rec.Code, rec.Header())
	}
	if rec := get("/", "192.0.2.2"); rec.Code != http.StatusOK {
		t.Fatalf("/ from another address: %d", rec.Code)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if rec := get(path, "192.0.2.1"); rec.Code != http.StatusOK {
			t.Fatalf("%s from the flooding address: %d", path, rec.Code)
		}
	}
	// The dashboard, the API reference and billing links share the ceilings.
	for _, path := range []string{"/admin/login", "/docs", "/docs/init.js", "/billing/portal/x.y", "/no-such-page"} {
		var last int
		for range publicAdmin.perMinute + 1 {
			last = get(path, "192.0.2.3").Code
		}
		if last != http.StatusTooManyRequests {
			t.Errorf("%s flooded from one address: last status %d", path, last)
		}
	}
	// Spread over many addresses, the flood meets the instance ceiling.
	var layer string
	for i := range 2 * publicHome.perMinute {
		if rec := get("/", fmt.Sprintf("198.51.100.%d", i%250+1)); rec.Code == http.StatusTooManyRequests {
			layer = rec.Header().Get("X-RateLimit-Layer")
			break
		}
	}
	if layer != "instance" {
		t.Fatalf("a flood from many addresses: refused by %q, want instance", layer)
	}
	if rec := get("/healthz", "198.51.100.1"); rec.Code != http.StatusOK {
		t.Fatalf("/healthz past the instance ceiling: %d", rec.Code)
	}
	req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", nil)
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code == http.StatusTooManyRequests {
		t.Fatalf("the webhook past the instance ceiling: 429")
	}
}

// value reads a gauge's or a counter's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}
