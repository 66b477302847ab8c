// Package eventually is the one poll loop of Tollgate's tests: it asks a
// condition again and again until it holds or a deadline passes, for what a
// test cannot be told directly (a server that becomes ready, a change that
// reaches another instance, a count flushed in the background). A test that
// can inject a clock or wait on a channel does that instead.
//
// Only tests import eventually; it imports only the standard library.
package eventually

import (
	"testing"
	"time"
)

// Every is how long the loop waits between two asks: short beside the
// seconds a test waits at most, long enough not to load the machine.
const Every = 10 * time.Millisecond

// True asks cond every Every until it returns true and returns how long
// that took; when d passes first, it fails t with what. cond runs on the
// test's goroutine, so it may call t.Fatal itself.
func True(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return NoError(t, d, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// NoError asks f every Every until it returns nil and returns how long that
// took; when d passes first, it fails t with what and f's last error.
func NoError(t testing.TB, d time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			if err == errNotYet {
				t.Fatalf("%s: not within %s", what, d)
			}
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(Every)
	}
}

// errNotYet is True's condition not holding yet.
var errNotYet = notYet{}

type notYet struct{}

func (notYet) Error() string { return "not yet" }
