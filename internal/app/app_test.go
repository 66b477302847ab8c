package app_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func config() app.Config {
	return app.Config{Addr: "127.0.0.1:0", CounterStore: "memory", Pepper: []byte("app test pepper"), ShutdownTimeout: 10 * time.Second}
}

// TestRunServesUntilCancelled: the built service answers /readyz, and Run
// returns nil once its context is cancelled, after the server stopped.
func TestRunServesUntilCancelled(t *testing.T) {
	a, err := app.New(t.Context(), config(), app.Deps{DSN: pgtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + a.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d, want 200", resp.StatusCode)
	}
	client.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if _, err := net.DialTimeout("tcp", a.Addr(), time.Second); err == nil {
		t.Errorf("%s still accepts connections after Run returned", a.Addr())
	}
}

// TestNewNamesTheBadAddress: an address that cannot be listened on stops
// New with an error naming TOLLGATE_ADDR, and Shutdown is not needed.
func TestNewNamesTheBadAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := config()
	cfg.Addr = ln.Addr().String()
	_, err = app.New(t.Context(), cfg, app.Deps{DSN: pgtest.New(t)})
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_ADDR") {
		t.Fatalf("New on a taken address: %v, want an error naming TOLLGATE_ADDR", err)
	}
}
