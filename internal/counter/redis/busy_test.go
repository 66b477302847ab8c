package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	tgredis "github.com/tollgate/tollgate/internal/counter/redis"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/redistest"
)

// TestCallsOutsideTheLanesWaitForABusyServer keeps the server busy past the
// store's deadline (one script of another client's, 1.5 deadlines long) while
// a reset, the leases held and the reserved sums are asked for: each is
// answered once the server is free, as checks are, not failed at the
// deadline. Before, these three went outside the lanes under the bare
// deadline, so a neighbour's flood of batches that held the server a
// deadline long turned a quiet tenant's reset into a 503 (the fault suite's
// hostile-batches-redis phase, on a loaded box).
func TestCallsOutsideTheLanesWaitForABusyServer(t *testing.T) {
	t.Parallel()
	// A server of its own: the busy script would hold up every other test's.
	u := redistest.StartServer(t)
	const deadline = 100 * time.Millisecond
	s := open(t, tgredis.Config{URL: u, Prefix: "busy:", Timeout: deadline, Logger: testLogger(t)})
	t.Cleanup(func() { s.Close() })
	raw := rawClient(t, u)
	ctx := context.Background()
	item := counter.Item{Key: "k", Algorithm: limit.FixedWindow, Limit: 10, Window: limit.Every(time.Hour), Cost: 1}
	if _, err := s.Check(ctx, counter.Request{Group: "g", Items: []counter.Item{item}}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"reset": func() error { return s.Reset(ctx, "g", "k") },
		"held": func() error {
			_, err := s.Held(ctx, "g", []string{"t"}, time.Time{})
			return err
		},
		"reserved sums": func() error {
			_, err := s.ReservedSums(ctx, "g", []string{"k"}, time.Time{})
			return err
		},
	}
	for name, call := range calls {
		busy := make(chan error, 1)
		go func() {
			busy <- raw.Eval(ctx, `local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1])
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return 1`, nil, (deadline * 3 / 2).Microseconds()).Err()
		}()
		time.Sleep(10 * time.Millisecond) // the script is running
		start := time.Now()
		if err := call(); err != nil {
			t.Errorf("%s beside a server busy for 1.5 deadlines: %v after %v", name, err, time.Since(start).Round(time.Millisecond))
		}
		if err := <-busy; err != nil {
			t.Fatal(err)
		}
	}
}
