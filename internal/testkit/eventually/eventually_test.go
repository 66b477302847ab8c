package eventually_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
)

// fakeT records a failure instead of ending the test, as a testing.TB
// whose Fatalf stops its goroutine.
type fakeT struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic(f)
}

// run calls poll with a fakeT and returns what it failed with, "" if it
// did not.
func run(poll func(t testing.TB)) (msg string) {
	f := &fakeT{}
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
		msg = f.msg
	}()
	poll(f)
	return ""
}

func TestTrueWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	n := 0
	took := eventually.True(t, time.Second, "third ask", func() bool { n++; return n == 3 })
	if n != 3 || took < 2*eventually.Every {
		t.Errorf("held after %d asks in %v, want 3 asks and at least %v", n, took, 2*eventually.Every)
	}
}

func TestTrueFailsAfterTheDeadline(t *testing.T) {
	t.Parallel()
	start := time.Now()
	msg := run(func(t testing.TB) { eventually.True(t, 50*time.Millisecond, "never", func() bool { return false }) })
	if msg != "never: not within 50ms" || time.Since(start) < 50*time.Millisecond {
		t.Errorf("failed with %q after %v", msg, time.Since(start))
	}
}

func TestNoErrorSaysTheLastError(t *testing.T) {
	t.Parallel()
	n := 0
	msg := run(func(t testing.TB) {
		eventually.NoError(t, 30*time.Millisecond, "bytes drained", func() error { n++; return fmt.Errorf("%d bytes left", n) })
	})
	if !strings.HasPrefix(msg, "bytes drained: not within 30ms: ") || !strings.HasSuffix(msg, fmt.Sprintf("%d bytes left", n)) {
		t.Errorf("failed with %q after %d asks", msg, n)
	}
	if took := eventually.NoError(t, time.Second, "ok", func() error { return nil }); took > eventually.Every {
		t.Errorf("a condition that holds at once took %v", took)
	}
}
