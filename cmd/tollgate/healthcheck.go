package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// healthcheckTimeout bounds the one request of `tollgate healthcheck`.
const healthcheckTimeout = 5 * time.Second

// loadAddrConfig reads TOLLGATE_ADDR and the log settings, all that
// `tollgate healthcheck` needs.
func loadAddrConfig(getenv func(string) string) (Config, error) {
	c := Config{Addr: cmp.Or(getenv("TOLLGATE_ADDR"), ":8080"), LogFormat: "text"}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return c, fmt.Errorf("TOLLGATE_ADDR %q: want host:port or :port", c.Addr)
	}
	return c, nil
}

// healthcheckCmd runs `tollgate healthcheck [--ready]`: one GET of this
// machine's instance's /healthz (the process is up) or, with --ready,
// /readyz (its stores answer), and an error unless it answers 200. It is
// the Docker image's HEALTHCHECK, which has no shell and no curl.
func healthcheckCmd(ctx context.Context, cfg Config, _ *slog.Logger, args []string, cio cliIO) error {
	const synopsis = "healthcheck [--ready]"
	fs := newFlags("healthcheck")
	ready := fs.Bool("ready", false, "ask /readyz rather than /healthz")
	rest, err := parseFlags(fs, args)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected %q", rest[0])
	}
	if err != nil {
		return usagef(synopsis, "healthcheck: %v", err)
	}
	u := "http://" + loopbackOf(cfg.Addr) + "/healthz"
	if *ready {
		u = "http://" + loopbackOf(cfg.Addr) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s answered %d: %s", u, resp.StatusCode, body)
	}
	fmt.Fprintf(cio.stdout, "%s", body)
	return nil
}

// loopbackOf is the address at which this machine reaches an instance
// listening on addr: the loopback interface when addr listens on every one.
func loopbackOf(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
