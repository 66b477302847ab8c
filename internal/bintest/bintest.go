// Package bintest builds the tollgate binary for the tests that run it from
// the outside (blackbox, the dashboard's browser suite), once per test
// binary, and removes it when the tests end. It is test-only.
package bintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tollgate/tollgate/internal/pgtest"
)

// Main is a TestMain for tests that run the binary: it builds
// cmd/tollgate into a temporary folder, sets *binary to its path, runs m
// (pgtest.Run: the throwaway PostgreSQL stops after them), removes the
// folder and exits with m's code. The folder goes before os.Exit, which
// skips deferred calls.
func Main(m *testing.M, binary *string) {
	dir, err := os.MkdirTemp("", "tollgate-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binary = filepath.Join(dir, "tollgate")
	build := exec.Command("go", "build", "-o", *binary, "github.com/tollgate/tollgate/cmd/tollgate")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	code := 1
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tollgate:", err)
	} else {
		code = pgtest.Run(m)
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "bintest:", err)
	}
	os.Exit(code)
}
