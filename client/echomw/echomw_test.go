package echomw

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

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
