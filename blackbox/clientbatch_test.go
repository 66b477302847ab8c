package blackbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/pgtest"
)

// TestClientBatching: concurrent checks through a batching client travel
// in fewer requests than checks, each caller gets its own decision (the
// policy admits exactly its limit per subject), a caller's mistake is its
// own error while the checks beside it are decided, a Peek rides along
// counting nothing, and a caller whose context is done returns with the
// FailMode.
func TestClientBatching(t *testing.T) {
	dsn := pgtest.New(t)
	in := start(t, dsn, patientStore)
	nt := createTenant(t, dsn, "pro")
	putPolicy(t, in, nt.LiveKey, "per-user", map[string]any{"limit": 5, "window": "1h"})
	ct := &countingTransport{}
	tg := newClient(t, in.base, nt.LiveKey, client.WithBatching(2*time.Millisecond, 64), client.WithHTTPClient(&http.Client{Transport: ct}))
	ctx := context.Background()

	const users, each = 8, 20
	var allowed [users]atomic.Int64
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for u := range users {
		for n := range each {
			wg.Go(func() {
				item := client.Item{Policy: "per-user", Subject: fmt.Sprintf("user-%d", u)}
				if n == 7 {
					// A mistake of this caller's alone.
					if d, err := tg.Check(ctx, client.Item{Policy: "no-such-policy", Subject: "x"}); err != nil {
						var ae *client.APIError
						if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "items[0].policy" || d.Allowed {
							t.Errorf("unknown policy: %+v, %v", d, err)
						}
						wrong.Add(1)
					}
					return
				}
				if n == 3 {
					if d, err := tg.Peek(ctx, item); err != nil || len(d.Items) != 1 {
						t.Errorf("peek: %+v, %v", d, err)
					}
					return
				}
				d, err := tg.Check(ctx, item)
				if err != nil || d.Degraded || len(d.Items) != 1 || d.Items[0].Limit != 5 {
					t.Errorf("check: %+v, %v", d, err)
					return
				}
				if d.Allowed {
					allowed[u].Add(1)
				}
			})
		}
	}
	wg.Wait()
	for u := range users {
		if got := allowed[u].Load(); got != 5 {
			t.Errorf("user-%d: %d checks allowed at limit 5", u, got)
		}
	}
	if wrong.Load() != users {
		t.Errorf("%d of %d mistaken calls got their error", wrong.Load(), users)
	}
	if n := ct.n.Load(); n >= users*each {
		t.Errorf("%d concurrent calls took %d requests: no batching", users*each, n)
	}
	t.Logf("%d calls in %d requests", users*each, ct.n.Load())

	// A caller whose context is done returns with the FailMode at once.
	done, cancel := context.WithCancel(ctx)
	cancel()
	closed := newClient(t, in.base, nt.LiveKey, client.WithBatching(0, 0), client.WithFailMode(client.FailClosed))
	if d, err := closed.Check(done, client.Item{Policy: "per-user", Subject: "user-0"}); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.Canceled) || d.Allowed || !d.Degraded {
		t.Errorf("a done context: %+v, %v", d, err)
	}
}
