package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestHealthcheck: `tollgate healthcheck` succeeds against a running
// instance (on /healthz, and on /readyz with --ready) and fails when none
// listens, as Docker's HEALTHCHECK needs.
func TestHealthcheck(t *testing.T) {
	dsn := pgtest.New(t)
	base, _, _ := startServer(t, map[string]string{"DATABASE_URL": dsn, "TOLLGATE_PEPPER": testPepper, "TOLLGATE_COUNTER_STORE": "memory"})
	port := base[strings.LastIndexByte(base, ':'):]
	check := func(addr string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"healthcheck"}, args...), envOf(map[string]string{"TOLLGATE_ADDR": addr}), &out, &bytes.Buffer{})
		return out.String(), err
	}
	// ":PORT" is how an instance in a container listens: on every interface.
	if out, err := check(port); err != nil || !strings.Contains(out, `"ok"`) {
		t.Fatalf("healthcheck of a running instance: %q, %v", out, err)
	}
	if out, err := check("0.0.0.0"+port, "--ready"); err != nil || !strings.Contains(out, `"ready"`) {
		t.Fatalf("healthcheck --ready of a running instance: %q, %v", out, err)
	}
	if _, err := check(bintest.FreePort(t)); err == nil {
		t.Fatal("healthcheck with no instance listening: no error")
	}
	if _, err := check(port, "--live"); err == nil || !strings.Contains(err.Error(), "usage: tollgate healthcheck [--ready]") {
		t.Fatalf("healthcheck --live: %v, want a usage error", err)
	}
}
