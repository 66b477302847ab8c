// Package metrics holds Tollgate's Prometheus collectors, registered on a
// registry of their own so tests can make as many as they like.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the collectors the admission pipeline and the HTTP layer feed.
// All methods are safe for concurrent use.
type Metrics struct {
	reg          *prometheus.Registry
	Checks       *prometheus.CounterVec
	StoreLatency *prometheus.HistogramVec
	Degraded     *prometheus.CounterVec
	BreakerOpen  prometheus.Gauge
	// BodyBytes is the request body bytes the HTTP layer has let in and
	// not yet finished with (httpapi's bound on bodies in flight).
	BodyBytes prometheus.Gauge
	// BodiesRefused counts requests refused for want of room for their
	// body, by scope: "ip" (the client's share) or "instance" (the total).
	BodiesRefused *prometheus.CounterVec
}

// New returns a fresh set of collectors with the Go runtime's.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_checks_total",
			Help: "Admission answers by result (allowed, refused, error) and the layer that decided (instance, ip, quota, allotment, sandbox, policy, auth).",
		}, []string{"result", "layer"}),
		StoreLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_counter_store_seconds",
			Help:    "Latency of counter-store round trips by outcome (ok, unavailable, skipped).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25},
		}, []string{"outcome"}),
		Degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_degraded_answers_total",
			Help: "Answers given without the shared counter store, by layer.",
		}, []string{"layer"}),
		BreakerOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_counter_breaker_open",
			Help: "Tenants whose circuit breaker keeps their calls away from a failing counter store (one circuit per tenant).",
		}),
		BodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_http_body_bytes_in_flight",
			Help: "Request body bytes admitted and not yet finished with: the most each body may hold, by its Content-Length or its route's bound.",
		}),
		BodiesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_http_bodies_refused_total",
			Help: "Requests refused because their body would pass the client's share (ip) or the instance's total (instance) of body bytes in flight.",
		}, []string{"scope"}),
	}
	m.reg.MustRegister(m.Checks, m.StoreLatency, m.Degraded, m.BreakerOpen, m.BodyBytes, m.BodiesRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the collectors in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
