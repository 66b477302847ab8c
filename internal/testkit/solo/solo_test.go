package solo

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fresh gives the test lock files of its own: the machine's would make it
// wait for every test binary running beside it. A lone test keeps the
// machine a short while after it.
func fresh(t *testing.T) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if state != none || linger != nil {
		t.Fatal("a lock is still held from an earlier test")
	}
	dir, lock, intent = t.TempDir(), nil, nil
	lingerFor = 300 * time.Millisecond
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// binary is another test binary: its own open files of the two locks,
// by descriptor (read once: the race detector sees a read of a file's
// descriptor race the test's cleanup that closes it).
type binary struct{ lock, intent int }

func other(t *testing.T) binary {
	t.Helper()
	var b binary
	for _, p := range []struct {
		fd   *int
		path string
	}{{&b.lock, Path()}, {&b.intent, intentPath()}} {
		f, err := os.OpenFile(p.path, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		*p.fd = int(f.Fd())
	}
	return b
}

// try reports whether f could be locked at once with how (LOCK_SH or
// LOCK_EX), and lets it go again.
func try(t *testing.T, fd int, how int) bool {
	t.Helper()
	err := syscall.Flock(fd, how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(fd, syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	return true
}

// hold is what Hold does in another binary: through the intent to the
// shared lock.
func (b binary) hold(t *testing.T) {
	t.Helper()
	if err := syscall.Flock(b.intent, syscall.LOCK_SH); err != nil {
		t.Error(err)
	}
	if err := syscall.Flock(b.lock, syscall.LOCK_SH); err != nil {
		t.Error(err)
	}
	if err := syscall.Flock(b.intent, syscall.LOCK_UN); err != nil {
		t.Error(err)
	}
}

// waiting waits until Alone (or Exclusive) is waiting for the lock, which
// it does after taking the intent.
func waiting(t *testing.T, b binary) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); try(t, b.intent, syscall.LOCK_SH); {
		if time.Now().After(deadline) {
			t.Fatal("Alone never took the intent")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAloneWaitsForOthersAndHoldsThemOff: Alone returns only after the
// other holder let go; while it waits, a binary that starts cannot come
// in (it would starve Alone otherwise); while it is alone nobody holds the
// lock; after it, this binary holds its shared lock again.
func TestAloneWaitsForOthersAndHoldsThemOff(t *testing.T) {
	fresh(t)
	release, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	running, starting := other(t), other(t)
	running.hold(t)
	var released atomic.Bool
	fd := running.lock
	go func() {
		waiting(t, starting)
		if try(t, starting.intent, syscall.LOCK_SH) {
			t.Error("a binary starting while Alone waits came in ahead of it")
		}
		released.Store(true)
		_ = syscall.Flock(fd, syscall.LOCK_UN)
	}()
	t.Run("alone", func(t *testing.T) {
		Alone(t)
		if !released.Load() {
			t.Fatal("Alone returned while another binary held the lock")
		}
		if try(t, starting.lock, syscall.LOCK_SH) || try(t, starting.intent, syscall.LOCK_SH) {
			t.Fatal("a shared hold while a test is alone")
		}
	})
	// It keeps the machine a while for a next lone test, then gives it back.
	if try(t, starting.intent, syscall.LOCK_SH) {
		t.Fatal("a binary came in right after the lone test, before the linger")
	}
	waitUntil(t, "the machine given back after the linger", func() bool {
		return try(t, starting.intent, syscall.LOCK_SH) && try(t, starting.lock, syscall.LOCK_SH)
	})
	if try(t, starting.lock, syscall.LOCK_EX) {
		t.Fatal("an exclusive hold while this binary holds its shared lock")
	}
}

// TestTwoAloneDoNotDeadlock: when this binary, holding its shared lock,
// asks to be alone while another binary waits to be, it lets the other go
// first rather than each waiting for the other.
func TestTwoAloneDoNotDeadlock(t *testing.T) {
	fresh(t)
	release, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b := other(t)
	// The other binary asks to be alone: the intent, then the lock, which
	// waits for this binary's shared lock.
	if err := syscall.Flock(b.intent, syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var first atomic.Bool
	go func() {
		_ = syscall.Flock(b.lock, syscall.LOCK_EX)
		first.Store(true)
		time.Sleep(50 * time.Millisecond)
		_ = syscall.Flock(b.lock, syscall.LOCK_UN)
		_ = syscall.Flock(b.intent, syscall.LOCK_UN)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.Run("alone", func(t *testing.T) {
			Alone(t)
			if !first.Load() {
				t.Error("alone while the other binary that asked first was")
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Error("deadlock: two binaries asking to be alone wait for each other")
		// The other binary gives up, so that the subtest can end.
		_ = syscall.Flock(b.intent, syscall.LOCK_UN)
		<-done
	}
}

// TestExclusiveHoldsTheWholeBinary: Exclusive waits for the others, keeps
// every other binary out, and makes Hold and Alone take nothing more.
func TestExclusiveHoldsTheWholeBinary(t *testing.T) {
	fresh(t)
	b := other(t)
	b.hold(t)
	fd := b.lock
	go func() {
		waiting(t, b)
		_ = syscall.Flock(fd, syscall.LOCK_UN)
	}()
	release, err := Exclusive()
	if err != nil {
		t.Fatal(err)
	}
	if try(t, b.intent, syscall.LOCK_SH) || try(t, b.lock, syscall.LOCK_SH) {
		t.Fatal("a shared hold while a binary is exclusive")
	}
	again, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("alone", func(t *testing.T) { Alone(t) })
	again()
	if try(t, b.lock, syscall.LOCK_SH) {
		t.Fatal("Hold's or Alone's release let the exclusive lock go")
	}
	release()
	if !try(t, b.intent, syscall.LOCK_SH) || !try(t, b.lock, syscall.LOCK_EX) {
		t.Fatal("the lock is still held after Exclusive's release")
	}
}

// TestLoneTestsInARowWaitOnce: a lone test right after another of the same
// binary finds the machine still its own (no wait for the others again),
// and a binary that starts between them waits for both.
func TestLoneTestsInARowWaitOnce(t *testing.T) {
	fresh(t)
	release, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	starting := other(t)
	t.Run("first", func(t *testing.T) { Alone(t) })
	if try(t, starting.intent, syscall.LOCK_SH) {
		t.Fatal("a binary came in between two lone tests")
	}
	t.Run("second", func(t *testing.T) {
		Alone(t)
		if try(t, starting.intent, syscall.LOCK_SH) || try(t, starting.lock, syscall.LOCK_SH) {
			t.Error("a shared hold during the second lone test")
		}
	})
	waitUntil(t, "the machine given back after the linger", func() bool {
		return try(t, starting.intent, syscall.LOCK_SH) && try(t, starting.lock, syscall.LOCK_SH)
	})
	// And the binary's release lets a linger go at once.
	t.Run("third", func(t *testing.T) { Alone(t) })
	release()
	if !try(t, starting.intent, syscall.LOCK_EX) || !try(t, starting.lock, syscall.LOCK_EX) {
		t.Error("the lock still held after the binary let go")
	}
}
