// Package solo orders Tollgate's test binaries on one machine, so that the
// tests that load both cores on purpose (a noisy neighbour, a lease burst,
// the fault suite, the browser and TypeScript suites) never run beside
// others, whose timing they would squeeze and which would squeeze theirs.
// `make test` is one `go test ./...`: this lock, not the Makefile, keeps
// such tests apart.
//
// Every test binary holds a shared lock for its run (Hold, through its
// TestMain: Main, or pgtest's, redistest's, bintest's; internal/archtest
// checks that every package's tests do). Alone turns it into an exclusive
// lock for one test, and Exclusive takes it for a whole binary. A test that
// asks to be alone waits for the binaries running beside it to finish, and
// binaries that start meanwhile wait for it: it takes a second lock, the
// intent, before the exclusive one, and Hold passes through the intent, so
// a stream of new binaries cannot starve it. The locks are flock(2) on two
// files in the temp folder, so they also order test runs of several
// checkouts on one machine. Test-only.
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

// hold is what this process holds of the machine's lock.
type hold int

const (
	none      hold = iota
	shared         // Hold: Alone returns to it
	exclusive      // Exclusive: Hold and Alone have nothing to take
)

// lingerFor is how long a binary keeps the machine after a test that was
// alone, for its next test that must be: consecutive lone tests of one
// binary then wait for the others once, not once each.
var lingerFor = 2 * time.Second

var (
	mu           sync.Mutex
	state        hold
	lock, intent *os.File
	// linger is the timer that gives the machine back after a lone test;
	// nil when this binary does not hold it.
	linger *time.Timer
	// dir holds the lock files; solo's own test uses one of its own.
	dir = os.TempDir()
)

// Path is the lock file.
func Path() string { return filepath.Join(dir, "tollgate-tests.lock") }

// intentPath is the file a test that waits to be alone holds.
func intentPath() string { return filepath.Join(dir, "tollgate-tests.intent.lock") }

func open() error {
	if lock != nil {
		return nil
	}
	l, err := os.OpenFile(Path(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return fmt.Errorf("solo: open %s: %w", Path(), err)
	}
	i, err := os.OpenFile(intentPath(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		l.Close()
		return fmt.Errorf("solo: open %s: %w", intentPath(), err)
	}
	lock, intent = l, i
	return nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// Main is a TestMain for a package whose tests need no server: it holds
// the shared lock while they run (Run), then exits with their code.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs m under the shared lock and returns its code, for a TestMain
// with more to do before it exits.
func Run(m *testing.M) int {
	release, err := Hold()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer release()
	return m.Run()
}

// Hold takes the shared lock for the rest of this test binary's run; it
// waits while a test of another binary is alone or waits to be. Release it
// with the function it returns, before os.Exit.
func Hold() (release func(), err error) {
	mu.Lock()
	defer mu.Unlock()
	if state == exclusive {
		return func() {}, nil
	}
	if err := open(); err != nil {
		return nil, err
	}
	// Through the intent: while a test waits to be alone, nobody new comes in.
	if err := flock(intent, syscall.LOCK_SH); err != nil {
		return nil, fmt.Errorf("solo: shared lock on %s: %w", intentPath(), err)
	}
	err = flock(lock, syscall.LOCK_SH)
	_ = flock(intent, syscall.LOCK_UN)
	if err != nil {
		return nil, fmt.Errorf("solo: shared lock on %s: %w", Path(), err)
	}
	state = shared
	return func() {
		mu.Lock()
		defer mu.Unlock()
		state = none
		if linger != nil {
			linger.Stop()
			linger = nil
			_ = flock(intent, syscall.LOCK_UN)
		}
		_ = flock(lock, syscall.LOCK_UN)
	}, nil
}

// Exclusive makes this binary the only Tollgate test binary running on the
// machine until release: it waits for the others to finish, and those that
// start meanwhile wait for it. Call it first thing in a TestMain, before
// any work that loads the machine; Hold and Alone then take nothing.
func Exclusive() (release func(), err error) {
	mu.Lock()
	defer mu.Unlock()
	if state != none {
		return nil, fmt.Errorf("solo: Exclusive after Hold: call it first in TestMain")
	}
	if err := open(); err != nil {
		return nil, err
	}
	if err := takeExclusive(); err != nil {
		return nil, err
	}
	state = exclusive
	return func() {
		mu.Lock()
		defer mu.Unlock()
		state = none
		_ = flock(lock, syscall.LOCK_UN)
		_ = flock(intent, syscall.LOCK_UN)
	}, nil
}

// takeExclusive takes the intent, then the lock, exclusively.
func takeExclusive() error {
	if err := flock(intent, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("solo: exclusive lock on %s: %w", intentPath(), err)
	}
	if err := flock(lock, syscall.LOCK_EX); err != nil {
		_ = flock(intent, syscall.LOCK_UN)
		return fmt.Errorf("solo: exclusive lock on %s: %w", Path(), err)
	}
	return nil
}

// Alone makes t the only test running in any Tollgate test binary on this
// machine until it ends: it waits for every other binary's shared lock to
// go, and binaries that start meanwhile wait for it. Tests calling it must
// not be parallel with the rest of their package.
func Alone(t testing.TB) {
	t.Helper()
	mu.Lock()
	if state == exclusive {
		mu.Unlock()
		return
	}
	if err := open(); err != nil {
		mu.Unlock()
		t.Fatal(err)
	}
	start := time.Now()
	if linger == nil || !linger.Stop() {
		// This binary's own shared lock goes first: a binary that held it
		// while waiting for the intent would hold up the one holding the
		// intent, which waits for every shared lock to go.
		if state == shared {
			_ = flock(lock, syscall.LOCK_UN)
		}
		if err := takeExclusive(); err != nil {
			linger = nil
			mu.Unlock()
			t.Fatal(err)
		}
	}
	// Else the lone test before this one left the machine to it.
	linger = nil
	if waited := time.Since(start); waited > time.Second {
		t.Logf("solo: waited %s for the other test binaries to finish", waited.Round(time.Second))
	}
	t.Cleanup(func() {
		defer mu.Unlock()
		var timer *time.Timer
		timer = time.AfterFunc(lingerFor, func() {
			mu.Lock()
			defer mu.Unlock()
			if linger != timer {
				return // taken by the next lone test, or let go with the binary
			}
			linger = nil
			how := syscall.LOCK_UN
			if state == shared {
				how = syscall.LOCK_SH
			}
			_ = flock(lock, how)
			_ = flock(intent, syscall.LOCK_UN)
		})
		linger = timer
	})
}
