// Package bintest is the one way Tollgate's out-of-process suites (blackbox,
// the dashboard's browser suite, the TypeScript client's suite) get a
// running tollgate: it builds cmd/tollgate once per test binary, removes it
// when the tests end (also when the build fails), and starts `tollgate
// serve` on a free port, waiting until /readyz answers 200. It is test-only.
package bintest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// pkg is the binary's package.
const pkg = "github.com/tollgate/tollgate/cmd/tollgate"

// Main is a TestMain for tests that run the binary: Run, then os.Exit with
// its code.
func Main(m *testing.M, binary *string) {
	os.Exit(Run(m, binary))
}

// Run builds cmd/tollgate into a temporary folder, sets *binary to its
// path, runs m (pgtest.Run: the throwaway PostgreSQL stops after them),
// removes the folder, and returns m's code, or 1 when the build failed.
// The folder goes in every case, before the caller's os.Exit, which skips
// deferred calls.
func Run(m *testing.M, binary *string) int {
	return run(pkg, func() int { return pgtest.Run(m) }, binary)
}

// run is Run for any package and tests: the seam of bintest's own test.
func run(pkg string, tests func() int, binary *string) int {
	dir, err := os.MkdirTemp("", "tollgate-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "bintest:", err)
		}
	}()
	*binary = filepath.Join(dir, "tollgate")
	build := exec.Command("go", "build", "-o", *binary, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tollgate:", err)
		return 1
	}
	return tests()
}

// Server is one running `tollgate serve`.
type Server struct {
	// Addr is where it listens (host:port on loopback), URL "http://"+Addr.
	Addr, URL string
	// Logs is everything it wrote to stdout and stderr.
	Logs *logbuf.Buffer
	// Cmd is its process; a test may kill or signal it and Wait itself
	// (the cleanup's Wait then returns at once).
	Cmd *exec.Cmd

	once    sync.Once
	stopped error
}

// ReadyWithin is how long Start waits for /readyz: an embedded
// PostgreSQL's first start on a loaded two-core machine takes most of it.
const ReadyWithin = 60 * time.Second

// StopWithin is how long Stop and the cleanup wait for the process to exit
// after SIGINT before they kill it.
const StopWithin = 30 * time.Second

// Start runs `binary serve` with env (the whole environment; Start adds
// TOLLGATE_ADDR, a free loopback port) and waits until /readyz answers
// 200, failing t when it does not within ReadyWithin. When t ends the
// process gets SIGINT and, if t failed, its warnings and the tail of its
// log are logged.
func Start(t testing.TB, binary string, env []string) *Server {
	t.Helper()
	s := Spawn(t, binary, env)
	eventually.NoError(t, ReadyWithin, "tollgate at "+s.URL+" ready", func() error { return Ready(s.URL) })
	return s
}

// Spawn is Start without the wait: for a test of what the server answers
// before it is ready.
func Spawn(t testing.TB, binary string, env []string) *Server {
	t.Helper()
	s := &Server{Addr: FreePort(t), Logs: &logbuf.Buffer{}}
	s.URL = "http://" + s.Addr
	s.Cmd = exec.Command(binary, "serve")
	s.Cmd.Env = append(env[:len(env):len(env)], "TOLLGATE_ADDR="+s.Addr)
	s.Cmd.Stdout, s.Cmd.Stderr = s.Logs, s.Logs
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A test may have killed it: only a server that would not stop
		// is an error here.
		if err := s.Stop(); errors.Is(err, ErrKilled) {
			t.Error(err)
		}
		if t.Failed() {
			logs := s.Logs.String()
			// A long run's tail may have left behind the warning that says
			// what went wrong.
			if w := Warnings(logs, 40); w != "" {
				t.Logf("warnings and errors in the log of %s:\n%s", s.URL, w)
			}
			t.Logf("log of %s (tail):\n%s", s.URL, Tail(logs, 6000))
		}
	})
	return s
}

// Stop sends the server SIGINT and waits until it has exited: nil when
// it exited with status 0, its exit error otherwise, or an error wrapping
// ErrKilled when it had to be killed after StopWithin. Calls after the
// first return the first one's answer.
func (s *Server) Stop() error {
	s.once.Do(func() {
		// Idle keep-alive connections would hold the graceful shutdown.
		http.DefaultClient.CloseIdleConnections()
		_ = s.Cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- s.Cmd.Wait() }()
		select {
		case s.stopped = <-done:
		case <-time.After(StopWithin):
			_ = s.Cmd.Process.Kill()
			<-done
			s.stopped = fmt.Errorf("tollgate at %s: %w on SIGINT within %s", s.URL, ErrKilled, StopWithin)
		}
	})
	return s.stopped
}

// ErrKilled is a server that did not stop on SIGINT in time.
var ErrKilled = errors.New("killed: did not stop")

// Ready is nil when the server at base answers /readyz with 200.
func Ready(base string) error {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d", resp.StatusCode)
	}
	return nil
}

// FreePort returns a loopback address where nothing listens now.
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Warnings is the first n lines of logs (text format) logged at WARN or
// ERROR, and how many more there were.
func Warnings(logs string, n int) string {
	var b strings.Builder
	more := 0
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		if n == 0 {
			more++
			continue
		}
		n--
		b.WriteString(line)
	}
	if more > 0 {
		fmt.Fprintf(&b, "… and %d more\n", more)
	}
	return b.String()
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
