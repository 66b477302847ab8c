package envoyconf_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	"pgregory.net/rapid"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// The property tests match random descriptors against the files of the
// other tests and compare with model, a plain reading of GetLimit in
// envoyproxy/ratelimit's src/config/config_impl.go: lists walked in file
// order, wildcards as regular expressions.

type modelDescriptor struct {
	Key         string
	Value       string
	RateLimit   *struct{} `yaml:"rate_limit"`
	Descriptors []modelDescriptor
}

func (m modelDescriptor) composite() string {
	if m.Value == "" {
		return m.Key
	}
	return m.Key + "_" + m.Value
}

// glob reports whether s matches pattern, each "*" any run of bytes.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`).MatchString(s)
}

// model returns the Key of the rule (limited, deny or unlimited) that
// applies to entries, or "".
func model(list []modelDescriptor, entries []envoyconf.Entry) string {
	var path []string
	for i, e := range entries {
		var next *modelDescriptor
		full := e.Key + "_" + e.Value
		for j := range list {
			if list[j].composite() == full {
				next = &list[j]
				break
			}
		}
		for j := range list {
			if next == nil && strings.Contains(list[j].composite(), "*") && glob(list[j].composite(), full) {
				next = &list[j]
			}
		}
		for j := range list {
			if next == nil && list[j].composite() == e.Key {
				next = &list[j]
			}
		}
		if next == nil {
			return ""
		}
		path = append(path, next.composite())
		if i == len(entries)-1 && next.RateLimit != nil {
			return strings.Join(path, ".")
		}
		if len(next.Descriptors) == 0 {
			return ""
		}
		list = next.Descriptors
	}
	return ""
}

var propertyFiles = []string{matching, replacing, `
domain: s
descriptors:
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: n*d/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 300}
      - key: files
        rate_limit: {unit: minute, requests_per_unit: 301}
  - key: path
    value: /a*/*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: "*"
    descriptors:
      - key: "*_*"
        rate_limit: {unit: minute, requests_per_unit: 21}
`}

// drawEntries draws a descriptor: mostly one that walks the file (its
// "*" filled in, a key without value given one, now and then a value
// changed, an entry too many or too few), sometimes any entries at all.
func drawEntries(t *rapid.T, list []modelDescriptor, label string) []envoyconf.Entry {
	text := rapid.OneOf(
		rapid.SampledFrom([]string{"", "k", "exact", "ex", "e", "a", "b_c", "x", "y", "x_y", "wild", "nest", "sub",
			"global", "files", "top/x", "nd/", "n/d/", "path", "/a/b", "/ab", "*", "_", "u", "z", "v", "rep", "xyyz", "xyz"}),
		rapid.StringOf(rapid.SampledFrom([]rune("abekxyz_*/%&=|\x00é"))),
	)
	if rapid.IntRange(0, 3).Draw(t, label+" at random") == 0 {
		return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) envoyconf.Entry {
			return envoyconf.Entry{Key: text.Draw(t, "key"), Value: text.Draw(t, "value")}
		}), 0, 4).Draw(t, label)
	}
	fill := func(pattern string) string {
		parts := strings.Split(pattern, "*")
		for i := 1; i < len(parts); i++ {
			parts[i] = text.Draw(t, label+" star") + parts[i]
		}
		return strings.Join(parts, "")
	}
	var es []envoyconf.Entry
	for depth := rapid.IntRange(1, 4).Draw(t, label+" depth"); len(es) < depth && len(list) > 0; {
		dsc := rapid.SampledFrom(list).Draw(t, label+" descriptor")
		e := envoyconf.Entry{Key: fill(dsc.Key), Value: fill(dsc.Value)}
		if dsc.Value == "" || rapid.IntRange(0, 5).Draw(t, label+" change") == 0 {
			e.Value = text.Draw(t, label+" value")
		}
		es = append(es, e)
		list = dsc.Descriptors
	}
	if rapid.IntRange(0, 5).Draw(t, label+" one more") == 0 {
		es = append(es, envoyconf.Entry{Key: text.Draw(t, label+" key"), Value: text.Draw(t, label+" value")})
	}
	return es
}

func TestMatchProperties(t *testing.T) {
	t.Parallel()
	for _, src := range propertyFiles {
		var root struct {
			Domain      string
			Descriptors []modelDescriptor
		}
		if err := yaml.Unmarshal([]byte(src), &root); err != nil {
			t.Fatal(err)
		}
		c := mustParse(t, root.Domain, src)
		t.Run(root.Domain, func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(t *rapid.T) {
				a, b := drawEntries(t, root.Descriptors, "a"), drawEntries(t, root.Descriptors, "b")
				ma := c.Match(a)
				if again := c.Match(a); again != ma {
					t.Fatalf("Match is not deterministic: %+v then %+v", ma, again)
				}
				got := ""
				if ma.Rule != nil {
					got = ma.Rule.Key
				} else if ma.Unlimited {
					got = "unlimited"
				}
				want := model(root.Descriptors, a)
				if want != "" && got == "unlimited" {
					got = want // the model does not tell unlimited rules apart
				}
				if got != want {
					t.Fatalf("%q: got rule %q, the model %q", a, got, want)
				}
				if ma.Rule != nil && ma.Rule.Policy.Scope == policy.ScopeSubject && !strings.Contains(ma.Subject, "*") {
					// Without share_threshold's patterns, two descriptors
					// share a counter only when they are the same.
					mb := c.Match(b)
					if mb.Rule == ma.Rule && mb.Subject == ma.Subject && !equal(a, b) {
						t.Fatalf("%q and %q share the subject %q", a, b, ma.Subject)
					}
				}
				ms := c.MatchAll([][]envoyconf.Entry{a, b})
				if ms[0].Rule != nil && ms[0].Rule != ma.Rule || ms[0].Rule == nil && ma.Rule != nil && !ms[0].Replaced {
					t.Fatalf("MatchAll's first answer %+v, Match's %+v", ms[0], ma)
				}
			})
		})
	}
}

func equal(a, b []envoyconf.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzParse feeds Parse any bytes: it never panics, refuses only with an
// *Error that unwraps to policy.ErrInvalid, and whatever it accepts counts
// with limits and windows the counters accept and matches without
// panicking. Run it with go test -run '^$' -fuzz FuzzParse
// ./internal/policy/envoyconf/ (the plain test run tries the seeds only).
func FuzzParse(f *testing.F) {
	for _, s := range append(propertyFiles,
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: day, requests_per_unit: 5, algorithm: sliding_window, window: 7d, scope: global, fail_mode: closed}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n  - key: k\n    value: x\n    descriptors: [{key: y, rate_limit: {unit: second, requests_per_unit: 0}}]\n",
		"domain: &a d\ndescriptors: [*a]\n", "- x\n", "domain: d\n---\n", "") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		domain := "d"
		if i := strings.Index(src, "domain: "); i >= 0 {
			domain, _, _ = strings.Cut(src[i+len("domain: "):], "\n")
		}
		c, err := envoyconf.Parse(domain, []byte(src))
		if err != nil {
			var pe *envoyconf.Error
			if !errors.As(err, &pe) || !errors.Is(err, policy.ErrInvalid) || pe.Line < 0 || pe.Reason == "" {
				t.Fatalf("got %#v, want an *envoyconf.Error", err)
			}
			return
		}
		for _, r := range c.Rules {
			p := r.Policy
			if !r.Deny && !r.Unlimited && limit.Validate(p.Algorithm, p.Limit, 1, p.Window) != nil {
				t.Fatalf("rule %q: %+v does not count", r.Key, p)
			}
		}
		for _, r := range c.Rules {
			keys := strings.Split(r.Key, ".")
			var es []envoyconf.Entry
			for _, k := range keys {
				key, value, _ := strings.Cut(k, "_")
				es = append(es, envoyconf.Entry{Key: key, Value: value})
			}
			c.MatchAll([][]envoyconf.Entry{es, es[:len(es)-1]})
		}
	})
}
