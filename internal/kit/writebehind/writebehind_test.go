package writebehind_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/kit/writebehind"
	"github.com/tollgate/tollgate/internal/testkit/bg"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
)

// TestLoopFinalFlushOutlivesTheStop: stopping the loop (cancelling its
// context) still writes what is pending, under a context that is not done,
// and Run says whether that worked.
func TestLoopFinalFlushOutlivesTheStop(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		var calls int
		l := writebehind.Loop{What: "test items", Every: time.Hour, Timeout: time.Second, Log: slog.New(slog.DiscardHandler),
			Flush: func(ctx context.Context) error {
				calls++
				if ctx.Err() != nil {
					t.Errorf("final flush under a done context: %v", ctx.Err())
				}
				if _, ok := ctx.Deadline(); !ok {
					t.Error("final flush without a deadline")
				}
				if fail {
					return errors.New("store down")
				}
				return nil
			}}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := l.Run(ctx)
		if calls != 1 || (err != nil) != fail || (fail && !strings.Contains(err.Error(), "final flush of test items: store down")) {
			t.Errorf("failing %v: %d flushes, Run %v", fail, calls, err)
		}
	}
}

// TestLoopKeepsFlushingAndLogsDrops: a failed periodic flush is logged and
// the next one runs; drops are logged once, with the recorder's bounds, and
// counted afresh; Tick runs after each flush.
func TestLoopKeepsFlushingAndLogsDrops(t *testing.T) {
	t.Parallel()
	logs := &logbuf.Buffer{}
	var mu sync.Mutex
	flushes, ticks := 0, 0
	drops := &writebehind.Drops{}
	drops.Add(3)
	l := writebehind.Loop{What: "test items", Every: 5 * time.Millisecond, Timeout: time.Second,
		Log: slog.New(slog.NewTextHandler(logs, nil)), Drops: drops, DropAttrs: []any{"max_pending", 10},
		Pending: func() int { return 7 },
		Flush: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			flushes++
			if flushes == 1 {
				return errors.New("store down")
			}
			return nil
		},
		Tick: func() { mu.Lock(); ticks++; mu.Unlock() },
	}
	stop := bg.Run(l.Run)
	eventually.True(t, 5*time.Second, "three flushes", func() bool { mu.Lock(); defer mu.Unlock(); return flushes >= 3 && ticks >= 2 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := logs.String()
	for _, want := range []string{
		`msg="test items not written, kept for the next flush" err="store down" pending=7`,
		`msg="test items dropped: too many waiting for the database" dropped=3 max_pending=10`,
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("log lacks, or repeats, %s:\n%s", want, out)
		}
	}
}

// TestResenderSendsAFailedFlushAgainUnderItsID: a flush whose write failed
// is sent again, as it was, under its id, before any newer one; new flushes
// get new UUIDs.
func TestResenderSendsAFailedFlushAgainUnderItsID(t *testing.T) {
	t.Parallel()
	type write struct {
		id    string
		items []int
	}
	var writes []write
	down := true
	r := writebehind.NewResender(func(_ context.Context, id string, items []int) error {
		writes = append(writes, write{id, items})
		if down {
			return errors.New("timeout after the commit, maybe")
		}
		return nil
	})
	ctx := context.Background()
	if err := r.Resend(ctx); err != nil || len(writes) != 0 {
		t.Fatalf("Resend with nothing held: %v, %d writes", err, len(writes))
	}
	if err := r.Send(ctx, []int{1, 2}); err == nil || r.Held() == nil {
		t.Fatalf("Send to a failing store: %v, held %v", err, r.Held())
	}
	id := writes[0].id
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("flush id %q, want a random UUID", id)
	}
	if err := r.Resend(ctx); err == nil || !strings.Contains(err.Error(), "flush "+id+" again") {
		t.Errorf("Resend to a failing store: %v", err)
	}
	down = false
	if err := r.Resend(ctx); err != nil || r.Held() != nil {
		t.Fatalf("Resend once the store is back: %v, held %v", err, r.Held())
	}
	if err := r.Send(ctx, []int{3}); err != nil {
		t.Fatal(err)
	}
	if len(writes) != 4 || writes[1].id != id || writes[2].id != id || writes[3].id == id ||
		len(writes[2].items) != 2 || writes[2].items[1] != 2 {
		t.Errorf("writes %v: want the failed flush twice more under %s, then a new one", writes, id)
	}
}
