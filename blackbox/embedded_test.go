package blackbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
)

// embeddedEnv is the environment of a process using the embedded PostgreSQL
// in data: no DATABASE_URL.
func embeddedEnv(data string, extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"TOLLGATE_DATA_DIR=" + data,
		"TOLLGATE_PEPPER=" + pepper,
		"TOLLGATE_LOG_FORMAT=text",
	}
	return append(env, extra...)
}

// dataDir is a data folder the user postgres can reach when tests run as
// root (t.TempDir's parent is 0700).
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tollgate-data-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// embeddedCLI runs a tollgate command on the embedded PostgreSQL in data
// and returns what it printed, or its error and log.
func embeddedCLI(data string, args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = embeddedEnv(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("tollgate %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// atOnce runs each command line in its own process, all at once, and fails
// the test for any that fails.
func atOnce(t *testing.T, data string, lines ...[]string) []string {
	t.Helper()
	outs := make([]string, len(lines))
	errs := make([]error, len(lines))
	var wg sync.WaitGroup
	for i, args := range lines {
		wg.Go(func() { outs[i], errs[i] = embeddedCLI(data, args...) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return outs
}

func noServerLeft(t *testing.T, data string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(data, "pgdata", "postmaster.pid")); err == nil {
		t.Errorf("postmaster.pid still in %s: a postgres outlived every tollgate process", data)
	}
}

// TestOperatorCommandsBesideEmbeddedServer is the README's first hour: `make
// run` serves on the embedded PostgreSQL and `tollgate tenants create`, in
// another process, uses that same server instead of failing on its lock.
func TestOperatorCommandsBesideEmbeddedServer(t *testing.T) {
	data := dataDir(t)
	srv := bintest.Start(t, binary, embeddedEnv(data))
	base := srv.URL

	out, err := embeddedCLI(data, "tenants", "create", "--name", "beside make run")
	if err != nil {
		t.Fatal(err)
	}
	var nt newTenant
	if err := json.Unmarshal([]byte(out), &nt); err != nil {
		t.Fatalf("tenants create printed %q: %v", out, err)
	}
	// The server sees the tenant the command made: one database.
	if c := do(t, "GET", base+"/v1/usage", nt.LiveKey, nil); c.status != http.StatusOK {
		t.Fatalf("GET /v1/usage with the new key: %d %s", c.status, c.body)
	}

	// Two commands at once beside the server.
	for _, out := range atOnce(t, data, []string{"tenants", "list"}, []string{"tenants", "list"}) {
		if !strings.Contains(out, nt.TenantID) {
			t.Errorf("tenants list beside the server printed %q, without %s", out, nt.TenantID)
		}
	}
	if err := ready(base); err != nil {
		t.Fatalf("after the commands left, the server's database: %v", err)
	}

	if err := srv.Stop(); err != nil {
		t.Fatalf("server exit: %v", err)
	}
	noServerLeft(t, data)
}

// TestTwoOperatorCommandsAtOnce: with no server running, two commands
// started together share one embedded PostgreSQL instead of racing to start
// two on the same data, and stop it when both are done.
func TestTwoOperatorCommandsAtOnce(t *testing.T) {
	data := dataDir(t)
	atOnce(t, data,
		[]string{"tenants", "create", "--name", "first at once"},
		[]string{"tenants", "create", "--name", "second at once"})
	noServerLeft(t, data)
	out, err := embeddedCLI(data, "tenants", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first at once", "second at once"} {
		if !strings.Contains(out, name) {
			t.Errorf("tenants list = %q, without %q", out, name)
		}
	}
	noServerLeft(t, data)
}

// TestUnknownCommandExits2: the process prints the error and one hint line
// and exits 2, the exit status of a command line it cannot read.
func TestUnknownCommandExits2(t *testing.T) {
	cmd := exec.Command(binary, "tenant", "create")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("tollgate tenant create: %v, want exit status 2", err)
	}
	if want := "tollgate: unknown command \"tenant\"\nrun 'tollgate help' for the commands\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
