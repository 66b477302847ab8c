package gate_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/logbuf"
)

// TestLimiterCountsLocallyWhileTheStoreIsDown: a Limiter counts in the
// shared store while it answers; while it is unavailable, in this
// instance's memory, where the rule still holds, and it says so in its log.
// With neither store, it refuses to answer.
func TestLimiterCountsLocallyWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	shared := &failingFor{Store: memory.New(memory.Config{}), group: "down"}
	local := memory.New(memory.Config{})
	t.Cleanup(func() { shared.Store.Close(); local.Close() })
	logs := &logbuf.Buffer{}
	l := gate.NewLimiter("test limits", shared, local, slog.New(slog.NewTextHandler(logs, nil)))
	rule := []gate.Rule{{Key: "k", Limit: 2, Window: time.Minute}}
	for _, group := range []string{"up", "down"} {
		for i := range 3 {
			ds, err := l.Check(t.Context(), gate.Limits{Group: group, Rules: rule})
			if err != nil {
				t.Fatalf("%s, request %d: %v", group, i+1, err)
			}
			if want := i < 2; ds[0].Allowed != want || (!want && ds[0].RetryAfter <= 0) {
				t.Errorf("%s, request %d: %+v, want allowed %t", group, i+1, ds[0], want)
			}
		}
	}
	if shared.calls.Load() != 3 {
		t.Errorf("calls of the failing group: %d, want 3", shared.calls.Load())
	}
	if n := strings.Count(logs.String(), "test limits: counter store unavailable, counting in this instance's memory"); n != 3 {
		t.Errorf("%d fallback lines logged, want 3:\n%s", n, logs)
	}
	if _, err := gate.NewLimiter("no store", nil, nil, nil).Check(t.Context(), gate.Limits{Rules: rule}); !errors.Is(err, gate.ErrStoreUnavailable) {
		t.Errorf("no store: %v, want ErrStoreUnavailable", err)
	}
}
