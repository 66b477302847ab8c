package countertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"

	"pgregory.net/rapid"
)

// Run runs the conformance suite against backend b.
func Run(t *testing.T, b Backend) {
	t.Run("MatchesLimitOnRandomStreams", func(t *testing.T) { t.Parallel(); matchesLimit(t, b) })
	t.Run("PeekNeverCounts", func(t *testing.T) { t.Parallel(); peekNeverCounts(t, b) })
	t.Run("AllOrNothing", func(t *testing.T) { t.Parallel(); allOrNothing(t, b) })
	t.Run("RemainingIsWhatIsLeft", func(t *testing.T) { t.Parallel(); remainingIsLeft(t, b) })
	t.Run("SameKeyTwiceInOneRequest", func(t *testing.T) { t.Parallel(); sameKeyTwice(t, b) })
	t.Run("CeilingsConsumedWhenAPolicyRefuses", func(t *testing.T) { t.Parallel(); ceilingsWithoutPolicies(t, b) })
	t.Run("CeilingRefusalConsumesNothing", func(t *testing.T) { t.Parallel(); ceilingRefuses(t, b) })
	t.Run("PeekConsumesCeilingsOnly", func(t *testing.T) { t.Parallel(); peekWithCeilings(t, b) })
	t.Run("CeilingAndPolicyOnOneKey", func(t *testing.T) { t.Parallel(); ceilingAndPolicyOnOneKey(t, b) })
	t.Run("AdvisoryRefusalDoesNotBlock", func(t *testing.T) { t.Parallel(); advisoryRefuses(t, b) })
	t.Run("AdvisoryNotConsumedWhenItsTierFails", func(t *testing.T) { t.Parallel(); advisoryTierFails(t, b) })
	t.Run("AdvisoryCeilingRefusalKeepsCeilings", func(t *testing.T) { t.Parallel(); advisoryCeilingRefuses(t, b) })
	t.Run("AdvisoryConsumedWhenItsTierIs", func(t *testing.T) { t.Parallel(); advisoryConsumed(t, b) })
	t.Run("WindowsRollOver", func(t *testing.T) { t.Parallel(); windowsRollOver(t, b) })
	t.Run("ServerClock", func(t *testing.T) { t.Parallel(); serverClock(t, b) })
	t.Run("GroupsAreSeparate", func(t *testing.T) { t.Parallel(); groupsAreSeparate(t, b) })
	t.Run("InvalidRequests", func(t *testing.T) { t.Parallel(); invalidRequests(t, b) })
	t.Run("EdgesOfValidRequests", func(t *testing.T) { t.Parallel(); edgesOfValid(t, b) })
	t.Run("TwentyGoroutinesLimitTen", func(t *testing.T) { t.Parallel(); twentyGoroutines(t, b) })
	t.Run("ThreeInstancesOneStore", func(t *testing.T) { t.Parallel(); threeInstances(t, b) })
	t.Run("ThreeInstancesCeilingAndPolicy", func(t *testing.T) { t.Parallel(); threeInstancesCeilings(t, b) })
	t.Run("ThreeInstancesAdvisory", func(t *testing.T) { t.Parallel(); threeInstancesAdvisory(t, b) })
	runBatches(t, b)
	runLeases(t, b)
	runReservations(t, b)
	runCharges(t, b)
	if b.Breakable != nil {
		t.Run("Unavailable", func(t *testing.T) { unavailable(t, b) })
		if b.Patient {
			t.Run("LateIsNotDown", func(t *testing.T) { lateIsNotDown(t, b) })
		}
	}
}

// open returns one store on a fresh namespace, closed when the test ends.
func open(t *testing.T, b Backend) counter.Store {
	t.Helper()
	return opener(t, b)()
}

// opener returns a function opening independent instances on one fresh
// namespace; every instance is closed when the test ends.
func opener(t *testing.T, b Backend) func() counter.Store {
	t.Helper()
	newStore := b.Shared(t)
	var once sync.Map
	return func() counter.Store {
		s := newStore()
		if _, dup := once.LoadOrStore(s, true); !dup {
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close store: %v", err)
				}
			})
		}
		return s
	}
}

// fataler is what check needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func check(t fataler, s counter.Store, req counter.Request) counter.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Check(ctx, req)
	if err != nil {
		t.Fatalf("check %+v: %v", req, err)
	}
	if len(res.Decisions) != len(req.Items) {
		t.Fatalf("check: %d decisions for %d items", len(res.Decisions), len(req.Items))
	}
	return res
}

// base is the start of the streams that bring their own clock: mid-month, in
// 2026, microsecond precision as every store keeps.
var base = time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)

// anchoredOn31st is a billing period whose subscription started on a 31st
// at 10:00 UTC: it ends on the last day of each shorter month.
var anchoredOn31st = limit.BillingPeriod.Anchored(time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC))

// drawMonth draws a month window: the calendar month, or one anchored on a
// day that short months lack, mid-month at an odd second, or anywhere.
func drawMonth(rt *rapid.T) limit.Window {
	day := 24 * time.Hour
	anchor := rapid.SampledFrom([]time.Duration{0, 30*day + 10*time.Hour, 28 * day, 14*day + 8*time.Hour + 30*time.Minute + 15*time.Second,
		time.Duration(rapid.Int64Range(0, int64(limit.MaxAnchor/time.Second)-1).Draw(rt, "anchor_s")) * time.Second}).Draw(rt, "anchor")
	return limit.Window{Month: true, Anchor: anchor}
}

func item(key string, alg limit.Algorithm, lim int64, w limit.Window) counter.Item {
	return counter.Item{Key: key, Algorithm: alg, Limit: lim, Window: w, Cost: 1}
}

var algorithms = []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}
