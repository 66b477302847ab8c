package countertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// ceilingsWithoutPolicies refuses a request by one of its policies: its
// ceilings are consumed all the same, its policies (the one that allowed
// too) are not.
func ceilingsWithoutPolicies(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip, quota := item("ip-"+alg.String(), alg, 10, w), item("quota-"+alg.String(), alg, 10, w)
			spare, spent := item("spare-"+alg.String(), alg, 5, w), item("spent-"+alg.String(), alg, 1, w)
			if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
				t.Fatalf("spending the policy: refused %+v", res)
			}
			req := counter.Request{Ceilings: 2, Items: []counter.Item{ip, quota, spare, spent}, Now: base}
			for i := range 3 {
				res := check(t, s, req)
				got := []bool{res.Allowed, res.Decisions[0].Allowed, res.Decisions[1].Allowed, res.Decisions[2].Allowed, res.Decisions[3].Allowed}
				if want := []bool{false, true, true, true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("request %d: allowed (request, items) %v, want %v", i, got, want)
				}
			}
			// Three ceilings consumed, and the peek's own.
			for _, it := range []counter.Item{ip, quota} {
				if got := remaining(t, s, it); got != 7 {
					t.Errorf("ceiling %s after 3 requests refused by a policy: peek remaining %d, want 7", it.Key, got)
				}
			}
			if got := remaining(t, s, spare); got != 5 {
				t.Errorf("policy that allowed, in 3 refused requests: peek remaining %d, want 5 (untouched)", got)
			}
			if got := remaining(t, s, spent); got != 0 {
				t.Errorf("policy that refused: peek remaining %d, want 0", got)
			}
		})
	}
}

// ceilingRefuses refuses a request by one of its ceilings, in either mode:
// nothing is consumed, not even the ceilings that allowed.
func ceilingRefuses(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip, quota, policy := item("ip-"+alg.String(), alg, 10, w), item("quota-"+alg.String(), alg, 1, w), item("policy-"+alg.String(), alg, 5, w)
			if res := check(t, s, counter.Request{Items: []counter.Item{quota}, Now: base}); !res.Allowed {
				t.Fatalf("spending the quota: refused %+v", res)
			}
			for _, mode := range []counter.Mode{counter.Consume, counter.Peek} {
				res := check(t, s, counter.Request{Mode: mode, Ceilings: 2, Items: []counter.Item{ip, quota, policy}, Now: base})
				got := []bool{res.Allowed, res.Decisions[0].Allowed, res.Decisions[1].Allowed, res.Decisions[2].Allowed}
				if want := []bool{false, true, false, true}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("mode %d: allowed (request, items) %v, want %v", mode, got, want)
				}
			}
			if got := remaining(t, s, ip); got != 10 {
				t.Errorf("ceiling that allowed beside one that refused: peek remaining %d, want 10 (untouched)", got)
			}
			if got := remaining(t, s, policy); got != 5 {
				t.Errorf("policy behind a refusing ceiling: peek remaining %d, want 5 (untouched)", got)
			}
		})
	}
}

// peekWithCeilings peeks with ceilings: the ceilings are consumed, the
// policies are not; with every item a ceiling, every item is consumed.
func peekWithCeilings(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip, policy := item("ip-"+alg.String(), alg, 10, w), item("policy-"+alg.String(), alg, 5, w)
			res := check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 1, Items: []counter.Item{ip, policy}, Now: base})
			if !res.Allowed || res.Decisions[0].Remaining != 9 || res.Decisions[1].Remaining != 5 {
				t.Fatalf("peek with a ceiling: got %+v, want allowed, remaining 9 (counted) and 5 (not)", res)
			}
			if got := remaining(t, s, ip); got != 9 {
				t.Errorf("ceiling after a peek: peek remaining %d, want 9 (consumed once)", got)
			}
			if got := remaining(t, s, policy); got != 5 {
				t.Errorf("policy after a peek: peek remaining %d, want 5 (untouched)", got)
			}
			check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 2, Items: []counter.Item{ip, policy}, Now: base})
			if got := []int64{remaining(t, s, ip), remaining(t, s, policy)}; got[0] != 8 || got[1] != 4 {
				t.Errorf("after a peek whose items are all ceilings: peek remaining %v, want [8 4]", got)
			}
		})
	}
}

// ceilingAndPolicyOnOneKey names one key as a ceiling and as a policy: the
// policy sees what the ceiling took, and when the request keeps its
// ceilings alone, the key keeps the ceiling's consumption alone, even when
// the policy on it allowed.
func ceilingAndPolicyOnOneKey(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			ceiling := item("both-"+alg.String(), alg, 10, limit.Every(time.Hour))
			policy := ceiling
			spent := item("spent-"+alg.String(), alg, 1, limit.Every(time.Hour))
			if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
				t.Fatalf("spending a policy: refused %+v", res)
			}

			ceiling.Cost, policy.Cost = 6, 6
			res := check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy}, Now: base})
			if res.Allowed || !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
				t.Fatalf("6 then 6 on a limit of 10: got %+v, want the policy refused", res)
			}
			if got := remaining(t, s, ceiling); got != 4 {
				t.Fatalf("after the policy refused: peek remaining %d, want 4 (the ceiling's 6 consumed)", got)
			}

			ceiling.Cost, policy.Cost = 1, 1
			res = check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy, spent}, Now: base})
			if res.Allowed || !res.Decisions[0].Allowed || !res.Decisions[1].Allowed || res.Decisions[0].Remaining != 3 || res.Decisions[1].Remaining != 3 || res.Decisions[2].Allowed {
				t.Fatalf("1 then 1 on the 4 left, then a spent policy: got %+v, want both allowed, both with the 3 the ceiling left, the spent one refused", res)
			}
			if got := remaining(t, s, ceiling); got != 3 {
				t.Fatalf("after another policy refused: peek remaining %d, want 3 (the ceiling's 1 consumed, not the policy's)", got)
			}

			ceiling.Cost, policy.Cost = 1, 2
			if res := check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{ceiling, policy}, Now: base}); !res.Allowed || res.Decisions[1].Remaining != 0 {
				t.Fatalf("1 then 2 on the 3 left: got %+v, want allowed, remaining 0", res)
			}
			if got := remaining(t, s, ceiling); got != 0 {
				t.Fatalf("after both were consumed: peek remaining %d, want 0", got)
			}
		})
	}
}

// advisory returns it marked advisory, as a shadow policy's item is.
func advisory(it counter.Item) counter.Item {
	it.Advisory = true
	return it
}

// allowed lists a result's verdicts: the request's, then each item's.
func allowed(res counter.Result) string {
	got := []bool{res.Allowed}
	for _, d := range res.Decisions {
		got = append(got, d.Allowed)
	}
	return fmt.Sprint(got)
}

// advisoryRefuses puts an enforced item that allows and an advisory one that
// refuses in the policies' tier: the request is allowed and the enforced item
// consumed; the advisory item's decision says it refused, its counter is
// untouched, and a later item on its key sees nothing of it.
func advisoryRefuses(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			enforced := item("enforced-"+alg.String(), alg, 5, w)
			shadow := item("shadow-"+alg.String(), alg, 3, w)
			shadow.Cost = 2
			if res := check(t, s, counter.Request{Items: []counter.Item{shadow}, Now: base}); !res.Allowed {
				t.Fatalf("spending 2 of the shadow policy's 3: refused %+v", res)
			}

			res := check(t, s, counter.Request{Items: []counter.Item{enforced, advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true true false]"; got != want {
				t.Fatalf("enforced that allows, advisory that refuses: allowed (request, items) %s, want %s", got, want)
			}
			if d := res.Decisions[1]; d.RetryAfter <= 0 || d.Remaining != 1 {
				t.Fatalf("advisory item's decision: %+v, want a refusal with a retry and the 1 left remaining", d)
			}
			if got := remaining(t, s, enforced); got != 4 {
				t.Errorf("enforced item: peek remaining %d, want 4 (consumed once)", got)
			}
			if got := remaining(t, s, shadow); got != 1 {
				t.Errorf("advisory item that refused: peek remaining %d, want 1 (untouched)", got)
			}

			// A later item on the advisory item's key sees the 1 left, not a
			// consumption of the refused item.
			later := item(shadow.Key, alg, 3, w)
			res = check(t, s, counter.Request{Items: []counter.Item{advisory(shadow), later}, Now: base})
			if got, want := allowed(res), "[true false true]"; got != want || res.Decisions[1].Remaining != 0 {
				t.Fatalf("refused advisory item, then an item of cost 1 on its key: allowed (request, items) %s, remaining %d; want %s, remaining 0", got, res.Decisions[1].Remaining, want)
			}
			if got := remaining(t, s, shadow); got != 0 {
				t.Errorf("after the later item: peek remaining %d, want 0", got)
			}

			// A request of advisory items alone is allowed, whatever they answer.
			res = check(t, s, counter.Request{Items: []counter.Item{advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true false]"; got != want {
				t.Fatalf("one advisory item that refuses: allowed (request, items) %s, want %s", got, want)
			}
		})
	}
}

// advisoryTierFails puts an advisory item that allows beside an enforced one
// that refuses, in the policies' tier and in the ceilings': the tier fails,
// and neither is consumed.
func advisoryTierFails(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		for _, ceilings := range []int{0, 2} {
			t.Run(fmt.Sprint(alg, "/ceilings=", ceilings), func(t *testing.T) {
				w := limit.Every(time.Hour)
				suffix := fmt.Sprint(alg, "-", ceilings)
				shadow, spent := item("shadow-"+suffix, alg, 5, w), item("spent-"+suffix, alg, 1, w)
				if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
					t.Fatalf("spending the enforced item: refused %+v", res)
				}
				res := check(t, s, counter.Request{Ceilings: ceilings, Items: []counter.Item{advisory(shadow), spent}, Now: base})
				if got, want := allowed(res), "[false true false]"; got != want {
					t.Fatalf("advisory that allows, enforced that refuses: allowed (request, items) %s, want %s", got, want)
				}
				if got := remaining(t, s, shadow); got != 5 {
					t.Errorf("advisory item in a failed tier: peek remaining %d, want 5 (untouched)", got)
				}
				if got := remaining(t, s, spent); got != 0 {
					t.Errorf("enforced item that refused: peek remaining %d, want 0", got)
				}
			})
		}
	}
}

// advisoryCeilingRefuses puts an advisory item that refuses among the
// ceilings: the ceilings are kept all the same, without it, in either mode,
// and whether the policies are kept or not.
func advisoryCeilingRefuses(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			ip := item("ip-"+alg.String(), alg, 10, w)
			shadow := item("shadow-"+alg.String(), alg, 3, w)
			shadow.Cost = 2
			spare, spent := item("spare-"+alg.String(), alg, 5, w), item("spent-"+alg.String(), alg, 1, w)
			for _, it := range []counter.Item{shadow, spent} {
				if res := check(t, s, counter.Request{Items: []counter.Item{it}, Now: base}); !res.Allowed {
					t.Fatalf("spending %s: refused %+v", it.Key, res)
				}
			}

			// A policy refuses: the ceilings alone are kept.
			res := check(t, s, counter.Request{Ceilings: 2, Items: []counter.Item{ip, advisory(shadow), spare, spent}, Now: base})
			if got, want := allowed(res), "[false true false true false]"; got != want {
				t.Fatalf("advisory ceiling that refuses, a policy that refuses: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, ip), remaining(t, s, shadow), remaining(t, s, spare)}; fmt.Sprint(got) != "[9 1 5]" {
				t.Fatalf("after a request refused by a policy: peek remaining (ceiling, advisory ceiling, policy) %v, want [9 1 5]: the enforced ceiling alone consumed", got)
			}

			// Every policy allows: the request is kept but for the advisory
			// ceiling.
			res = check(t, s, counter.Request{Ceilings: 2, Items: []counter.Item{ip, advisory(shadow), spare}, Now: base})
			if got, want := allowed(res), "[true true false true]"; got != want {
				t.Fatalf("advisory ceiling that refuses, policies that allow: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, ip), remaining(t, s, shadow), remaining(t, s, spare)}; fmt.Sprint(got) != "[8 1 4]" {
				t.Fatalf("after an allowed request: peek remaining (ceiling, advisory ceiling, policy) %v, want [8 1 4]", got)
			}

			// A peek keeps the ceilings, the advisory one aside.
			res = check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 2, Items: []counter.Item{ip, advisory(shadow), spare}, Now: base})
			if got, want := allowed(res), "[true true false true]"; got != want {
				t.Fatalf("peek: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, ip), remaining(t, s, shadow), remaining(t, s, spare)}; fmt.Sprint(got) != "[7 1 4]" {
				t.Fatalf("after a peek: peek remaining (ceiling, advisory ceiling, policy) %v, want [7 1 4]", got)
			}
		})
	}
}

// advisoryConsumed checks that an advisory item that allows is consumed
// whenever its tier is: beside an enforced policy that allows, as a ceiling
// when a policy refuses, and as a ceiling of a peek; and not as a policy of
// a peek.
func advisoryConsumed(t *testing.T, b Backend) {
	s := open(t, b)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			w := limit.Every(time.Hour)
			enforced := item("enforced-"+alg.String(), alg, 5, w)
			shadow, shadowCeiling := item("shadow-"+alg.String(), alg, 5, w), item("shadow-ceiling-"+alg.String(), alg, 5, w)
			spent := item("spent-"+alg.String(), alg, 1, w)
			if res := check(t, s, counter.Request{Items: []counter.Item{spent}, Now: base}); !res.Allowed {
				t.Fatalf("spending a policy: refused %+v", res)
			}

			res := check(t, s, counter.Request{Items: []counter.Item{enforced, advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true true true]"; got != want {
				t.Fatalf("enforced and advisory that allow: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, enforced), remaining(t, s, shadow)}; fmt.Sprint(got) != "[4 4]" {
				t.Fatalf("after both allowed: peek remaining (enforced, advisory) %v, want [4 4]: both consumed", got)
			}

			res = check(t, s, counter.Request{Ceilings: 1, Items: []counter.Item{advisory(shadowCeiling), spent}, Now: base})
			if got, want := allowed(res), "[false true false]"; got != want {
				t.Fatalf("advisory ceiling, spent policy: allowed (request, items) %s, want %s", got, want)
			}
			if got := remaining(t, s, shadowCeiling); got != 4 {
				t.Fatalf("advisory ceiling kept beside a refusing policy: peek remaining %d, want 4 (consumed)", got)
			}

			res = check(t, s, counter.Request{Mode: counter.Peek, Ceilings: 1, Items: []counter.Item{advisory(shadowCeiling), advisory(shadow)}, Now: base})
			if got, want := allowed(res), "[true true true]"; got != want {
				t.Fatalf("peek of an advisory ceiling and policy: allowed (request, items) %s, want %s", got, want)
			}
			if got := []int64{remaining(t, s, shadowCeiling), remaining(t, s, shadow)}; fmt.Sprint(got) != "[3 4]" {
				t.Fatalf("after the peek: peek remaining (advisory ceiling, advisory policy) %v, want [3 4]: the ceiling alone consumed", got)
			}
		})
	}
}
