package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/metrics"
)

// statusClientGone is the status of a request whose client went away
// before its answer (nginx's 499): no client reads it, but the metrics and
// the access logs of proxies in front say it.
const statusClientGone = 499

// clientGone reports whether c's client went away: its connection closed
// (or its HTTP/2 stream was reset) before the answer. net/http cancels a
// request's context then and only then while the handler runs; the
// server's own deadlines and shutdown do not cancel it.
func clientGone(c echo.Context) bool {
	return errors.Is(c.Request().Context().Err(), context.Canceled)
}

// routeTimers time every request by method, route template and status
// class (tollgate_http_request_duration_seconds). The routes are known
// once New has registered them all (lookups before that find none and
// count as unmatched); a request that matched none, or a method that is
// not a registered one, counts under the route "unmatched", so what a
// client puts in a path or a method adds no series.
type routeTimers struct {
	m         *metrics.Metrics
	routes    map[routeKey]*metrics.Route
	unmatched map[string]*metrics.Route // by method, "other" for the rest
}

// routeKey is a route as Echo matched it: its method and template.
type routeKey struct{ method, path string }

// unmatchedRoute is the route label of requests that matched no route.
const unmatchedRoute = "unmatched"

// standardMethods are the methods of the unmatched requests that keep
// their name in the method label; any other is "other".
var standardMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace,
}

func newRouteTimers(m *metrics.Metrics) *routeTimers {
	t := &routeTimers{m: m, unmatched: make(map[string]*metrics.Route, len(standardMethods)+1)}
	for _, method := range standardMethods {
		t.unmatched[method] = m.NewRoute(method, unmatchedRoute)
	}
	t.unmatched["other"] = m.NewRoute("other", unmatchedRoute)
	return t
}

// learn takes e's routes. It runs once, in New, before e serves.
func (t *routeTimers) learn(e *echo.Echo) {
	t.routes = make(map[routeKey]*metrics.Route)
	for _, r := range e.Routes() {
		k := routeKey{r.Method, r.Path}
		if _, ok := t.routes[k]; !ok && r.Method != echo.RouteNotFound {
			t.routes[k] = t.m.NewRoute(r.Method, r.Path)
		}
	}
}

// observe records c's request, which started at start and is answered
// with c's response status.
func (t *routeTimers) observe(c echo.Context, start time.Time) {
	method := c.Request().Method
	r := t.routes[routeKey{method, c.Path()}]
	if r == nil {
		if r = t.unmatched[method]; r == nil {
			r = t.unmatched["other"]
		}
	}
	r.Observe(c.Response().Status, time.Since(start).Seconds())
}
