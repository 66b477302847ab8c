package echomw_test

import (
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/client/echomw"
)

// An Echo app behind a load balancer in 10.0.0.0/8, limited by client
// address: the middleware keys requests by the same rule as the app's own
// IPExtractor.
func ExampleMiddleware() {
	tg, err := client.New("http://localhost:8080", os.Getenv("TOLLGATE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	limit, err := echomw.Middleware(tg, client.MiddlewareConfig{
		Policy: "api-per-ip",
		Key:    client.ByIP(client.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}),
	})
	if err != nil {
		log.Fatal(err)
	}
	_, lb, _ := net.ParseCIDR("10.0.0.0/8")
	e := echo.New()
	// Echo trusts private networks by default; ByIP trusts only what it is
	// given. Say the same to both.
	e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustLoopback(false), echo.TrustLinkLocal(false),
		echo.TrustPrivateNet(false), echo.TrustIPRange(lb))
	e.Use(limit)
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	log.Fatal(e.Start(":8081"))
}
