package echomw

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/client"
)

// TestFailModesInEcho: with Tollgate down, an Echo app fails open (the
// handler runs, its Decision degraded) or closed (503, the handler does
// not run), as the net/http middleware does.
func TestFailModesInEcho(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	for mode, want := range map[client.FailMode]int{client.FailOpen: 200, client.FailClosed: 503} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c, err := client.New(down, "tg_live_x", client.WithFailMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			limit, err := Middleware(c, client.MiddlewareConfig{Policy: "api"})
			if err != nil {
				t.Fatal(err)
			}
			e := echo.New()
			e.Use(limit)
			e.GET("/", func(ec echo.Context) error {
				if d, ok := client.DecisionFromContext(ec.Request().Context()); !ok || !d.Degraded {
					return ec.String(http.StatusInternalServerError, "no degraded decision")
				}
				return ec.String(http.StatusOK, "hello")
			})
			w := httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code != want {
				t.Errorf("%d %s, want %d", w.Code, w.Body, want)
			}
		})
	}
	if _, err := Middleware(nil, client.MiddlewareConfig{Policy: "api"}); err == nil {
		t.Error("a nil client: no error")
	}
}

// TestWrongAnswersInEcho: behind answers that are not Tollgate's (another
// service's JSON, a load balancer's redirect, a web server's 404 page) an
// Echo app gets the fail mode, as behind an unreachable Tollgate: the
// handler runs with a degraded Decision (open) or the app answers 503
// (closed), never 500.
func TestWrongAnswersInEcho(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"JSON of another service", "application/json", `{"ok":true}`, 200},
		{"307 to another host", "", "", 307},
		{"HTML 404 at a wrong base URL", "text/html", "<h1>404 Not Found</h1>", 404},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 307 {
					w.Header().Set("Location", "http://127.0.0.1:1"+r.URL.Path)
				}
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			for mode, want := range map[client.FailMode]int{client.FailOpen: 200, client.FailClosed: 503} {
				c, err := client.New(srv.URL, "tg_live_x", client.WithFailMode(mode), client.WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var heard error
				limit, err := Middleware(c, client.MiddlewareConfig{Policy: "api", OnError: func(_ *http.Request, err error) { heard = err }})
				if err != nil {
					t.Fatalf("failing %s: not built: %v", mode, err)
				}
				e := echo.New()
				e.Use(limit)
				e.GET("/", func(ec echo.Context) error {
					if d, ok := client.DecisionFromContext(ec.Request().Context()); !ok || !d.Allowed || !d.Degraded {
						return ec.String(http.StatusInternalServerError, "no degraded decision")
					}
					return ec.String(http.StatusOK, "hello")
				})
				w := httptest.NewRecorder()
				e.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				if w.Code != want {
					t.Errorf("failing %s: %d %s, want %d", mode, w.Code, w.Body, want)
				}
				if !errors.Is(heard, client.ErrUnavailable) {
					t.Errorf("failing %s: OnError heard %v, want ErrUnavailable", mode, heard)
				}
			}
		})
	}
}
