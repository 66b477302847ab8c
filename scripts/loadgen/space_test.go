package main

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestSpaceFill: the fill checks every counter once, in requests of at
// most per checks of one tenant, and the counters are SUBJECTS (rounded up
// to a whole number a tenant) whatever the tenants and policies.
func TestSpaceFill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                             string
		tenants, policies, subjects, per int
		want                             int
	}{
		{"one tenant, one policy", 1, 1, 1000, 16, 1000},
		{"a last short request", 1, 1, 1000, 300, 1000},
		{"ten tenants", 10, 1, 1000, 16, 1000},
		{"tenants that do not divide the subjects", 7, 1, 1000, 100, 1001},
		{"ten policies", 1, 10, 1000, 1000, 1000},
		{"more tenants than subjects", 100, 1, 10, 16, 100},
		{"one check a request", 3, 2, 12, 1, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := make([]string, tc.tenants)
			for i := range keys {
				keys[i] = fmt.Sprintf("key%d", i)
			}
			s := newSpace(keys, "bench", tc.policies, tc.subjects)
			seen := map[string]int{}
			for c := range s.chunks(tc.per) {
				k, rs := s.chunk(nil, c, tc.per)
				if len(rs) == 0 || len(rs) > tc.per {
					t.Fatalf("request %d: %d checks, want 1 to %d", c, len(rs), tc.per)
				}
				for _, it := range items(t, s.body(nil, rs)) {
					seen[keys[k]+" "+it.Policy+" "+it.Subject]++
				}
			}
			if len(seen) != tc.want {
				t.Errorf("got %d counters, want %d", len(seen), tc.want)
			}
			policies := map[string]bool{}
			for c, n := range seen {
				if n != 1 {
					t.Errorf("%s checked %d times, want once", c, n)
				}
				var key, p, subject string
				fmt.Sscan(c, &key, &p, &subject)
				policies[p] = true
			}
			if len(policies) != min(tc.policies, s.perTenant) {
				t.Errorf("got %d policies, want %d", len(policies), min(tc.policies, s.perTenant))
			}
		})
	}
}

type item struct{ Policy, Subject string }

// items reads a request's body: /v1/check's of one item, or
// /v1/check/batch's of one-item checks.
func items(t *testing.T, body []byte) []item {
	t.Helper()
	var one struct{ Items []item }
	var batch struct{ Checks []struct{ Items []item } }
	if err := json.Unmarshal(body, &batch); err == nil && batch.Checks != nil {
		var out []item
		for _, c := range batch.Checks {
			if len(c.Items) != 1 {
				t.Fatalf("%s: a check of %d items, want 1", body, len(c.Items))
			}
			out = append(out, c.Items[0])
		}
		return out
	}
	if err := json.Unmarshal(body, &one); err != nil || len(one.Items) != 1 {
		t.Fatalf("%s: not a check of one item (%v)", body, err)
	}
	return one.Items
}
