package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/testkit/countertest"
)

// TestTenantWithinItsShareKeepsItsCounters pushes random streams of several
// tenants' checks through a store of a small bound, some tenants drawing
// their subjects from many times the bound. A tenant whose subjects fit in
// its share of every shard (its subjects in the shard, times the tenants,
// at most the shard's bound) never has a counter forgotten: its answers are
// a model's without bound, field for field, whatever the others send.
func TestTenantWithinItsShareKeepsItsCounters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bound := rapid.IntRange(4, 80).Draw(t, "bound")
		s := New(Config{MaxKeys: bound, PruneEvery: -1})
		defer s.Close()
		// The keyless group "" is one tenant among the others.
		groups := []string{"", "t1", "t2", "t3"}[:rapid.IntRange(2, 4).Draw(t, "tenants")]
		subjects := make([]int, len(groups))
		fits := make([]bool, len(groups))
		for j, g := range groups {
			subjects[j] = rapid.OneOf(rapid.IntRange(1, bound), rapid.IntRange(bound, 8*bound)).Draw(t, "subjects")
			var in [maxShards]int
			for i := range subjects[j] {
				in[s.shardOf(s.digestOf([]byte(g+"\x00"+fmt.Sprint("s", i))))]++
			}
			fits[j] = true
			for i, n := range in {
				fits[j] = fits[j] && n*len(groups) <= s.shards[i].max
			}
		}
		m := countertest.NewModel()
		now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
		for step := range rapid.IntRange(1, 1000).Draw(t, "steps") {
			now = now.Add(rapid.SampledFrom([]time.Duration{0, 0, time.Millisecond, time.Second, time.Minute}).Draw(t, "later"))
			j := rapid.IntRange(0, len(groups)-1).Draw(t, "tenant")
			req := counter.Request{Group: groups[j], Now: now}
			if rapid.IntRange(0, 4).Draw(t, "peek") == 0 {
				req.Mode = counter.Peek
			}
			for range rapid.IntRange(1, 2).Draw(t, "items") {
				// A subject is always checked against the same limit: a
				// counter expires by its last writer's window.
				i := rapid.IntRange(0, subjects[j]-1).Draw(t, "subject")
				w := limit.Every(10 * time.Second)
				if i%2 == 1 {
					w = limit.Every(time.Hour)
				}
				req.Items = append(req.Items, counter.Item{
					Key: fmt.Sprint("s", i), Algorithm: limit.Algorithm(1 + i%3), Limit: int64(1 + i%5), Window: w,
					Cost: rapid.Int64Range(1, 2).Draw(t, "cost"),
				})
			}
			req.Ceilings = rapid.IntRange(0, len(req.Items)).Draw(t, "ceilings")
			got, err := s.Check(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !fits[j] {
				continue
			}
			if want := m.Check(req, now); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d, tenant %q of %d subjects within its share of a bound of %d among %d tenants, %+v:\n got  %+v\n want %+v", step, groups[j], subjects[j], bound, len(groups), req, got, want)
			}
		}
	})
}
