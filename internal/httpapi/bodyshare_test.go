package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// stalledFrom opens a connection to srv from the loopback address from
// (127.0.0.0/8 is all the machine's: each address is a client of its own
// to the server) and sends head, a request's headers and none of its
// body.
func stalledFrom(t *testing.T, srv *httptest.Server, from, head string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

// bodyHead is the head of a POST to path with key (none when ""), declaring
// length bytes of body, or a chunked body when length is negative.
func bodyHead(path, key string, length int) string {
	h := "POST " + path + " HTTP/1.1\r\nHost: tollgate.test\r\nContent-Type: application/json\r\n"
	if key != "" {
		h += "Authorization: Bearer " + key + "\r\n"
	}
	if length < 0 {
		// A first chunk, so that the server has begun reading the body.
		return h + "Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n"
	}
	return h + fmt.Sprintf("Content-Length: %d\r\n\r\n", length)
}

// twoAnHour makes tenant key's policy "two", 2 checks an hour per subject,
// and returns a function that checks subject against it through srv, as
// a tenant's server does, and says whether it was allowed; any answer but
// a 200 fails the test.
func twoAnHour(t *testing.T, a *tenantAPI, srv *httptest.Server, key string) func(subject string) bool {
	t.Helper()
	wantStatus(t, a.do(key, http.MethodPut, "/v1/policies/two", `{"limit":2,"window":"1h"}`), http.StatusOK)
	client := &http.Client{Timeout: 5 * time.Second}
	return func(subject string) bool {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", strings.NewReader(`{"items":[{"policy":"two","subject":"`+subject+`"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("check of %s: %v", subject, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("check of %s: status %d %s", subject, resp.StatusCode, body)
		}
		var v struct {
			Allowed  bool `json:"allowed"`
			Degraded bool `json:"degraded"`
		}
		if err := json.Unmarshal(body, &v); err != nil || v.Degraded {
			t.Fatalf("check of %s: %s (%v)", subject, body, err)
		}
		return v.Allowed
	}
}

// exactlyTwo checks each of subjects three times: allowed, allowed, refused.
func exactlyTwo(t *testing.T, check func(string) bool, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		for i, want := range []bool{true, true, false} {
			if got := check(s); got != want {
				t.Fatalf("check %d of %s: allowed %v, want %v", i+1, s, got, want)
			}
		}
	}
}

// TestKeylessBodiesHoldNothing is issue 36's first attack: 17 addresses
// open 32 connections each that send only the headers of a /v1/check (or
// a chunked /v1/check/batch) declaring a 64 KiB body and no API key, as
// many as filled the instance's body bytes before. Each is answered 401 at
// once and its connection closed, without a byte of its body read; the
// body bytes in flight stay at zero; and a tenant beside them gets exact,
// undegraded answers, never a 503.
func TestKeylessBodiesHoldNothing(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	srv := httptest.NewServer(a.e)
	t.Cleanup(srv.Close)
	key, _ := a.tenant(tenant.PlanPro)
	check := twoAnHour(t, a, srv, key)

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for addr := 2; addr < 19; addr++ {
		wg.Go(func() {
			for i := range 32 {
				head := bodyHead("/v1/check", "", 64<<10)
				if i%4 == 0 {
					head = bodyHead("/v1/check/batch", "", -1)
				}
				conn := stalledFrom(t, srv, fmt.Sprintf("127.0.0.%d", addr), head)
				got := answerWithin(conn, 2*time.Second)
				mu.Lock()
				statuses[got]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if statuses[http.StatusUnauthorized] != 17*32 {
		t.Errorf("keyless bodies answered %v (0: no answer within 2 s), want all 544 401 at once", statuses)
	}
	if got := value(t, a.met.BodyBytes); got != 0 {
		t.Errorf("body bytes in flight beside the keyless clients: %.0f, want 0", got)
	}
	exactlyTwo(t, check, "203.0.113.7", "203.0.113.8")
}

// TestBatchBodiesReserveWhatIsRead is issue 36's second item: a batch of
// unknown length reserves what /v1/check/batch reads at most (1 MiB and a
// byte), not 64 KiB, so that the gauge, and the bounds, are what memory
// holds.
func TestBatchBodiesReserveWhatIsRead(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	srv := httptest.NewServer(a.e)
	t.Cleanup(srv.Close)
	key, _ := a.tenant(tenant.PlanPro)
	stalledFrom(t, srv, "127.0.0.1", bodyHead("/v1/check/batch", key, -1))
	eventually.NoError(t, 5*time.Second, "the batch's reservation", func() error {
		if got := value(t, a.met.BodyBytes); got != maxBatchBody+1 {
			return fmt.Errorf("a batch of unknown length reserved %.0f bytes, want %d", got, maxBatchBody+1)
		}
		return nil
	})
}

// TestTenantsShareBodies: eleven tenants each stall as many batches of
// unknown length as their share holds (3 of 1 MiB and a byte in 4 MiB)
// and one more, which is refused at once (429, inflight): between them
// they fill the tenants' 32 MiB. A tenant beside them still has its
// checks answered exactly, within its floor; only its own batch of
// unknown length, which needs the full pool, is refused (503). Once the
// stalled clients go, nothing is left reserved.
func TestTenantsShareBodies(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	srv := httptest.NewServer(a.e)
	t.Cleanup(srv.Close)
	key, _ := a.tenant(tenant.PlanPro)
	check := twoAnHour(t, a, srv, key)

	const hostile, held = 11, DefaultBodyBytesPerTenant / (maxBatchBody + 1)
	var conns []net.Conn
	pooled, refused := 0, 0
	for h := range hostile {
		hk, _ := a.tenant(tenant.PlanPro)
		for i := range held + 1 {
			// Each stalled request from an address of its own: only the
			// tenant's share may hold it back.
			conn := stalledFrom(t, srv, fmt.Sprintf("127.0.%d.%d", 1+h, 2+i), bodyHead("/v1/check/batch", hk, -1))
			conns = append(conns, conn)
			switch got := answerWithin(conn, 300*time.Millisecond); got {
			case 0:
				pooled++
			case http.StatusTooManyRequests, http.StatusServiceUnavailable:
				refused++
			default:
				t.Fatalf("hostile tenant %d, batch %d: status %d", h, i, got)
			}
		}
	}
	if want := DefaultBodyBytesTotal / (maxBatchBody + 1); pooled != want {
		t.Errorf("%d stalled batches held, want the %d the tenants' pool holds", pooled, want)
	}
	if got := value(t, a.met.BodyBytes); got > DefaultBodyBytesTotal {
		t.Errorf("body bytes in flight %.0f, more than the %d of the tenants' pool", got, DefaultBodyBytesTotal)
	}
	exactlyTwo(t, check, "203.0.113.7", "203.0.113.8")
	conn := stalledFrom(t, srv, "127.0.0.1", bodyHead("/v1/check/batch", key, -1))
	if got := answerWithin(conn, 2*time.Second); got != http.StatusServiceUnavailable {
		t.Errorf("the bystander's batch of unknown length beside a full pool: status %d, want 503", got)
	}
	for _, c := range conns {
		c.Close()
	}
	eventually.NoError(t, 5*time.Second, "body bytes drained", func() error {
		if got := value(t, a.met.BodyBytes); got != 0 {
			return fmt.Errorf("%.0f body bytes still in flight after the clients left", got)
		}
		return nil
	})
}
