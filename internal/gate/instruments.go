package gate

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/admission"
	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/metrics"
)

// instruments are the metric children the pipeline feeds, resolved from
// their labels once, at New, so that a check adds to a counter without a
// label lookup or an allocation.
type instruments struct {
	allowed  prometheus.Counter
	authFail prometheus.Counter
	refused  map[string]prometheus.Counter // by layer
	// degradedAllowed and degradedRefused count the answers given without
	// the shared store (tollgate_decisions_total, outcome degraded); a
	// degraded answer refuses only by a fail-closed policy.
	degradedAllowed, degradedRefused prometheus.Counter
	degraded                         map[string]prometheus.Counter // tollgate_degraded_answers_total, by layer
	store                            [storeOps]storeInstruments
}

// storeOp is an operation of the shared counter store, a label value of
// tollgate_counter_store_seconds.
type storeOp int

const (
	opCheck storeOp = iota
	opAcquire
	opRenew
	opRelease
	opHeld
	opReset
	opReserve
	opSettle
	opCharge
	storeOps
)

var storeOpNames = [storeOps]string{"check", "acquire", "renew", "release", "held", "reset", "reserve", "settle", "charge"}

// storeInstruments time one operation of the shared store.
type storeInstruments struct {
	ok, down, canceled, skipped prometheus.Observer
	errors                      prometheus.Counter
}

// layers are every layer a verdict can name.
var layers = []string{admission.LayerInstance, admission.LayerIP, admission.LayerQuota, admission.LayerAllotment, admission.LayerSandbox, admission.LayerPolicy, admission.LayerInflight}

func newInstruments(m *metrics.Metrics, store string) instruments {
	in := instruments{
		allowed:         m.Decisions.WithLabelValues(metrics.OutcomeAllowed, metrics.LayerNone),
		authFail:        m.Decisions.WithLabelValues(metrics.OutcomeError, "auth"),
		degradedAllowed: m.Decisions.WithLabelValues(metrics.OutcomeDegraded, metrics.LayerNone),
		degradedRefused: m.Decisions.WithLabelValues(metrics.OutcomeDegraded, admission.LayerPolicy),
		refused:         make(map[string]prometheus.Counter, len(layers)),
		degraded:        make(map[string]prometheus.Counter, len(layers)),
	}
	for _, l := range layers {
		in.refused[l] = m.Decisions.WithLabelValues(metrics.OutcomeRefused, l)
		in.degraded[l] = m.Degraded.WithLabelValues(l)
	}
	for op, name := range storeOpNames {
		in.store[op] = storeInstruments{
			ok:       m.StoreLatency.WithLabelValues(store, name, "ok"),
			down:     m.StoreLatency.WithLabelValues(store, name, "unavailable"),
			canceled: m.StoreLatency.WithLabelValues(store, name, "canceled"),
			skipped:  m.StoreLatency.WithLabelValues(store, name, "skipped"),
			errors:   m.StoreErrors.WithLabelValues(store, name),
		}
	}
	return in
}

// answered counts one answer that no ceiling refused: allowed, or refused
// by the tenant's policies; degraded when the shared store was not asked.
func (in instruments) answered(allowed, degraded bool) {
	switch {
	case degraded && allowed:
		in.degradedAllowed.Inc()
	case degraded:
		in.degradedRefused.Inc()
	case allowed:
		in.allowed.Inc()
	default:
		in.refused[admission.LayerPolicy].Inc()
	}
}

// storeFailed reports whether err, returned by a store call made under
// ctx, says that the store failed: not the caller's malformed request, an
// answer such as "no such lease" or "settled already", or a caller that
// went away.
func storeFailed(ctx context.Context, err error) bool {
	return err != nil && !errors.Is(err, counter.ErrInvalid) && !errors.Is(err, counter.ErrNoLease) &&
		!errors.Is(err, counter.ErrNoReservation) && !errors.Is(err, counter.ErrSettled) && !callerGone(ctx)
}

// callerGone reports whether ctx's caller went away (its client hung up).
func callerGone(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

// timed records a call of op that started at start and returned err.
func (in *instruments) timed(ctx context.Context, op storeOp, start time.Time, err error) {
	s := &in.store[op]
	took := time.Since(start).Seconds()
	switch {
	case err != nil && callerGone(ctx):
		s.canceled.Observe(took)
	case storeFailed(ctx, err):
		s.errors.Inc()
		s.down.Observe(took)
	default:
		s.ok.Observe(took)
	}
}

// storeCall makes one call of the shared store that needs no circuit
// breaker (renewals, releases, resets, reads of leases held), timed.
func (g *Gate) storeCall(ctx context.Context, op storeOp, call func() error) error {
	start := time.Now()
	err := call()
	g.met.timed(ctx, op, start, err)
	if storeFailed(ctx, err) {
		g.logCallFailed(ctx, op, start, err)
	}
	return err
}

// logCallFailed logs a failed store call of op at most once a second: the
// 503 it becomes tells its client only that the store was unavailable.
func (g *Gate) logCallFailed(ctx context.Context, op storeOp, start time.Time, err error) {
	g.logMu.Lock()
	now := time.Now()
	due := now.Sub(g.lastCall) >= time.Second
	if due {
		g.lastCall = now
	}
	g.logMu.Unlock()
	if due {
		g.cfg.Logger.WarnContext(ctx, "counter store call failed", "op", storeOpNames[op], "took", now.Sub(start).Round(time.Millisecond), "err", err)
	}
}
