package counter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	it := counter.Item{Key: "k", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Minute), Cost: 1}
	two := []counter.Item{it, it}
	cases := []struct {
		name  string
		req   counter.Request
		valid bool
	}{
		{"plain", counter.Request{Items: two}, true},
		{"no ceilings", counter.Request{Items: two, Ceilings: 0}, true},
		{"one ceiling", counter.Request{Items: two, Ceilings: 1}, true},
		{"every item a ceiling", counter.Request{Items: two, Ceilings: 2}, true},
		{"every item a ceiling, peek", counter.Request{Mode: counter.Peek, Items: two, Ceilings: 2}, true},
		{"more ceilings than items", counter.Request{Items: two, Ceilings: 3}, false},
		{"negative ceilings", counter.Request{Items: two, Ceilings: -1}, false},

		{"no group", counter.Request{Items: two, Group: ""}, true},
		{"UUID group", counter.Request{Items: two, Group: "0b3f5c1e-6f3a-4a7e-9d2c-5b8e1f0a9c42"}, true},
		{"every allowed byte", counter.Request{Items: two, Group: "azAZ09_-"}, true},
		{"group of 64 bytes", counter.Request{Items: two, Group: strings.Repeat("g", 64)}, true},
		{"group of 65 bytes", counter.Request{Items: two, Group: strings.Repeat("g", 65)}, false},
		{"group with a slash", counter.Request{Items: two, Group: "a/b"}, false},
		{"group with a dot", counter.Request{Items: two, Group: "a.b"}, false},
		{"group with a brace", counter.Request{Items: two, Group: "a{b"}, false},
		{"group with a colon", counter.Request{Items: two, Group: "1:a"}, false},
		{"group with a space", counter.Request{Items: two, Group: " "}, false},
		{"group with a NUL", counter.Request{Items: two, Group: "a\x00"}, false},
		{"group with a non-ASCII letter", counter.Request{Items: two, Group: "é"}, false},
		{"group of invalid UTF-8", counter.Request{Items: two, Group: "\xff"}, false},

		{"now at the epoch", counter.Request{Items: two, Now: time.Unix(0, 0)}, true},
		{"now a microsecond before the epoch", counter.Request{Items: two, Now: time.Unix(0, 0).Add(-time.Microsecond)}, false},
		{"now a nanosecond before the epoch", counter.Request{Items: two, Now: time.Unix(0, -1)}, false},
		{"now the last microsecond of 2199", counter.Request{Items: two, Now: time.Date(2199, 12, 31, 23, 59, 59, 999999000, time.UTC)}, true},
		{"now 2200", counter.Request{Items: two, Now: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"now 2200 in another zone", counter.Request{Items: two, Now: time.Date(2199, 12, 31, 23, 0, 0, 0, time.FixedZone("", -3600))}, false},
		{"now 2^53 µs", counter.Request{Items: two, Now: time.UnixMicro(1 << 53)}, false},
		{"now past int64 µs", counter.Request{Items: two, Now: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		// 2^64 µs and a little: UnixMicro wraps round to 448,384 µs, in 1970.
		{"now whose µs wrap round into 1970", counter.Request{Items: two, Now: time.Unix(18446744073710, 0)}, false},
		{"now year 1", counter.Request{Items: two, Now: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := counter.Validate(c.req)
			if got := err == nil; got != c.valid {
				t.Fatalf("Validate: got %v, want valid %v", err, c.valid)
			}
			if err != nil && !errors.Is(err, counter.ErrInvalid) {
				t.Fatalf("Validate: got %v, want it to wrap ErrInvalid", err)
			}
		})
	}
}

// TestAnswerLeavesAdvisoryOut checks Result.Allowed: every item that is not
// advisory allowed, whatever the advisory ones answered, and each item's
// own Decision keeps its verdict.
func TestAnswerLeavesAdvisoryOut(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)
	it := counter.Item{Key: "k", Algorithm: limit.FixedWindow, Limit: 1, Window: limit.Every(time.Minute), Cost: 1}
	adv := it
	adv.Advisory = true
	cases := []struct {
		name  string
		items []counter.Item
		seen  []bool
		want  bool
	}{
		{"enforced allows", []counter.Item{it}, []bool{true}, true},
		{"enforced refuses", []counter.Item{it}, []bool{false}, false},
		{"advisory refuses beside an enforced item that allows", []counter.Item{it, adv}, []bool{true, false}, true},
		{"advisory allows beside an enforced item that refuses", []counter.Item{adv, it}, []bool{true, false}, false},
		{"every item advisory, all refusing", []counter.Item{adv, adv}, []bool{false, false}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seen := make([]counter.Seen, len(c.seen))
			for i, ok := range c.seen {
				seen[i].Allowed = ok
			}
			res := counter.Answer(counter.Request{Items: c.items}, seen, now)
			if res.Allowed != c.want {
				t.Fatalf("Allowed: got %v, want %v", res.Allowed, c.want)
			}
			for i, d := range res.Decisions {
				if d.Allowed != c.seen[i] {
					t.Fatalf("item %d: got allowed %v, want its own verdict %v", i, d.Allowed, c.seen[i])
				}
			}
		})
	}
}

// BenchmarkAnswer is Answer for a check as the gate sends one: four
// ceilings and a policy on distinct keys, every item admitted.
func BenchmarkAnswer(b *testing.B) {
	now := time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)
	var req counter.Request
	for i, k := range []string{"ip:check:0123456789abcdef0123456789abcdef", "quota:minute", "quota:hour", "allotment", "p:login:0123456789abcdef0123456789abcdef"} {
		req.Items = append(req.Items, counter.Item{Key: k, Algorithm: limit.Algorithm(i%3 + 1), Limit: 1000, Window: limit.Every(time.Minute), Cost: 1})
	}
	req.Ceilings = 4
	seen := make([]counter.Seen, len(req.Items))
	for i := range seen {
		seen[i] = counter.Seen{State: limit.State{Start: now.Add(-time.Second).UnixMicro(), Count: 10, TAT: 1e6}, Allowed: true}
	}
	b.ReportAllocs()
	for b.Loop() {
		counter.Answer(req, seen, now)
	}
}
