package blackbox

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// BenchmarkWebhooks measures outbound webhooks on one real instance and a
// receiver on the same machine (docs/benchmarks.md, Webhooks):
//
//   - ping-p50-ms, ping-p99-ms: from a POST /v1/webhooks/{id}/test to the
//     delivery's arrival, over 200 test events;
//   - alert-p50-ms, alert-p99-ms: from the check that crosses a policy's
//     alert_after to the arrival of its alert.triggered, over 200 alerts
//     (each waits for the alert recorder's flush, once a second);
//   - deliveries/s: what the instance sends to a fast receiver from a
//     backlog of 9,600 deliveries to 32 endpoints;
//   - b-p99-ms-quiet, b-p99-ms-a-hangs: tenant B's test events' p99 alone,
//     and while all five endpoints of tenant A hang with a backlog.
//
// It asserts nothing about time: a shared box moves from run to run.
//
//	go test -run '^$' -bench Webhooks -benchtime 1x ./blackbox/
func BenchmarkWebhooks(b *testing.B) {
	dsn := pgtest.New(b)
	in := start(b, dsn, patientStore, allowPrivate, manyTestSends)
	rcv := newReceiver(b)
	const tenants = 16
	var eps []hookEndpoint
	keys := make([]string, tenants)
	for tn := range tenants {
		keys[tn] = createTenant(b, dsn, "pro").LiveKey
		for n := range 2 {
			eps = append(eps, addEndpoint(b, in, keys[tn], rcv, fmt.Sprintf("/t%d/e%d", tn, n), "alert.triggered", "key.revoked"))
		}
	}
	for b.Loop() {
		p50, p99 := pingLatency(b, in, rcv, eps[:8], 200, 50*time.Millisecond)
		b.ReportMetric(ms(p50), "ping-p50-ms")
		b.ReportMetric(ms(p99), "ping-p99-ms")

		p50, p99 = alertLatency(b, in, rcv, keys[:8], 25)
		b.ReportMetric(ms(p50), "alert-p50-ms")
		b.ReportMetric(ms(p99), "alert-p99-ms")

		b.ReportMetric(throughput(b, dsn, rcv, 300), "deliveries/s")

		bEps := eps[:2]
		_, quiet := pingLatency(b, in, rcv, bEps, 100, 50*time.Millisecond)
		hangTenant(b, dsn, in, rcv)
		_, loud := pingLatency(b, in, rcv, bEps, 100, 50*time.Millisecond)
		b.ReportMetric(ms(quiet), "b-p99-ms-quiet")
		b.ReportMetric(ms(loud), "b-p99-ms-a-hangs")
	}
	b.ReportMetric(0, "ns/op")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentiles returns the median and the 99th percentile of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	return ds[len(ds)/2], ds[(len(ds)*99+99)/100-1]
}

// pingLatency sends n test events, one every gap, to the endpoints in
// turn, and returns the percentiles of request-to-arrival.
func pingLatency(b *testing.B, in *instance, rcv *receiver, eps []hookEndpoint, n int, gap time.Duration) (p50, p99 time.Duration) {
	sent := make(map[string]time.Time, n) // path and webhook-id → request sent
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(gap)
	for i := range n {
		<-tick.C
		wg.Go(func() {
			e := eps[i%len(eps)]
			at := time.Now()
			id := ping(b, in, e)
			mu.Lock()
			sent[e.path+" "+id] = at
			mu.Unlock()
		})
	}
	tick.Stop()
	wg.Wait()
	var lat []time.Duration
	eventually.NoError(b, 60*time.Second, "every test event received", func() error {
		for _, rc := range rcv.receipts() {
			if at, ok := sent[rc.key()]; ok {
				lat = append(lat, rc.start.Sub(at))
				delete(sent, rc.key())
			}
		}
		if len(sent) > 0 {
			return fmt.Errorf("%d test events not received", len(sent))
		}
		return nil
	})
	return percentiles(lat)
}

// alertLatency raises perTenant alerts in each tenant of keys, one at a
// time per tenant: each a check that refuses a new subject of a policy
// with alert_after 1, timed to the arrival of its alert.triggered.
func alertLatency(b *testing.B, in *instance, rcv *receiver, keys []string, perTenant int) (p50, p99 time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for tn, key := range keys {
		putPolicy(b, in, key, "sign-in", map[string]any{"limit": 1, "window": "1h", "alert_after": 1})
		prefix := fmt.Sprintf("/t%d/", tn)
		alerts := func() int {
			n := 0
			for _, rc := range rcv.receipts() {
				if rc.typ == "alert.triggered" && strings.HasPrefix(rc.path, prefix) {
					n++
				}
			}
			return n
		}
		wg.Go(func() {
			for i := range perTenant {
				before := alerts()
				at := time.Now()
				subject := fmt.Sprintf("bench-%d", i)
				if c := check(b, in, key, map[string]any{"policy": "sign-in", "subject": subject, "cost": 2}); c.status != 200 {
					b.Errorf("check: %d %s", c.status, c.body)
					return
				}
				// Both endpoints of the tenant listen: the first arrival.
				eventually.True(b, 30*time.Second, "alert.triggered received", func() bool { return alerts() > before })
				d := time.Since(at)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				// The other endpoint's copy, before the next alert.
				eventually.True(b, 30*time.Second, "alert.triggered received twice", func() bool { return alerts() >= before+2 })
			}
		})
	}
	wg.Wait()
	return percentiles(lat)
}

// throughput commits perTenant key.revoked events for every tenant in one
// transaction (two deliveries each) and returns the deliveries a second
// from the commit to the last arrival.
func throughput(b *testing.B, dsn string, rcv *receiver, perTenant int) float64 {
	before := len(rcv.receipts())
	total := int(queryInt(b, dsn, `SELECT count(*) FROM webhook_endpoints`)) * perTenant
	at := time.Now()
	sql(b, dsn, `INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
		SELECT t.id, 'key.revoked', '{}', 'bench:' || gen_random_uuid() FROM tenants AS t, generate_series(1, $1)`, perTenant)
	eventually.True(b, 5*time.Minute, "backlog delivered", func() bool { return len(rcv.receipts())-before >= total })
	return float64(total) / time.Since(at).Seconds()
}

// hangTenant makes a tenant A whose five endpoints hang, with a backlog of
// 100 events each, and waits until its deliveries hold its share of the
// instance's deliveries in flight (8 of 64; its endpoints could take 10).
func hangTenant(b *testing.B, dsn string, in *instance, rcv *receiver) {
	a := createTenant(b, dsn, "pro")
	for n := range 5 {
		path := fmt.Sprintf("/hang/e%d", n)
		rcv.hangOn(path)
		addEndpoint(b, in, a.LiveKey, rcv, path, "key.revoked")
	}
	sql(b, dsn, `INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
		SELECT $1, 'key.revoked', '{}', 'bench:' || gen_random_uuid() FROM generate_series(1, 100)`, a.TenantID)
	eventually.True(b, 10*time.Second, "A's deliveries hanging", func() bool {
		return queryInt(b, dsn, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = $1 AND status = 'sending'`, a.TenantID) == 8
	})
}
