package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoRedirects: the client follows no redirect, which would carry its
// API key to wherever it points, and the server it points to hears
// nothing, whether it is another server or another path of the same one.
// A 3xx is Tollgate unavailable (the fail mode answers a check) with an
// error that says where it points, the URL to set.
func TestNoRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	var sawKey atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if r.Header.Get("Authorization") != "" {
			sawKey.Store(true)
		}
		io.WriteString(w, `{"allowed":true,"items":[]}`)
	}))
	t.Cleanup(other.Close)
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, target := range []string{"other server", "same server"} {
			t.Run(fmt.Sprintf("%d to the %s", status, target), func(t *testing.T) {
				t.Parallel()
				var here atomic.Int64
				var srv *httptest.Server
				srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					here.Add(1)
					if strings.HasPrefix(r.URL.Path, "/moved") {
						io.WriteString(w, `{"allowed":true,"items":[]}`)
						return
					}
					to := other.URL + r.URL.Path
					if target == "same server" {
						to = srv.URL + "/moved" + r.URL.Path
					}
					http.Redirect(w, r, to, status)
				}))
				defer srv.Close()
				to, base := other.URL+"/v1/check", other.URL
				if target == "same server" {
					to, base = srv.URL+"/moved/v1/check", srv.URL+"/moved"
				}
				says := fmt.Sprintf("redirected to %s, set the URL to where it points (%s)", to, base)
				for _, hc := range []*http.Client{nil, {}} {
					c, err := New(srv.URL, "tg_live_secret", WithHTTPClient(hc), WithTimeout(5*time.Second), WithFailMode(FailClosed))
					if err != nil {
						t.Fatal(err)
					}
					here.Store(0)
					d, err := c.Check(context.Background(), Item{Policy: "api", Subject: "s"})
					if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), says) || d.Allowed || !d.Degraded {
						t.Errorf("check redirected by %d: %+v, %v; want the fail mode's and an error that says %q", status, d, err, says)
					}
					if here.Load() != 1 {
						t.Errorf("%d calls to the server, want 1", here.Load())
					}
					if err := c.Reset(context.Background(), "api", "s"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "set the URL to where it points") {
						t.Errorf("reset redirected by %d: %v", status, err)
					}
				}
			})
		}
	}
	t.Cleanup(func() {
		if elsewhere.Load() != 0 || sawKey.Load() {
			t.Errorf("the server redirected to heard %d calls (the API key: %t)", elsewhere.Load(), sawKey.Load())
		}
	})
}
