package typescript

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/solo"
)

// binary is the tollgate built from this tree for the tests.
var binary string

// install is npm ci, which TestMain starts before anything else: it takes
// longest, and needs nothing that building Tollgate or starting it makes.
var install = struct {
	done chan struct{}
	step step
}{done: make(chan struct{})}

// epoch is when TestMain began: each phase logs when it began after it.
var epoch = time.Now()

func TestMain(m *testing.M) {
	// Alone on the machine, first thing: npm ci, tsc and a Next.js build
	// load both cores, beside its tests on Node.js, workerd, Next.js, Bun
	// and Deno.
	release, err := solo.Exclusive()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Node.js is a requirement of this package's tests, not an option: a
	// machine without it fails here rather than passing with nothing run.
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "clients/typescript: %s not found on PATH: install Node.js 20 or later (scripts/deps.sh node)\n", tool)
			os.Exit(1)
		}
	}
	go func() {
		install.step = npmCI()
		close(install.done)
	}()
	// The binary's folder goes also when its build fails.
	code := bintest.Run(m, &binary)
	<-install.done // npm is not left running after the tests
	release()
	os.Exit(code)
}

const pepper = "tsclient-pepper-0123456789abcdef0123456789"

// TestNodeSuite runs the package's tests (test/*.test.js), each file with
// node --test, against a real Tollgate: the client in Node.js, the Hono
// middleware in a Hono app, the guard inside workerd, the Next.js helper in
// two built Next.js apps (proxy.ts and middleware.ts), the package on Bun
// and Deno, the packed tarball in an app outside the tree, the client
// against servers that answer the wrong way. Before them: npm ci when the lock changed, the
// OpenAPI types checked against the document, the package built and every
// test file type-checked with tsc --strict.
//
// What does not wait for another runs beside it, and every phase's wall and
// CPU time is logged: the suite runs last in make test, on two cores.
func TestNodeSuite(t *testing.T) {
	started := time.Now()
	t.Logf("phase go build tollgate: %s wall", started.Sub(epoch).Round(10*time.Millisecond))
	defer func() {
		t.Logf("phase total: %s wall since TestMain began", time.Since(epoch).Round(10*time.Millisecond))
	}()
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
	t.Logf("phase tollgate and tenants: %s wall", time.Since(started).Round(10*time.Millisecond))

	<-install.done
	ci := install.step
	ci.log(t)
	if ci.err != nil {
		t.Fatalf("%s: %v\n%s", ci.name, ci.err, ci.out)
	}

	// The generated types are checked while the package builds: both need
	// only what npm installed. src/openapi.ts is generated from the OpenAPI
	// document; `make generate` writes it anew after the document changes.
	steps := pool(2,
		command{name: "check-generated", args: []string{"npm", "run", "--silent", "check-generated"}},
		command{name: "tsc build", args: []string{tsc, "-p", "tsconfig.json"}},
	)
	for _, s := range steps {
		s.log(t)
	}
	if err := steps[0].err; err != nil {
		t.Errorf("src/openapi.ts differs from internal/httpapi/openapi.json (run make generate): %v\n%s", err, steps[0].out)
	}
	if err := steps[1].err; err != nil {
		t.Fatalf("tsc -p tsconfig.json: %v\n%s", err, steps[1].out)
	}

	env := append(os.Environ(),
		"TOLLGATE_URL="+base,
		"TOLLGATE_KEY="+big.LiveKey,
		"TOLLGATE_TINY_KEY="+tiny.LiveKey,
		"TOLLGATE_TINY_POLICY=tiny",
		"TOLLGATE_DOWN_URL=http://"+bintest.FreePort(t),
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
	nodeTest := func(file string) command {
		return command{name: file, args: []string{"node", "--test", "--test-reporter=spec", file}, env: env, test: true}
	}
	// On the built package, three at a time, the longest first: the
	// Next.js apps (next build loads both cores for a while), the type check
	// of the tests, npm pack, then the files that mostly wait for Tollgate.
	// Three, not two: those waits leave a core idle.
	first := map[string]int{"next.test.js": 1, "tsc tests": 2, "pack.test.js": 3, "workers.test.js": 4}
	cmds := []command{{name: "tsc tests", args: []string{tsc, "-p", "test/tsconfig.json"}}}
	for _, f := range files {
		cmds = append(cmds, nodeTest(f))
	}
	rank := func(c command) int {
		if r, ok := first[filepath.Base(c.name)]; ok {
			return r
		}
		return len(first) + 1
	}
	slices.SortStableFunc(cmds, func(a, b command) int { return rank(a) - rank(b) })
	var total counts
	for _, s := range pool(3, cmds...) {
		s.log(t)
		if s.command.test {
			c := countsOf(s.out)
			total.add(c)
			t.Logf("node --test %s: %s\n%s", s.name, c, s.out)
		}
		if s.err != nil {
			t.Errorf("%s: %v\n%s", s.name, s.err, s.out)
		}
	}
	t.Logf("node --test, %d files: %s", len(files), total)
	if total.tests == 0 || total.pass != total.tests {
		t.Errorf("node --test: %s", total)
	}
}

// tsc is the TypeScript compiler npm installed, run without npx's start-up.
var tsc = filepath.Join("node_modules", ".bin", "tsc")

// command is one process of the suite, run in the package's folder.
type command struct {
	name string
	args []string
	env  []string // nil: the test's own
	test bool     // a node --test run, whose counts are summed
}

// step is a command that ran: its output and error, its wall and CPU time.
type step struct {
	command
	out       []byte
	err       error
	began     time.Time
	wall, cpu time.Duration
	skipped   string // why it did not run
}

func (c command) run() step {
	started := time.Now()
	cmd := exec.Command(c.args[0], c.args[1:]...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	s := step{command: c, out: out, err: err, began: started, wall: time.Since(started)}
	if cmd.ProcessState != nil {
		// The process's own and that of every child it waited for.
		s.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return s
}

func (s step) log(t *testing.T) {
	t.Helper()
	if s.skipped != "" {
		t.Logf("phase %s: skipped, %s", s.name, s.skipped)
		return
	}
	t.Logf("phase %s: at %s, %s wall, %s CPU", s.name, s.began.Sub(epoch).Round(100*time.Millisecond),
		s.wall.Round(10*time.Millisecond), s.cpu.Round(10*time.Millisecond))
}

// pool runs cmds, n at a time in the order given, and returns their steps
// in that order.
func pool(n int, cmds ...command) []step {
	out := make([]step, len(cmds))
	next := make(chan int)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = cmds[i].run()
			}
		}()
	}
	for i := range cmds {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// counts are the totals node --test prints last.
type counts struct{ tests, pass, fail, other int }

func (c *counts) add(o counts) {
	c.tests += o.tests
	c.pass += o.pass
	c.fail += o.fail
	c.other += o.other
}

func (c counts) String() string {
	return fmt.Sprintf("%d tests, %d pass, %d fail, %d skipped, todo or cancelled", c.tests, c.pass, c.fail, c.other)
}

// countsOf reads the summary of node --test's spec reporter ("ℹ tests 5").
func countsOf(out []byte) counts {
	var c counts
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "ℹ" {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		switch f[1] {
		case "tests":
			c.tests = n
		case "pass":
			c.pass = n
		case "fail":
			c.fail = n
		case "cancelled", "skipped", "todo":
			c.other += n
		}
	}
	return c
}

// startTollgate runs `tollgate serve` on dsn and returns its address once ready.
func startTollgate(t *testing.T, dsn string) string {
	t.Helper()
	// A patient counter store: the suite's own builds load both cores, and
	// a check past the default 50 ms deadline would be decided by the fail
	// mode (allowed, degraded) where a test expects Tollgate's count.
	return bintest.Start(t, binary, environ(dsn, "TOLLGATE_COUNTER_TIMEOUT=2s")).Addr
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
// or was installed from another package-lock.json. --prefer-offline: the
// lock pins every version, so npm's cache answers without asking the
// registry again.
func npmCI() step {
	c := command{name: "npm ci", args: []string{"npm", "ci", "--prefer-offline", "--no-audit", "--no-fund"}}
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		return step{command: c, err: err}
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join("node_modules", ".tollgate-lock-sha256")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return step{command: c, skipped: "node_modules is of this package-lock.json"}
	}
	s := c.run()
	if s.err == nil {
		s.err = os.WriteFile(stamp, []byte(want), 0o644)
	}
	return s
}
