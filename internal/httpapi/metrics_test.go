package httpapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pgcounter "github.com/tollgate/tollgate/internal/counter/postgres"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// scrape reads a's /metrics through its router and parses it with the
// Prometheus text parser, keeping Tollgate's own families.
func (a *tenantAPI) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for name := range fams {
		if !strings.HasPrefix(name, "tollgate_") {
			delete(fams, name)
		}
	}
	return fams
}

// labelsOf returns m's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// seriesValue returns the value of fams' series name{labels} (a histogram's
// count), and whether there is one.
func seriesValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		got := labelsOf(m)
		match := len(got) == len(labels)
		for k, v := range labels {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// seriesCount is the number of series of Tollgate's own families.
func seriesCount(fams map[string]*dto.MetricFamily) int {
	n := 0
	for _, f := range fams {
		n += len(f.GetMetric())
	}
	return n
}

// TestMetricsAfterTraffic sends every kind of request through the real
// router, gate and PostgreSQL counter store (cut once, for a degraded
// answer), then scrapes /metrics: each family an operator on call reads is
// there, with its labels and its counts.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	store, err := pgcounter.New(context.Background(), pgcounter.Config{DSN: proxied, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := newTenantAPIWith(t, dsn, apiOptions{store: store, storeName: "postgres"})
	key, _ := a.tenant(tenant.PlanPro)

	wantStatus(t, a.do(key, "PUT", "/v1/policies/one", `{"limit":1,"window":"1h"}`), 200)
	wantStatus(t, a.do(key, "PUT", "/v1/policies/open", `{"limit":1000000,"window":"1h","fail_mode":"open"}`), 200)
	wantStatus(t, a.do(key, "PUT", "/v1/policies/jobs", `{"limit":2,"algorithm":"concurrency"}`), 200)
	check := `{"items":[{"policy":"one","subject":"s"}]}`
	if m := a.do(key, "POST", "/v1/check", check).json(t); m["allowed"] != true {
		t.Fatalf("first check: %v", m)
	}
	if m := a.do(key, "POST", "/v1/check", check).json(t); m["allowed"] != false {
		t.Fatalf("second check of a limit of 1: %v", m)
	}
	wantStatus(t, a.do(key, "DELETE", "/v1/policies/one/subjects/s", ""), 204)
	r := a.do(key, "POST", "/v1/leases", `{"policy":"jobs","subject":"alice","ttl":"30s"}`)
	wantStatus(t, r, 200)
	id := r.json(t)["lease_id"].(string)
	wantStatus(t, a.do(key, "POST", "/v1/leases/"+id+"/renew", `{"ttl":"30s"}`), 200)
	wantStatus(t, a.do(key, "DELETE", "/v1/leases/"+id, ""), 204)
	wantStatus(t, a.do(key, "GET", "/v1/usage", ""), 200)
	wantStatus(t, a.do("tg_live_nope", "POST", "/v1/check", check), 401)
	if rec := plainRequest(a, "", "GET", "/no/such/page"); rec.Code != 404 {
		t.Fatalf("unknown page: %d", rec.Code)
	}
	// The counter store cut: a degraded answer, and the store's error.
	proxy.Cut()
	r = a.do(key, "POST", "/v1/check", `{"items":[{"policy":"open","subject":"s"}]}`)
	if m := r.json(t); m["degraded"] != true || m["allowed"] != true {
		t.Fatalf("check while the store is cut: %s", r.body)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}

	fams := a.scrape(t)
	// Each family, with the label names it must have.
	wantLabels := map[string][]string{
		"tollgate_decisions_total":               {"layer", "outcome"},
		"tollgate_counter_store_seconds":         {"operation", "outcome", "store"},
		"tollgate_counter_store_errors_total":    {"operation", "store"},
		"tollgate_counter_breaker_open":          {"store"},
		"tollgate_degraded_answers_total":        {"layer"},
		"tollgate_http_request_duration_seconds": {"method", "route", "status"},
		"tollgate_backlog_items":                 {"queue"},
		"tollgate_http_body_bytes_in_flight":     nil,
	}
	for name, want := range wantLabels {
		f := fams[name]
		if f == nil || len(f.GetMetric()) == 0 {
			t.Errorf("no family %s", name)
			continue
		}
		for _, m := range f.GetMetric() {
			var got []string
			for k := range labelsOf(m) {
				got = append(got, k)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s has labels %v, want %v", name, got, want)
			}
		}
	}

	// Counts: at least what the traffic above must have made.
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"tollgate_decisions_total", map[string]string{"outcome": "allowed", "layer": "none"}, 1},
		{"tollgate_decisions_total", map[string]string{"outcome": "refused", "layer": "policy"}, 1},
		{"tollgate_decisions_total", map[string]string{"outcome": "degraded", "layer": "none"}, 1},
		{"tollgate_decisions_total", map[string]string{"outcome": "error", "layer": "auth"}, 1},
		{"tollgate_degraded_answers_total", map[string]string{"layer": "policy"}, 1},
		{"tollgate_counter_store_seconds", map[string]string{"store": "postgres", "operation": "check", "outcome": "ok"}, 2},
		{"tollgate_counter_store_seconds", map[string]string{"store": "postgres", "operation": "check", "outcome": "unavailable"}, 1},
		{"tollgate_counter_store_seconds", map[string]string{"store": "postgres", "operation": "acquire", "outcome": "ok"}, 1},
		{"tollgate_counter_store_seconds", map[string]string{"store": "postgres", "operation": "renew", "outcome": "ok"}, 1},
		{"tollgate_counter_store_seconds", map[string]string{"store": "postgres", "operation": "release", "outcome": "ok"}, 1},
		{"tollgate_counter_store_seconds", map[string]string{"store": "postgres", "operation": "reset", "outcome": "ok"}, 1},
		{"tollgate_counter_store_errors_total", map[string]string{"store": "postgres", "operation": "check"}, 1},
		{"tollgate_counter_breaker_open", map[string]string{"store": "postgres"}, 0},
		{"tollgate_http_request_duration_seconds", map[string]string{"method": "POST", "route": "/v1/check", "status": "2xx"}, 3},
		{"tollgate_http_request_duration_seconds", map[string]string{"method": "POST", "route": "/v1/check", "status": "4xx"}, 1},
		{"tollgate_http_request_duration_seconds", map[string]string{"method": "PUT", "route": "/v1/policies/:name", "status": "2xx"}, 3},
		{"tollgate_http_request_duration_seconds", map[string]string{"method": "DELETE", "route": "/v1/leases/:id", "status": "2xx"}, 1},
		{"tollgate_http_request_duration_seconds", map[string]string{"method": "GET", "route": "/v1/usage", "status": "2xx"}, 1},
		{"tollgate_http_request_duration_seconds", map[string]string{"method": "GET", "route": "unmatched", "status": "4xx"}, 1},
		// The usage recorder is not running: what the checks metered waits.
		{"tollgate_backlog_items", map[string]string{"queue": "usage_rows"}, 1},
	} {
		got, ok := seriesValue(fams, c.name, c.labels)
		if !ok || got < c.min {
			t.Errorf("%s%v = %v (present %t), want at least %v", c.name, c.labels, got, ok, c.min)
		}
	}
}

// plainRequest serves one request without a body through a's router, with
// key when it is not empty, unchecked against the document.
func plainRequest(a *tenantAPI, key, method, target string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, req)
	return rec
}

// TestMetricLabelsStayBounded: what clients put in paths, subjects, policy
// names and keys, and how many tenants there are, adds no series. After one
// request of each kind, 1,000 more of each with distinct paths, subjects,
// policy names and keys, from 100 tenants, leave the number of series as it
// was.
func TestMetricLabelsStayBounded(t *testing.T) {
	t.Parallel()
	a := newTenantAPI(t, pgtest.New(t), nil)
	const tenants = 100
	keys := make([]string, tenants)
	for i := range keys {
		keys[i], _ = a.tenant(tenant.PlanPro)
	}
	for _, k := range keys {
		wantStatus(t, a.do(k, "PUT", "/v1/policies/open", `{"limit":1000000,"window":"1h"}`), 200)
	}
	round := func(i int) {
		t.Helper()
		k := keys[i%tenants]
		wantStatus(t, a.do(k, "POST", "/v1/check", fmt.Sprintf(`{"items":[{"policy":"open","subject":"user-%d"}]}`, i)), 200)
		wantStatus(t, a.do(k, "GET", fmt.Sprintf("/v1/policies/nope-%d", i), ""), 404)
		wantStatus(t, a.do(k, "DELETE", fmt.Sprintf("/v1/policies/open/subjects/user-%d", i), ""), 204)
		if rec := plainRequest(a, "", "GET", fmt.Sprintf("/page-%d/x", i)); rec.Code != 404 {
			t.Fatalf("unknown page: %d", rec.Code)
		}
		// A method of the client's choosing (with a key: without one, a
		// thousand would be refused as guesses of keys).
		if rec := plainRequest(a, k, fmt.Sprintf("M%d", i), "/v1/check"); rec.Code < 400 {
			t.Fatalf("method M%d: %d", i, rec.Code)
		}
	}
	round(0)
	a.scrape(t) // a scrape is timed once it is answered: its own series
	before := a.scrape(t)
	for i := 1; i <= 1000; i++ {
		round(i)
	}
	after := a.scrape(t)
	if b, n := seriesCount(before), seriesCount(after); n != b {
		for name, f := range after {
			if len(f.GetMetric()) != len(before[name].GetMetric()) {
				t.Errorf("%s: %d series, %d before", name, len(f.GetMetric()), len(before[name].GetMetric()))
				for _, m := range f.GetMetric() {
					t.Logf("%s%v", name, labelsOf(m))
				}
			}
		}
		t.Fatalf("%d series after 1,000 distinct requests of each kind, %d before", n, b)
	}
	if got, _ := seriesValue(after, "tollgate_http_request_duration_seconds", map[string]string{"method": "POST", "route": "/v1/check", "status": "2xx"}); got != 1001 {
		t.Errorf("checks timed: %v, want 1001", got)
	}
}

// TestClientGoingAwayIsNotAnError: a client that hangs up while its request
// waits on the database (stalled) is logged at debug level as "client went
// away", not as an error, and counted with status 499.
func TestClientGoingAwayIsNotAnError(t *testing.T) {
	t.Parallel()
	proxied, proxy := pgtest.Proxied(t, pgtest.New(t))
	var logs logbuf.Buffer
	a := newTenantAPIWith(t, proxied, apiOptions{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	key, _ := a.tenant(tenant.PlanPro)
	// The key and tenant are cached from here on: only the usage report
	// reads the database.
	wantStatus(t, a.do(key, "GET", "/v1/usage", ""), 200)

	// entered says that the request reached its route's handler.
	entered := make(chan struct{}, 1)
	a.e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Path() == "/v1/usage" {
				entered <- struct{}{}
			}
			return next(c)
		}
	})
	srv := httptest.NewServer(a.e)
	defer srv.Close()
	proxy.Stall()
	defer func() {
		if err := proxy.Restore(); err != nil {
			t.Error(err)
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/usage", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	done := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("client: %v, want its own cancellation", err)
	}
	// The request is done once it is timed (the first usage report is the
	// other one).
	usageAnswers := func(fams map[string]*dto.MetricFamily) (n float64) {
		for _, m := range fams["tollgate_http_request_duration_seconds"].GetMetric() {
			if l := labelsOf(m); l["route"] == "/v1/usage" {
				n += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return n
	}
	eventually.True(t, 10*time.Second, "the request's end", func() bool { return usageAnswers(a.scrape(t)) == 2 })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
			t.Errorf("logged: %s", line)
		}
	}
	if !strings.Contains(logs.String(), `level=DEBUG msg="client went away" method=GET path=/v1/usage`) {
		t.Errorf("no debug line for the client that went away:\n%s", logs.String())
	}
	if got, _ := seriesValue(a.scrape(t), "tollgate_http_request_duration_seconds", map[string]string{"method": "GET", "route": "/v1/usage", "status": "499"}); got != 1 {
		t.Errorf("requests of /v1/usage answered 499: %v, want 1", got)
	}
}
