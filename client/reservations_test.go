package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestReserveKeepsItsKeyAcrossRetries: each Reserve sends an
// Idempotency-Key of its own, the same on the client's retry after a 429
// of Tollgate's ceilings (whose answer a unit test can give at will; the
// black-box suite has the real reservations), and the caller's key when
// given.
func TestReserveKeepsItsKeyAcrossRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		first := len(keys)%2 == 1
		mu.Unlock()
		if first {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"type":"https://tollgate.dev/problems/rate-limited","title":"Too Many Requests","status":429}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"allowed":true,"reservation_id":"rs_00000000000000000000000000000001","amount":5,"limit":10,"retry_after_ms":0,"unit":"","degraded":false}`)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "tg_live_x", WithRetry(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, opts := range [][]ReserveOption{nil, nil, {IdempotencyKey("mine")}} {
		if r, err := c.Reserve(ctx, "p", "s", 5, opts...); err != nil || !r.Allowed {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
	}
	if len(keys) != 6 || keys[0] == "" || keys[1] != keys[0] || keys[2] == keys[0] || keys[3] != keys[2] || keys[4] != "mine" || keys[5] != "mine" {
		t.Errorf("Idempotency-Keys of three reserves, each retried once: %q", keys)
	}
}
