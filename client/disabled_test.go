package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestErrTenantDisabled: Tollgate's 403 of a disabled tenant matches
// ErrTenantDisabled and allows nothing, whatever the fail mode; its 403 of
// a test key's change does not match it.
func TestErrTenantDisabled(t *testing.T) {
	t.Parallel()
	for slug, want := range map[string]bool{"tenant-disabled": true, "test-key-read-only": false} {
		t.Run(slug, func(t *testing.T) {
			t.Parallel()
			f := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprintf(w, `{"type":"https://tollgate.dev/problems/%s","title":"refused","status":403}`, slug)
			}))
			defer f.Close()
			for _, mode := range []FailMode{FailOpen, FailClosed} {
				c, err := New(f.URL, "tg_live_x", WithFailMode(mode), WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				d, err := c.Check(context.Background(), Item{Policy: "api", Subject: "s"})
				if errors.Is(err, ErrTenantDisabled) != want || d.Allowed || d.Degraded || errors.Is(err, ErrUnavailable) {
					t.Errorf("%s: %+v, %v; want ErrTenantDisabled %t and nothing allowed", mode, d, err, want)
				}
				l, err := c.Acquire(context.Background(), "jobs", "s", time.Minute)
				if errors.Is(err, ErrTenantDisabled) != want || l.Allowed {
					t.Errorf("acquire, %s: %+v, %v", mode, l, err)
				}
			}
		})
	}
}
