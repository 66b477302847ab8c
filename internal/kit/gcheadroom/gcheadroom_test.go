package gcheadroom_test

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/kit/gcheadroom"
	"github.com/tollgate/tollgate/internal/testkit/solo"
)

func TestMain(m *testing.M) { solo.Main(m) }

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom int64
		want           int
	}{
		{0, 128 * mib, 1000},        // nothing live yet: the most
		{4 * mib, 128 * mib, 1000},  // a small heap: capped
		{40 * mib, 128 * mib, 300},  // 320 % in steps of 25
		{128 * mib, 128 * mib, 100}, // as much live as headroom
		{1 << 30, 128 * mib, 100},   // a large heap: Go's default, never less
	} {
		if got := gcheadroom.Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB live, %d MiB headroom) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

// TestRunSetsThePercentAndGOGCWins runs the tuner on this process: it sets
// a percent from the live heap, restores Go's default when it stops, and
// leaves the percent alone when GOGC is set.
func TestRunSetsThePercentAndGOGCWins(t *testing.T) {
	t.Setenv("GOGC", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); gcheadroom.Run(ctx, 1<<40, time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for gogc() != 1000 {
		if time.Now().After(deadline) {
			t.Fatal("the GC percent never became 1000 with a TiB of headroom")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("after Run: GC percent %d, want Go's default 100 back", p)
	}

	t.Setenv("GOGC", "50")
	debug.SetGCPercent(50)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	gcheadroom.Run(ctx, 1<<40, time.Millisecond)
	if p := debug.SetGCPercent(100); p != 50 {
		t.Fatalf("with GOGC=50: Run changed the GC percent to %d", p)
	}
}

// gogc is the GC percent in force, read without setting it.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
