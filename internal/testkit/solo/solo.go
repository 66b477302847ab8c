// Package solo keeps the tests that load both cores on purpose (a noisy
// neighbour, a lease burst, the fault suite) from running beside Tollgate's
// other test binaries, whose timing they would squeeze and which would
// squeeze theirs. Every test binary that starts through pgtest or redistest
// holds a shared lock on one file for its run (Hold); Alone turns it into an
// exclusive lock for one test. Under a plain `go test ./...` such a test
// waits for the packages running beside it to finish, and packages that
// start meanwhile wait for it. The lock is flock(2) on a file in the temp
// folder, so it also orders test runs of several checkouts on one machine.
// Test-only.
package solo

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	mu     sync.Mutex
	file   *os.File
	shared bool // Hold took the shared lock: Alone returns to it
	// path is the lock file; solo's own test uses one of its own.
	path = filepath.Join(os.TempDir(), "tollgate-tests.lock")
)

// Path is the lock file.
func Path() string { return path }

func open() error {
	if file != nil {
		return nil
	}
	f, err := os.OpenFile(Path(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return fmt.Errorf("solo: open %s: %w", Path(), err)
	}
	file = f
	return nil
}

func flock(how int) error {
	for {
		err := syscall.Flock(int(file.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// Hold takes the shared lock for the rest of this test binary's run; it
// waits while a test of another binary is Alone. Release it with the
// function it returns, before os.Exit.
func Hold() (release func(), err error) {
	mu.Lock()
	defer mu.Unlock()
	if err := open(); err != nil {
		return nil, err
	}
	if err := flock(syscall.LOCK_SH); err != nil {
		return nil, fmt.Errorf("solo: shared lock on %s: %w", Path(), err)
	}
	shared = true
	return func() {
		mu.Lock()
		defer mu.Unlock()
		shared = false
		_ = flock(syscall.LOCK_UN)
	}, nil
}

// Alone makes t the only test running in any Tollgate test binary on this
// machine until it ends: it waits for every other binary's shared lock to
// go. Tests calling it must not be parallel with the rest of their package.
func Alone(t testing.TB) {
	t.Helper()
	mu.Lock()
	if err := open(); err != nil {
		mu.Unlock()
		t.Fatal(err)
	}
	start := time.Now()
	// From shared to exclusive, flock drops the shared lock first: two
	// binaries asking at once cannot hold each other up.
	if err := flock(syscall.LOCK_EX); err != nil {
		mu.Unlock()
		t.Fatalf("solo: exclusive lock on %s: %v", Path(), err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("solo: waited %s for the other test binaries to finish", waited.Round(time.Second))
	}
	t.Cleanup(func() {
		defer mu.Unlock()
		how := syscall.LOCK_UN
		if shared {
			how = syscall.LOCK_SH
		}
		if err := flock(how); err != nil {
			t.Errorf("solo: unlock %s: %v", Path(), err)
		}
	})
}
