// Package metrics holds Tollgate's Prometheus collectors, registered on a
// registry of their own so tests can make as many as they like.
//
// Every label of every family takes its values from a fixed list (a layer,
// an outcome, a store, an operation, a status class, a queue) or from the
// routes the HTTP layer registered (Echo's route templates, such as
// /v1/policies/:name): never a tenant, a subject, a key, a policy name or a
// raw path, so that what a client sends cannot add a series. Per-tenant
// figures are the dashboard's and /v1/usage's.
//
// The request path feeds children resolved from their labels once (at
// start, or at the first request of a route and status class), so that an
// answer adds to a counter or a histogram without a label lookup or an
// allocation.
//
// metrics imports only the Prometheus client.
package metrics

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the collectors the admission pipeline and the HTTP layer feed.
// All methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry
	// Decisions counts the admission pipeline's answers by outcome
	// (allowed, refused, degraded, error) and layer (the refusing one, or
	// none).
	Decisions *prometheus.CounterVec
	// StoreLatency times the admission pipeline's calls of the shared
	// counter store by store, operation and outcome; StoreErrors counts
	// those that failed (the store was down or too slow).
	StoreLatency *prometheus.HistogramVec
	StoreErrors  *prometheus.CounterVec
	Degraded     *prometheus.CounterVec
	// BreakerOpen is, by store, how many tenants' circuits are open.
	BreakerOpen *prometheus.GaugeVec
	// BodyBytes is the request body bytes the HTTP layer has let in and
	// not yet finished with (httpapi's bound on bodies in flight).
	BodyBytes prometheus.Gauge
	// BodiesRefused counts requests refused for want of room for their
	// body, by scope: "tenant" (a tenant's share of /v1 bodies), "instance"
	// (the tenants' total), "ip" (a keyless client's share of the other
	// bodies) or "keyless" (their total).
	BodiesRefused *prometheus.CounterVec
	// Conns is the connections an instance holds, by party: "keyless"
	// (no request on it has shown a key yet) or "tenant" (httpapi's
	// ConnShare; trusted proxies' connections are not counted).
	Conns *prometheus.GaugeVec
	// ConnsRefused counts connections closed for want of a place, by
	// scope: "ip" (the address's share), "instance" (the keyless total) or
	// "evicted" (an idle one of the largest holder, for a newcomer).
	ConnsRefused *prometheus.CounterVec
	// HTTPDuration times every HTTP request by method, route template and
	// status class (StatusClass).
	HTTPDuration *prometheus.HistogramVec
}

// Outcomes of Decisions.
const (
	OutcomeAllowed  = "allowed"
	OutcomeRefused  = "refused"
	OutcomeDegraded = "degraded"
	OutcomeError    = "error"
)

// LayerNone is the layer of a decision no layer refused.
const LayerNone = "none"

// The queues whose backlog Backlog reports.
const (
	// QueueUsageRows: usage counts (tenant, minute, key kind) waiting to be
	// written, a failed flush included.
	QueueUsageRows = "usage_rows"
	// QueueAuditFirstRefusals: first refusals waiting for the audit log.
	QueueAuditFirstRefusals = "audit_first_refusals"
	// QueueAuditRefusalCounts: hourly refusal counts waiting to be written.
	QueueAuditRefusalCounts = "audit_refusal_counts"
	// QueueAlertChecks: subjects waiting to be checked against their
	// policy's alert_after.
	QueueAlertChecks = "alert_checks"
	// QueueWebhooks: deliveries of outbound tenant webhooks not settled
	// (waiting, being sent, or waiting to be tried again), counted in the
	// outbox every few seconds: the same on every instance.
	QueueWebhooks = "webhooks_outbound"
)

// New returns a fresh set of collectors with the Go runtime's.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_decisions_total",
			Help: "Admission answers by outcome (allowed; refused by a layer; degraded: answered without the shared counter store, refused by a fail-closed policy or not; error: a key that does not authenticate) and layer (none, instance, ip, quota, allotment, sandbox, policy, inflight, auth).",
		}, []string{"outcome", "layer"}),
		StoreLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_counter_store_seconds",
			Help:    "Latency of the admission pipeline's calls of the shared counter store, by store (memory, postgres, redis), operation (check, acquire, renew, release, held, reset) and outcome (ok; unavailable: failed or too slow; canceled: the caller went away first; skipped: the tenant's circuit was open, no call made).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25},
		}, []string{"store", "operation", "outcome"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_counter_store_errors_total",
			Help: "Calls of the shared counter store that failed or passed their deadline, by store and operation (calls whose caller went away first are not counted).",
		}, []string{"store", "operation"}),
		Degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_degraded_answers_total",
			Help: "Answers given without the shared counter store, by layer.",
		}, []string{"layer"}),
		BreakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_counter_breaker_open",
			Help: "Tenants whose circuit breaker keeps their calls away from a failing counter store (one circuit per tenant), by store.",
		}, []string{"store"}),
		BodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_http_body_bytes_in_flight",
			Help: "Request body bytes admitted and not yet finished with: the most each body may hold, by its Content-Length or its route's bound.",
		}),
		Conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_http_connections",
			Help: "Connections held, by party: keyless (no request on it has shown an API key yet) or tenant.",
		}, []string{"party"}),
		ConnsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_http_connections_refused_total",
			Help: "Connections closed for want of a place: past the address's share (ip), past the keyless total (instance), or an idle one of the largest holder closed for a newcomer (evicted).",
		}, []string{"scope"}),
		BodiesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_http_bodies_refused_total",
			Help: "Requests refused because their body would pass a tenant's share (tenant), the tenants' total (instance), a keyless client's share (ip) or the keyless clients' total (keyless) of body bytes in flight.",
		}, []string{"scope"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_http_request_duration_seconds",
			Help:    "Time from a request reaching Tollgate's router to its answer, by method, route (the route's template, or unmatched) and status class (2xx, 3xx, 4xx, 5xx; 499: the client went away before its answer).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "status"}),
	}
	m.reg.MustRegister(m.Decisions, m.StoreLatency, m.StoreErrors, m.Degraded, m.BreakerOpen, m.BodyBytes, m.BodiesRefused, m.Conns, m.ConnsRefused, m.HTTPDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Backlog reports, as tollgate_backlog_items{queue="…"}, how many items
// wait in a queue of writes: pending is called at each scrape (never on a
// request's path) and must be safe for concurrent use and quick. It fails
// when queue is already reported.
func (m *Metrics) Backlog(queue string, pending func() int) error {
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "tollgate_backlog_items",
		Help:        "Items waiting in a queue of writes, by queue: usage_rows, audit_first_refusals, audit_refusal_counts, alert_checks, webhooks_outbound. A backlog that grows is a database that does not keep up.",
		ConstLabels: prometheus.Labels{"queue": queue},
	}, func() float64 { return float64(pending()) }))
}

// WebhooksDropped reports, as tollgate_webhook_deliveries_dropped, the
// deliveries of tenants' webhooks dropped because their endpoint had too
// many waiting: dropped is called at each scrape and must be safe for
// concurrent use and quick. It fails when called twice.
func (m *Metrics) WebhooksDropped(dropped func() int) error {
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tollgate_webhook_deliveries_dropped",
		Help: "Deliveries of tenants' webhooks not queued because their endpoint already had 1,000 waiting (status dropped), as kept in the outbox (40 days), counted every 5 s: the same on every instance. A rise is a receiver that fails under a stream of events.",
	}, func() float64 { return float64(dropped()) }))
}

// Status classes of HTTPDuration.
const (
	StatusInformational = iota
	StatusSuccess
	StatusRedirect
	StatusClientError
	StatusServerError
	// StatusClientGone is a request whose client went away before its
	// answer (nginx's 499).
	StatusClientGone
	statusClasses
)

// statusClassNames are the status label values, by class.
var statusClassNames = [statusClasses]string{"1xx", "2xx", "3xx", "4xx", "5xx", "499"}

// StatusClass returns the class of an HTTP status: 499 has a class of its
// own, and anything outside 100–599 counts as a server error.
func StatusClass(status int) int {
	switch {
	case status == 499:
		return StatusClientGone
	case status >= 100 && status < 600:
		return status/100 - 1
	}
	return StatusServerError
}

// Route times the requests of one route (one method and route template).
// Its children are resolved at the first request of each status class and
// kept, so that timing a request costs no lookup or allocation. It is safe
// for concurrent use.
type Route struct {
	vec           *prometheus.HistogramVec
	method, route string
	byClass       [statusClasses]atomicObserver
}

// NewRoute returns the timer of the requests of method on route.
func (m *Metrics) NewRoute(method, route string) *Route {
	return &Route{vec: m.HTTPDuration, method: method, route: route}
}

// Observe records one request answered with status after seconds.
func (r *Route) Observe(status int, seconds float64) {
	class := StatusClass(status)
	o := r.byClass[class].Load()
	if o == nil {
		o = &observer{r.vec.WithLabelValues(r.method, r.route, statusClassNames[class])}
		r.byClass[class].Store(o)
	}
	o.Observe(seconds)
}

// observer boxes a histogram child for an atomic pointer.
type observer struct{ prometheus.Observer }

type atomicObserver = atomic.Pointer[observer]

// Handler serves the collectors in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
