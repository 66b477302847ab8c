package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestReadyzWaitsForTheCounterStore: /readyz is 503 until the counter store
// has answered once, so that an orchestrator never routes to an instance
// that could only fail open; after that it follows the database alone, not
// the counter store's health (degraded mode answers its outages), and
// /healthz is 200 throughout.
func TestReadyzWaitsForTheCounterStore(t *testing.T) {
	t.Parallel()
	var storeUp, dbUp atomic.Bool
	dbUp.Store(true)
	var probes atomic.Int64
	e := New(Config{
		Logger: slog.New(slog.DiscardHandler),
		Ready: func(context.Context) error {
			if !dbUp.Load() {
				return errors.New("database down")
			}
			return nil
		},
		CounterReady: func(context.Context) error {
			probes.Add(1)
			if !storeUp.Load() {
				return errors.New("counter store down")
			}
			return nil
		},
	})
	get := func(path string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body struct{ Status string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %d %q: %v", path, rec.Code, rec.Body, err)
		}
		return rec.Code, body.Status
	}
	for _, step := range []struct {
		name      string
		store, db bool
		ready     int
		status    string
	}{
		{"the store has not answered", false, true, http.StatusServiceUnavailable, "counter store has not answered since start"},
		{"still not", false, true, http.StatusServiceUnavailable, "counter store has not answered since start"},
		{"it answers", true, true, http.StatusOK, "ready"},
		{"it fails after answering once", false, true, http.StatusOK, "ready"},
		{"the database fails", false, false, http.StatusServiceUnavailable, "database unavailable"},
		{"the database is back", false, true, http.StatusOK, "ready"},
	} {
		storeUp.Store(step.store)
		dbUp.Store(step.db)
		if code, status := get("/readyz"); code != step.ready || status != step.status {
			t.Errorf("%s: /readyz %d %q, want %d %q", step.name, code, status, step.ready, step.status)
		}
		if code, _ := get("/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d, want 200", step.name, code)
		}
	}
	if n := probes.Load(); n != 3 {
		t.Errorf("the counter store was asked %d times, want 3: never again once it answered", n)
	}
}
