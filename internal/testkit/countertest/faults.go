package countertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/faultnet"
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
	l := counter.Leaser(s)
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

// lateIsNotDown delays the link to the server so that every round trip
// takes longer than the store's deadline (50 ms), yet the server answers,
// as a healthy server on a starved CPU does: checks and leases are
// answered, exactly, never ErrUnavailable, whether alone or in a stream.
func lateIsNotDown(t *testing.T, b Backend) {
	var p *faultnet.Proxy
	s := b.Breakable(t, func(upstream string) *faultnet.Proxy {
		p = faultnet.New(t, upstream)
		return p
	})
	t.Cleanup(func() { s.Close() })
	l := counter.Leaser(s)
	it := item("late", limit.FixedWindow, 10, limit.Every(time.Hour))
	req := counter.Request{Items: []counter.Item{it}}
	check(t, s, req)
	// The lease scripts known to the server (a first use may take two
	// round trips, the second carrying the script).
	acquire(t, l, counter.Acquire{Key: "warm", ID: "warm", Limit: 1, TTL: time.Second})
	if err := release(l, counter.LeaseRef{ID: "warm"}); err != nil {
		t.Fatal(err)
	}
	// About 56 ms a round trip, a little more when an answer comes in
	// two chunks: past one deadline, within two.
	p.Delay(28 * time.Millisecond)
	t.Cleanup(func() { p.Restore() })
	admitted := 1
	for i := range 12 {
		if i == 6 {
			// Idle long enough that no earlier answer vouches for the store.
			time.Sleep(300 * time.Millisecond)
		}
		start := time.Now()
		res, err := s.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("check %d through a late link: %v after %s, want an answer", i, err, time.Since(start))
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("13 checks at a limit of 10 through a late link: %d admitted", admitted)
	}
	res, err := l.Acquire(context.Background(), counter.Acquire{Key: "late", ID: "late-1", Limit: 1, TTL: time.Minute})
	if err != nil || !res.Allowed {
		t.Fatalf("acquire through a late link: %+v, %v", res, err)
	}
	if err := l.Release(context.Background(), counter.LeaseRef{ID: "late-1"}); err != nil {
		t.Fatalf("release through a late link: %v", err)
	}
}
