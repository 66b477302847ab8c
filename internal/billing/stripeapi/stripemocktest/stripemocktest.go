// Package stripemocktest starts stripe-mock (the go.mod tool
// github.com/stripe/stripe-mock, the release whose API matches stripe-go
// v76) for tests: one process per test binary, on free loopback ports, shared
// by the tests that ask for it. A test that cannot get it fails; it never
// skips. Only tests import stripemocktest; it imports no Stripe code.
package stripemocktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	mu      sync.Mutex
	baseURL string
	started error
	proc    *exec.Cmd
	// gone is closed once proc has exited and been waited for.
	gone chan struct{}
)

// URL returns the http:// address of a running stripe-mock, starting it on
// first use; it stops with the test binary (call Stop from TestMain, or let
// the process end take it). stripe-mock keeps no state: every answer is a
// fixture shaped by the request.
func URL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if baseURL == "" && started == nil {
		baseURL, started = start()
	}
	if started != nil {
		t.Fatalf("stripemocktest: %v", started)
	}
	return baseURL
}

// Stop ends the stripe-mock this process started, if any.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if proc != nil {
		proc.Process.Kill()
		<-gone
		proc = nil
	}
}

// Main runs a package's tests, then stops stripe-mock:
// func TestMain(m *testing.M) { stripemocktest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// start builds (or finds in the build cache) the stripe-mock of go.mod and
// runs it with both listeners on loopback ports the system picks, so that it
// never takes :12111/:12112 on every interface, and reads back the HTTP
// address it announces.
func start() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "tool", "-n", "stripe-mock").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go tool -n stripe-mock: %v: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("go tool -n stripe-mock: %v", err)
	}
	bin := strings.TrimSpace(string(out))
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		pw.Close()
		close(done)
		exited <- err
	}()
	found := make(chan string, 1)
	drained := make(chan struct{})
	var seen strings.Builder // read once drained is closed
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if seen.Len() < 4096 {
				seen.WriteString(line + "\n")
			}
			if addr, ok := strings.CutPrefix(line, "Listening for HTTP at address: "); ok {
				found <- strings.TrimSpace(addr)
			}
		}
		// Keep draining so that stripe-mock never blocks on its output.
		io.Copy(io.Discard, pr)
	}()
	select {
	case addr := <-found:
		proc, gone = cmd, done
		return "http://" + addr, nil
	case err := <-exited:
		<-drained
		return "", fmt.Errorf("stripe-mock exited: %v\n%s", err, seen.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return "", errors.New("stripe-mock did not announce its HTTP address within 30 s")
	}
}
