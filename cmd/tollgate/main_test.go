package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func status(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startServer runs `tollgate serve` in-process with env and returns its base
// URL, its log, and a function that stops it and returns run's error.
func startServer(t *testing.T, env map[string]string) (string, *logbuf.Buffer, func() error) {
	t.Helper()
	addr := bintest.FreePort(t)
	env["TOLLGATE_ADDR"] = addr
	logs := &logbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, envOf(env), &bytes.Buffer{}, logs) }()
	base := "http://" + addr
	eventually.True(t, 30*time.Second, "server up", func() bool {
		select {
		case err := <-done:
			t.Fatalf("server exited: %v\n%s", err, logs)
		default:
		}
		return status(t, base+"/healthz") == http.StatusOK
	})
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("server did not stop within 30 s")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return base, logs, stop
}

func TestServeHealthReadinessAndGracefulStop(t *testing.T) {
	dsn := pgtest.New(t)
	proxied, proxy := pgtest.Proxied(t, dsn)
	for _, store := range []string{"postgres", "memory"} {
		t.Run(store, func(t *testing.T) {
			base, logs, stop := startServer(t, map[string]string{
				"DATABASE_URL":           proxied,
				"TOLLGATE_PEPPER":        testPepper,
				"TOLLGATE_COUNTER_STORE": store,
			})
			if got := status(t, base+"/readyz"); got != http.StatusOK {
				t.Fatalf("/readyz: %d, want 200", got)
			}
			if got := status(t, base+"/"); got != http.StatusOK {
				t.Fatalf("/: %d, want 200", got)
			}
			if got := status(t, base+"/no-such-page"); got != http.StatusNotFound {
				t.Fatalf("/no-such-page: %d, want 404", got)
			}
			// The wiring of the metrics: the store's name, and every
			// queue of writes.
			scraped := scrapeText(t, base)
			for _, want := range []string{
				`tollgate_counter_breaker_open{store="` + store + `"} 0`,
				`tollgate_backlog_items{queue="usage_rows"}`,
				`tollgate_backlog_items{queue="audit_first_refusals"}`,
				`tollgate_backlog_items{queue="audit_refusal_counts"}`,
				`tollgate_backlog_items{queue="alert_checks"}`,
				`tollgate_backlog_items{queue="webhooks_outbound"}`,
				`tollgate_webhook_deliveries_dropped 0`,
				`tollgate_http_request_duration_seconds_count{method="GET",route="/readyz",status="2xx"}`,
			} {
				if !strings.Contains(scraped, want) {
					t.Errorf("/metrics has no %s", want)
				}
			}
			proxy.Cut()
			if got := status(t, base+"/readyz"); got != http.StatusServiceUnavailable {
				t.Fatalf("/readyz with the database cut off: %d, want 503", got)
			}
			if got := status(t, base+"/healthz"); got != http.StatusOK {
				t.Fatalf("/healthz with the database cut off: %d, want 200 (the process is up)", got)
			}
			if err := proxy.Restore(); err != nil {
				t.Fatal(err)
			}
			eventually.True(t, 10*time.Second, "/readyz 200 after the database came back", func() bool {
				return status(t, base+"/readyz") == http.StatusOK
			})
			if err := stop(); err != nil {
				t.Fatalf("graceful stop: %v", err)
			}
			if !strings.Contains(logs.String(), "tollgate stopped") {
				t.Fatalf("no clean stop in the log:\n%s", logs)
			}
			if strings.Contains(logs.String(), testPepper) {
				t.Fatalf("the log shows the pepper")
			}
		})
	}
}

// scrapeText returns the server's /metrics.
func scrapeText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func TestServeRefusesBadConfig(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"serve"}, envOf(map[string]string{"TOLLGATE_DEV": "1", "TOLLGATE_COUNTER_STORE": "redis"}), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("got %v, want an error naming REDIS_URL", err)
	}
}

func TestMigrateCommand(t *testing.T) {
	dsn := pgtest.New(t)
	var out bytes.Buffer
	env := envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_DEV": "1"})
	if err := run(context.Background(), []string{"migrate", "version"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"dirty":false`) || strings.Contains(out.String(), `"version":0`) {
		t.Fatalf("migrate version on a migrated database: %s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"migrate", "sideways"}, env, &out, &bytes.Buffer{}); err == nil {
		t.Fatalf("migrate sideways: no error")
	}
}

// TestServeDemo: `serve --demo` seeds a tenant whose printed curl line works,
// and its traffic shows up in the tenant's usage.
func TestServeDemo(t *testing.T) {
	dsn := pgtest.New(t)
	addr := bintest.FreePort(t)
	out := &logbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--demo"}, envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_DEV": "1", "TOLLGATE_ADDR": addr, "TOLLGATE_DATA_DIR": t.TempDir()}), out, &bytes.Buffer{})
	}()
	t.Cleanup(func() { cancel(); <-done })
	var key string
	eventually.NoError(t, 30*time.Second, "demo key printed", func() error {
		for _, line := range strings.Split(out.String(), "\n") {
			if k, ok := strings.CutPrefix(strings.TrimSpace(line), "live key: "); ok {
				key = k
				return nil
			}
		}
		return fmt.Errorf("printed so far:\n%s", out)
	})
	if !strings.Contains(out.String(), "curl -s -X POST http://"+addr+"/v1/check") {
		t.Fatalf("no curl line for this server:\n%s", out)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/check", strings.NewReader(`{"items":[{"policy":"sign-in-ip","subject":"203.0.113.7"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the printed curl line answers %d", resp.StatusCode)
	}
}

// TestMigrateDownToZeroAndUp walks the schema all the way down and back up.
func TestMigrateDownToZeroAndUp(t *testing.T) {
	dsn := pgtest.New(t)
	env := envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_DEV": "1"})
	var out bytes.Buffer
	for range 100 {
		out.Reset()
		if err := run(context.Background(), []string{"migrate", "down"}, env, &out, &bytes.Buffer{}); err != nil {
			t.Fatalf("migrate down: %v", err)
		}
		if strings.Contains(out.String(), `"version":0`) {
			break
		}
	}
	if !strings.Contains(out.String(), `"version":0`) {
		t.Fatalf("not at version 0 after 100 downs: %s", out.String())
	}
	// Once more at 0: nothing to do, no error.
	if err := run(context.Background(), []string{"migrate", "down"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("migrate down at version 0: %v", err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"migrate", "up"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	if strings.Contains(out.String(), `"version":0`) || !strings.Contains(out.String(), `"dirty":false`) {
		t.Fatalf("after up: %s", out.String())
	}
}

// TestDevServesOnLoopback: with TOLLGATE_DEV, whose pepper is public, an
// address without a host listens on 127.0.0.1 only, not on every interface
// (make run's `serve --demo`, issue 37 item 9). It serves on a free port,
// named ":PORT" as the default ":8080" is; TestDevAddrDefault holds the
// default itself.
func TestDevServesOnLoopback(t *testing.T) {
	dsn := pgtest.New(t)
	port := strings.TrimPrefix(bintest.FreePort(t), "127.0.0.1:")
	out, logs := &logbuf.Buffer{}, &logbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--demo"}, envOf(map[string]string{"DATABASE_URL": dsn, "TOLLGATE_DEV": "1", "TOLLGATE_ADDR": ":" + port, "TOLLGATE_DATA_DIR": t.TempDir()}), out, logs)
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, 30*time.Second, "server up on 127.0.0.1:"+port, func() bool {
		return status(t, "http://127.0.0.1:"+port+"/healthz") == http.StatusOK
	})
	// The listener's own address, as serve logs it: [::]:PORT when it
	// listens on every interface.
	if want := "addr=127.0.0.1:" + port + " "; !strings.Contains(logs.String(), want) {
		t.Errorf("serve's log has no %q:\n%s", want, logs)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), port), 2*time.Second); err == nil {
			c.Close()
			t.Errorf("the demo answers on %s, not only on the loopback", net.JoinHostPort(ipn.IP.String(), port))
		}
	}
}
