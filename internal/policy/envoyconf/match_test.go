package envoyconf_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// matching holds every way GetLimit of envoyproxy/ratelimit picks (or does
// not pick) a rule; each rule's requests_per_unit tells which matched.
const matching = `
domain: m
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: ex*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: e*
    rate_limit: {unit: second, requests_per_unit: 4}
  # Matched, with no limit and nothing under it: white-listed.
  - key: k
    value: whitelisted
  - key: nest
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: sub
        rate_limit: {unit: minute, requests_per_unit: 6}
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: x_y
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: wild*
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: global
    rate_limit: {unit: second, requests_per_unit: 10, scope: global}
  - key: rep
    value: x*y*y*z
    rate_limit: {unit: second, requests_per_unit: 11}
  - key: pal
    value: ab*ba
    rate_limit: {unit: second, requests_per_unit: 12}
`

func TestMatch(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "m", matching)
	for _, tc := range []struct {
		name  string
		entry []envoyconf.Entry
		limit int64 // 0: no rule
	}{
		{"key and value first", d("k", "exact"), 2},
		{"then a wildcard, the first in the file that matches", d("k", "exa"), 3},
		{"a later wildcard when the first does not match", d("k", "eee"), 4},
		{"then the key alone", d("k", "other"), 1},
		{"an empty value falls to the key alone", d("k", ""), 1},
		{"a matched descriptor without a limit does not fall back to the key", d("k", "whitelisted"), 0},
		{"an unknown key", d("nope", "x"), 0},
		{"no entries", nil, 0},
		{"depth 1", d("nest", "x"), 5},
		{"depth 2", d("nest", "x", "sub", "y"), 6},
		{"deeper than the file", d("nest", "x", "sub", "y", "more", "z"), 0},
		{"a second entry the file does not have", d("nest", "x", "nope", "y"), 0},
		{"a limit at depth 1 does not apply to a descriptor of 2", d("k", "exact", "sub", "y"), 0},
		{"keys are case-sensitive", d("K", "exact"), 0},
		{"key_value joined by _: the value's _", d("a", "b_c"), 7},
		{"key_value joined by _: the key's _", d("a_b", "c"), 7},
		{"key_value joined by _: a key with _ in the file", d("x", "y"), 8},
		{"the key with _ alone", d("x_y", "z"), 8},
		{"a wildcard in a key", d("wildcat", "x"), 9},
		{"a wildcard in a key, no value", d("wild", ""), 9},
		{"a part of a wildcard twice", d("rep", "xyyz"), 11},
		{"the stars match empty runs", d("rep", "xyy-z"), 11},
		{"one byte does not serve two parts", d("rep", "xyz"), 0},
		{"the first and last parts do not overlap", d("pal", "aba"), 0},
		{"the first and last parts side by side", d("pal", "abba"), 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := c.Match(tc.entry)
			var got int64
			if m.Rule != nil {
				got = m.Rule.Policy.Limit
			}
			if got != tc.limit || m.Unlimited || m.Replaced {
				t.Fatalf("got rule of %d (%+v), want %d", got, m, tc.limit)
			}
			if m.Rule == nil && m.Subject != "" {
				t.Fatalf("got subject %q without a rule", m.Subject)
			}
		})
	}
}

func TestSubject(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "m", matching)
	subject := func(es []envoyconf.Entry) string {
		t.Helper()
		m := c.Match(es)
		if m.Rule == nil {
			t.Fatalf("%v: no rule", es)
		}
		return m.Subject
	}
	// Pairs of descriptors of one rule that a careless join would confuse.
	for _, pair := range [][2][]envoyconf.Entry{
		{d("nest", "a|b", "sub", "c"), d("nest", "a|", "sub", "bc")},
		{d("nest", "a&sub=b", "sub", "c"), d("nest", "a", "sub", "b&sub=c")},
		{d("nest", "a=b", "sub", "c"), d("nest", "a", "sub", "b=c")},
		{d("nest", "a%26", "sub", "c"), d("nest", "a&", "sub", "c")},
		{d("nest", "", "sub", "c"), d("nest", "c", "sub", "")},
		{d("k", "other"), d("k", "other\x00")},
		{d("k", "\xff"), d("k", "%FF")},
		{d("wildcat", "x"), d("wildcow", "x")},
	} {
		if a, b := subject(pair[0]), subject(pair[1]); a == b {
			t.Fatalf("%q and %q share the subject %q", pair[0], pair[1], a)
		}
	}
	for _, es := range [][]envoyconf.Entry{d("k", ""), d("k", "\xff\x00\x7f"), d("k", "ünïcode ✓"), d("nest", "", "sub", "")} {
		s := subject(es)
		if s == "" || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			t.Fatalf("%q: got subject %q, want non-empty UTF-8 text without NUL", es, s)
		}
	}
	if got := subject(d("k", "203.0.113.7")); got != "k=203.0.113.7" {
		t.Fatalf("got %q, want the readable k=203.0.113.7", got)
	}
	if got := subject(d("nest", "a", "sub", "b")); got != "nest=a&sub=b" {
		t.Fatalf("got %q, want nest=a&sub=b", got)
	}
	// Scope global: one counter for the rule, whatever the values.
	if m := c.Match(d("global", "x")); m.Rule == nil || m.Subject != "" {
		t.Fatalf("got %+v, want the global rule and no subject", m)
	}
}

const replacing = `
domain: r
descriptors:
  - key: a
    rate_limit: {name: a, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {name: b, unit: second, requests_per_unit: 2, replaces: [{name: a}]}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 3, replaces: [{name: b}]}
  - key: u
    rate_limit: {name: u, unlimited: true, replaces: [{name: z}]}
  - key: z
    rate_limit: {name: z, unit: second, requests_per_unit: 0}
  - key: v
    rate_limit: {unit: second, requests_per_unit: 4, replaces: [{name: u}]}
`

func TestMatchAllReplaces(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "r", replacing)
	const applies, replaced, unlimited, none = "applies", "replaced", "unlimited", "none"
	for _, tc := range []struct {
		name string
		keys []string
		want []string
	}{
		{"alone", []string{"a"}, []string{applies}},
		{"b replaces a", []string{"a", "b"}, []string{replaced, applies}},
		{"in any order", []string{"b", "a"}, []string{applies, replaced}},
		{"a replaced rule still replaces", []string{"a", "b", "c"}, []string{replaced, replaced, applies}},
		{"only what is named", []string{"a", "c"}, []string{applies, applies}},
		{"an unlimited rule replaces", []string{"u", "z"}, []string{unlimited, replaced}},
		{"an unlimited rule is not replaced", []string{"v", "u"}, []string{applies, unlimited}},
		{"the same rule twice", []string{"b", "b"}, []string{applies, applies}},
		{"an unmatched descriptor", []string{"nope", "b", "a"}, []string{none, applies, replaced}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var req [][]envoyconf.Entry
			for _, k := range tc.keys {
				req = append(req, d(k, "x"))
			}
			ms := c.MatchAll(req)
			if len(ms) != len(req) {
				t.Fatalf("got %d matches for %d descriptors", len(ms), len(req))
			}
			for i, m := range ms {
				got := none
				switch {
				case m.Rule != nil:
					got = applies
				case m.Replaced:
					got = replaced
				case m.Unlimited:
					got = unlimited
				}
				if got != tc.want[i] {
					t.Fatalf("descriptor %d (%s): got %s, want %s", i, tc.keys[i], got, tc.want[i])
				}
				if m.Rule == nil && m.Subject != "" {
					t.Fatalf("descriptor %d: subject %q without a rule", i, m.Subject)
				}
			}
		})
	}
	if ms := c.MatchAll(nil); len(ms) != 0 {
		t.Fatalf("got %d matches for no descriptor", len(ms))
	}
}
