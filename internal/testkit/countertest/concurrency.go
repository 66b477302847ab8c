package countertest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

func twentyGoroutines(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		it := item("twenty-"+alg.String(), alg, 10, limit.Every(30*24*time.Hour))
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if check(t, s, counter.Request{Items: []counter.Item{it}}).Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 10 {
			t.Errorf("%s: 20 goroutines at limit 10: %d allowed, want 10", alg, got)
		}
	}
}

// threeInstances races 1,000 requests through three independent store
// instances on one namespace, as three Tollgate servers would.
func threeInstances(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	for _, alg := range algorithms {
		it := item("three-"+alg.String(), alg, 100, limit.Every(30*24*time.Hour))
		var allowed atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range 1000 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				req := counter.Request{Items: []counter.Item{it}}
				if i%7 == 0 {
					// A second item of its own keeps what the store coalesces
					// mixed.
					req.Items = append(req.Items, item(fmt.Sprintf("own-%s-%d", alg, i), alg, 5, limit.Every(time.Hour)))
				}
				if check(t, stores[i%3], req).Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Errorf("%s: 1,000 requests over 3 instances at limit 100: %d allowed, want 100", alg, got)
		}
	}
}

// threeInstancesCeilings races 1,000 requests of a ceiling and a policy
// through three store instances on one namespace: the policy admits exactly
// its limit, and the ceiling counts every request, refused by the policy or
// not.
func threeInstancesCeilings(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	const requests = 1000
	for _, alg := range algorithms {
		ceiling := item("ceiling-"+alg.String(), limit.FixedWindow, 1_000_000, limit.Every(30*24*time.Hour))
		policy := item("policy-"+alg.String(), alg, 100, limit.Every(30*24*time.Hour))
		var allowed, ceilingRefused atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range requests {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				res := check(t, stores[i%3], counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy}})
				if res.Allowed {
					allowed.Add(1)
				}
				if !res.Decisions[0].Allowed {
					ceilingRefused.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Errorf("%s: %d requests over 3 instances, policy at limit 100: %d allowed, want 100", alg, requests, got)
		}
		if got := ceilingRefused.Load(); got != 0 {
			t.Errorf("%s: the ceiling refused %d requests, want none", alg, got)
		}
		res := check(t, stores[0], counter.Request{Mode: counter.Peek, Items: []counter.Item{ceiling}})
		// Every request consumed the ceiling; the peek counts nothing.
		if got, want := res.Decisions[0].Remaining, int64(1_000_000-requests); got != want {
			t.Errorf("%s: ceiling after %d requests: peek remaining %d, want %d (%d consumed)", alg, requests, got, want, 1_000_000-got)
		}
	}
}

// threeInstancesAdvisory races 1,000 requests of an enforced item that
// always allows and an advisory one at limit 100, in either tier, through
// three store instances on one namespace: every request is allowed, the
// advisory item admits exactly its limit, and the enforced item counts every
// request.
func threeInstancesAdvisory(t *testing.T, b Backend) {
	newStore := opener(t, b)
	stores := []counter.Store{newStore(), newStore(), newStore()}
	const requests = 1000
	for _, alg := range algorithms {
		enforced := item("enforced-"+alg.String(), limit.FixedWindow, 1_000_000, limit.Every(30*24*time.Hour))
		shadow := advisory(item("shadow-"+alg.String(), alg, 100, limit.Every(30*24*time.Hour)))
		var allowed, admitted atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range requests {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				// Both policies, the enforced item a ceiling, or both ceilings.
				req := counter.Request{Ceilings: i / 3 % 3, Items: []counter.Item{enforced, shadow}}
				res := check(t, stores[i%3], req)
				if res.Allowed {
					allowed.Add(1)
				}
				if res.Decisions[1].Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != requests {
			t.Errorf("%s: %d requests over 3 instances: %d allowed, want all", alg, requests, got)
		}
		if got := admitted.Load(); got != 100 {
			t.Errorf("%s: %d requests over 3 instances, advisory item at limit 100: %d admitted by it, want 100", alg, requests, got)
		}
		res := check(t, stores[0], counter.Request{Mode: counter.Peek, Items: []counter.Item{enforced}})
		if got, want := res.Decisions[0].Remaining, int64(1_000_000-requests); got != want {
			t.Errorf("%s: enforced item after %d requests: peek remaining %d, want %d (%d consumed)", alg, requests, got, want, 1_000_000-got)
		}
	}
}
