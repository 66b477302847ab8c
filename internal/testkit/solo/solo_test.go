package solo

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// other is another test binary's hold on the lock: its own open file.
func other(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(Path(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestAloneWaitsForOthersAndHoldsThemOff: Alone returns only after the
// other holder let go, and while it is alone nobody gets a shared hold.
func TestAloneWaitsForOthersAndHoldsThemOff(t *testing.T) {
	// A lock of this test's own: the machine's would make it wait for
	// every test binary running beside it.
	path = filepath.Join(t.TempDir(), "tests.lock")
	release, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	f := other(t)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	fd := int(f.Fd()) // read here: the test's cleanup closes f, which the race detector sees race a read in the goroutine
	go func() {
		time.Sleep(200 * time.Millisecond)
		released.Store(true)
		_ = syscall.Flock(fd, syscall.LOCK_UN)
	}()
	t.Run("alone", func(t *testing.T) {
		Alone(t)
		if !released.Load() {
			t.Fatal("Alone returned while another binary held the lock")
		}
		g := other(t)
		err := syscall.Flock(int(g.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("a shared hold while a test is alone: %v, want EWOULDBLOCK", err)
		}
	})
	// After the test, this binary holds its shared lock again; others may too.
	g := other(t)
	if err := syscall.Flock(int(g.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatalf("a shared hold after the test that was alone: %v", err)
	}
	if err := syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("an exclusive hold while this binary holds its shared lock: %v, want EWOULDBLOCK", err)
	}
}
