package countertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/faultnet"
	"github.com/tollgate/tollgate/internal/limit"
)

// unavailable cuts and stalls the link to the server: the store answers
// ErrUnavailable within its deadline, then recovers by itself.
func unavailable(t *testing.T, b Backend) {
	var p *faultnet.Proxy
	s := b.Breakable(t, func(upstream string) *faultnet.Proxy {
		p = faultnet.New(t, upstream)
		return p
	})
	t.Cleanup(func() { s.Close() })
	it := item("outage", limit.FixedWindow, 1000000, limit.Every(time.Hour))
	req := counter.Request{Items: []counter.Item{it}}
	check(t, s, req)

	const deadline = 50 * time.Millisecond
	const slack = 250 * time.Millisecond
	expectDown := func(what string) {
		t.Helper()
		for i := range 3 {
			start := time.Now()
			_, err := s.Check(context.Background(), req)
			took := time.Since(start)
			if !errors.Is(err, counter.ErrUnavailable) {
				t.Fatalf("%s, call %d: got %v, want ErrUnavailable", what, i, err)
			}
			if took > deadline+slack {
				t.Fatalf("%s, call %d: answered after %s, want within %s", what, i, took, deadline+slack)
			}
		}
	}
	expectBack := func(what string) {
		t.Helper()
		limitAt := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := s.Check(ctx, req)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(limitAt) {
				t.Fatalf("%s: store still failing 10 s after the server came back: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Leases fail alike.
	l := leaser(t, s)
	leaseDown := func(what string) {
		t.Helper()
		start := time.Now()
		_, err := l.Acquire(context.Background(), counter.Acquire{Key: "outage", ID: what, Limit: 1, TTL: time.Second})
		if took := time.Since(start); !errors.Is(err, counter.ErrUnavailable) || took > deadline+slack {
			t.Fatalf("%s: acquire got %v after %s, want ErrUnavailable within %s", what, err, took, deadline+slack)
		}
		if err := l.Release(context.Background(), counter.LeaseRef{ID: what}); !errors.Is(err, counter.ErrUnavailable) {
			t.Fatalf("%s: release got %v, want ErrUnavailable", what, err)
		}
	}

	p.Stall()
	expectDown("stalled link")
	leaseDown("stalled")
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	expectBack("after a stall")

	p.Cut()
	expectDown("cut link")
	leaseDown("cut")
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	expectBack("after a cut")
}
