package typescript

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// binary is the tollgate built from this tree for the tests.
var binary string

func TestMain(m *testing.M) {
	// Node.js is a requirement of this package's tests, not an option: a
	// machine without it fails here rather than passing with nothing run.
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "clients/typescript: %s not found on PATH: install Node.js 20 or later (scripts/deps.sh node)\n", tool)
			os.Exit(1)
		}
	}
	bintest.Main(m, &binary)
}

const pepper = "tsclient-pepper-0123456789abcdef0123456789"

// TestNodeSuite runs the package's tests (test/*.test.js) with node --test
// against a real Tollgate: the client in Node.js, the Hono middleware in a
// Hono app, the guard inside workerd, the Next.js helper in a built Next.js
// app, the packed tarball in an app outside the tree. Before them: npm ci
// when the lock changed, the OpenAPI types checked against the document,
// the package built and every test file type-checked with tsc --strict.
func TestNodeSuite(t *testing.T) {
	dsn := pgtest.New(t)
	addr := startTollgate(t, dsn)
	base := "http://" + addr

	big := createTenant(t, dsn, "enterprise")
	// The starter plan of this throwaway database allows 3 calls a minute:
	// the tests reach Tollgate's own ceiling with a few calls.
	cli(t, dsn, nil, "plans", "set", "starter", "--quota-per-minute", "3", "--quota-per-hour", "1000")
	tiny := createTenant(t, dsn, "starter")
	putPolicy(t, base, tiny.LiveKey, "tiny", `{"limit":1000,"window":"1h"}`)

	slow := faultnet.New(t, addr)
	slow.Delay(300 * time.Millisecond) // a round trip takes 600 ms and more: past the 100 ms timeout
	hung := faultnet.New(t, addr)
	hung.Stall()

	npmCI(t)
	// src/openapi.ts is generated from the OpenAPI document; `make generate`
	// writes it anew after the document changes.
	if out, err := exec.Command("npm", "run", "--silent", "check-generated").CombinedOutput(); err != nil {
		t.Fatalf("src/openapi.ts differs from internal/httpapi/openapi.json (run make generate): %v\n%s", err, out)
	}
	run(t, "npm", "run", "--silent", "build")
	run(t, "npx", "tsc", "-p", "test/tsconfig.json")

	env := append(os.Environ(),
		"TOLLGATE_URL="+base,
		"TOLLGATE_KEY="+big.LiveKey,
		"TOLLGATE_TINY_KEY="+tiny.LiveKey,
		"TOLLGATE_TINY_POLICY=tiny",
		"TOLLGATE_DOWN_URL=http://"+closedPort(t),
		"TOLLGATE_SLOW_URL=http://"+slow.Addr(),
		"TOLLGATE_HUNG_URL=http://"+hung.Addr(),
		"NEXT_TELEMETRY_DISABLED=1",
	)
	// The test files by name: given a folder, node --test would run every
	// .js under it, the Next.js build's and the Worker's included.
	files, err := filepath.Glob("test/*.test.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/*.test.js: %v", err)
	}
	cmd := exec.Command("node", append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, files...)...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node --test:\n%s", out.String())
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}

// startTollgate runs `tollgate serve` on dsn and returns its address once ready.
func startTollgate(t *testing.T, dsn string) string {
	t.Helper()
	addr := closedPort(t)
	logs := &logbuf.Buffer{}
	cmd := exec.Command(binary, "serve")
	cmd.Env = environ(dsn, "TOLLGATE_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("tollgate at %s did not stop on SIGINT", addr)
		}
		if t.Failed() {
			t.Logf("log of tollgate:\n%s", logs.String())
		}
	})
	eventually.NoError(t, 30*time.Second, "tollgate ready", func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		return nil
	})
	return addr
}

func environ(dsn string, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dsn,
		"TOLLGATE_PEPPER=" + pepper,
		"TOLLGATE_LOG_FORMAT=text",
	}, extra...)
}

// closedPort returns a loopback address where nothing listens: a Tollgate
// that is stopped.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type tenant struct {
	TenantID string `json:"tenant_id"`
	LiveKey  string `json:"live_key"`
}

func createTenant(t *testing.T, dsn, plan string) tenant {
	t.Helper()
	var nt tenant
	cli(t, dsn, &nt, "tenants", "create", "--name", "tsclient "+plan, "--plan", plan)
	if !strings.HasPrefix(nt.LiveKey, "tg_live_") {
		t.Fatalf("tenants create: %+v", nt)
	}
	return nt
}

// cli runs a tollgate command and decodes its one JSON line into v.
func cli(t *testing.T, dsn string, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = environ(dsn)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tollgate %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	if v != nil {
		if err := json.Unmarshal(out.Bytes(), v); err != nil {
			t.Fatalf("tollgate %s printed %q: %v", strings.Join(args, " "), out.String(), err)
		}
	}
}

func putPolicy(t *testing.T, base, key, name, body string) {
	t.Helper()
	req, err := http.NewRequest("PUT", base+"/v1/policies/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT policy %s: %d", name, resp.StatusCode)
	}
}

// npmCI installs the locked dev dependencies when node_modules is missing
// or was installed from another package-lock.json.
func npmCI(t *testing.T) {
	t.Helper()
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join("node_modules", ".tollgate-lock-sha256")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return
	}
	run(t, "npm", "ci", "--no-audit", "--no-fund")
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs a command in the package's folder and fails the test with its
// output when it fails.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	started := time.Now()
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(started).Round(10*time.Millisecond))
}
