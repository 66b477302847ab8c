package gate

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/metrics"
)

// instruments are the metric children the pipeline feeds, resolved from
// their labels once, at New, so that a check adds to a counter without a
// label lookup.
type instruments struct {
	allowed                          prometheus.Counter
	authFail                         prometheus.Counter
	refused                          map[string]prometheus.Counter // by layer
	degraded                         map[string]prometheus.Counter // by layer
	storeOK, storeDown, storeSkipped prometheus.Observer
}

// layers are every layer a verdict can name.
var layers = []string{LayerInstance, LayerIP, LayerQuota, LayerAllotment, LayerSandbox, LayerPolicy, LayerInflight}

func newInstruments(m *metrics.Metrics) instruments {
	in := instruments{
		allowed:      m.Checks.WithLabelValues("allowed", "none"),
		authFail:     m.Checks.WithLabelValues("error", "auth"),
		refused:      make(map[string]prometheus.Counter, len(layers)),
		degraded:     make(map[string]prometheus.Counter, len(layers)),
		storeOK:      m.StoreLatency.WithLabelValues("ok"),
		storeDown:    m.StoreLatency.WithLabelValues("unavailable"),
		storeSkipped: m.StoreLatency.WithLabelValues("skipped"),
	}
	for _, l := range layers {
		in.refused[l] = m.Checks.WithLabelValues("refused", l)
		in.degraded[l] = m.Degraded.WithLabelValues(l)
	}
	return in
}

// answered counts one answer: allowed, or refused by layer.
func (in instruments) answered(allowed bool, layer string) {
	if allowed {
		in.allowed.Inc()
		return
	}
	in.refused[layer].Inc()
}
