package envoyconf_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		line      int
		reason    string // a part of the reason
	}{
		{"empty file", "", 0, "empty"},
		{"comments only", "# nothing\n", 0, "empty"},
		{"not YAML", "domain: d\ndescriptors: [\n", 2, "not valid YAML"},
		{"a list at the top", "- domain: d\n", 1, "mapping"},
		{"two documents", "domain: d\n---\ndomain: d\n", 2, "one YAML document"},
		{"no domain", "descriptors: []\n", 1, "domain is required"},
		{"another domain", "domain: other\n", 1, `"other" is not the domain "d"`},
		{"domain twice", "domain: d\ndomain: d\n", 2, "repeats"},
		{"unknown field at the top", "domain: d\ndescriptor: []\n", 2, `unknown field "descriptor"`},
		{"descriptors not a list", "domain: d\ndescriptors: 3\n", 2, "list"},
		{"a descriptor not a mapping", "domain: d\ndescriptors:\n  - a\n", 3, "mapping"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", 3, "key is required"},
		{"float value", "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n", 4, "quote"},
		{"list as key", "domain: d\ndescriptors:\n  - key: [a]\n", 3, "text"},
		{"misspelled rate_limit (the reference's misspelled_key.yaml)",
			"domain: d\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
			5, `did you mean "rate_limit"`},
		{"misspelled requests_per_unit (misspelled_key2.yaml)",
			"domain: d\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
			6, `did you mean "requests_per_unit"`},
		{"a field at the wrong level", "domain: d\ndescriptors:\n  - key: k\n    unit: second\n", 4, "belongs in rate_limit"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", 4, "line 3"},
		{"duplicate composite key", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a_b\n", 5, `"a_b"`},
		{"duplicate field", "domain: d\ndescriptors:\n  - key: k\n    key: k\n", 4, "repeats"},
		{"unit unknown (bad_limit_unit.yaml)", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n", 5, "unit"},
		{"unit unknown the enum's own way", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: unknown\n      requests_per_unit: 5\n", 5, "unit"},
		{"unit year", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 5\n", 5, "30 days"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n", 4, "unit is required"},
		{"no requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n", 4, "requests_per_unit is required"},
		{"requests_per_unit negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", 6, "requests_per_unit"},
		{"requests_per_unit above MaxLimit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000001\n", 6, "1000000000"},
		{"requests_per_unit quoted", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: \"5\"\n", 6, "integer"},
		{"requests_per_unit a float", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5.5\n", 6, "integer"},
		{"empty rate_limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n", 4, "rate_limit is empty"},
		{"unlimited with unit (unlimited_with_unit.yaml)", "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n", 6, "unlimited"},
		{"unlimited with a unit the reference would ignore", "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: fortnight\n", 6, "unlimited"},
		{"unlimited not a bool", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: maybe\n", 5, "true or false"},
		{"empty replaces (replaces_empty.yaml)", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name:\n", 8, "empty"},
		{"replaces itself (replaces_self.yaml)", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name: n\n", 9, "itself"},
		{"replaces a name no rule has", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name: nobody\n", 8, `"nobody"`},
		{"share_threshold without a wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", 5, "share_threshold"},
		{"quota_mode", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n", 4, "quota_mode"},
		{"metadata", "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a: b\n", 4, "metadata"},
		{"an alias", "domain: &x d\ndescriptors:\n  - key: *x\n", 3, "alias"},
		{"a merge key", "domain: d\ndescriptors:\n  - <<: {key: k}\n", 3, "merge"},
		{"algorithm concurrency", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: concurrency\n", 7, "algorithm"},
		{"window unknown", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n      window: 31d\n", 6, "window"},
		{"window billing", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n      window: billing\n", 6, "for policies"},
		{"month by a sliding window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n      window: month\n      algorithm: sliding_window\n", 6, "fixed_window"},
		{"unit month by a token bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: month\n      requests_per_unit: 5\n      algorithm: token_bucket\n", 5, "fixed_window"},
		{"fail_mode unknown", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      fail_mode: sometimes\n", 7, "fail_mode"},
		{"scope unknown", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      scope: tenant\n", 7, "scope"},
		{"extras on a deny rule", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n      algorithm: token_bucket\n", 7, "0"},
		{"extras on an unlimited rule", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      scope: global\n", 6, "unlimited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := envoyconf.Parse("d", []byte(tc.src))
			var pe *envoyconf.Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want an *envoyconf.Error", err)
			}
			if !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("got %v, want it to unwrap to policy.ErrInvalid", err)
			}
			if pe.Line != tc.line || !strings.Contains(pe.Reason, tc.reason) {
				t.Fatalf("got line %d %q, want line %d and a reason with %q", pe.Line, pe.Reason, tc.line, tc.reason)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	if got := (&envoyconf.Error{Line: 7, Reason: "unit is required"}).Error(); got != "line 7: unit is required" {
		t.Fatalf("got %q", got)
	}
	// An error of the file as a whole has no line to name.
	if got := (&envoyconf.Error{Reason: "the file is empty"}).Error(); got != "the file is empty" {
		t.Fatalf("got %q", got)
	}
	field, reason := (&envoyconf.Error{Line: 7, Reason: "unit is required"}).ClientFault()
	if field != "" || reason != "line 7: unit is required" {
		t.Fatalf("got %q %q", field, reason)
	}
}

func TestParseDomainArgument(t *testing.T) {
	t.Parallel()
	for _, domain := range []string{"", strings.Repeat("d", envoyconf.MaxText+1)} {
		if _, err := envoyconf.Parse(domain, []byte("domain: x\n")); !errors.Is(err, policy.ErrInvalid) {
			t.Fatalf("domain of %d bytes: got %v, want ErrInvalid", len(domain), err)
		}
	}
	long := strings.Repeat("d", envoyconf.MaxText)
	if _, err := envoyconf.Parse(long, []byte("domain: "+long+"\n")); err != nil {
		t.Fatalf("domain of %d bytes: %v", envoyconf.MaxText, err)
	}
}

// rule is a one-rule file of domain "d" with the given rate_limit fields.
func rule(fields string) string {
	return "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n" + indent(fields, "      ")
}

func indent(s, by string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		b.WriteString(by + strings.TrimSpace(l) + "\n")
	}
	return b.String()
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	base := policy.Policy{Limit: 5, Algorithm: limit.FixedWindow, Scope: policy.ScopeSubject, FailMode: policy.FailOpen}
	with := func(f func(*policy.Policy)) policy.Policy { p := base; f(&p); return p }
	for _, tc := range []struct {
		name, fields string
		want         policy.Policy
		unit         string
	}{
		{"second", "unit: second\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(time.Second) }), "second"},
		{"unit in capitals, as the reference reads it", "unit: SECOND\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(time.Second) }), "second"},
		{"minute", "unit: minute\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(time.Minute) }), "minute"},
		{"hour", "unit: Hour\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(time.Hour) }), "hour"},
		{"day", "unit: day\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(24 * time.Hour) }), "day"},
		{"week: 7 days from the epoch, as the reference counts it", "unit: week\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(7 * 24 * time.Hour) }), "week"},
		{"month: the calendar month", "unit: month\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Month }), "month"},
		{"the reference's own month: window 30d", "unit: month\nwindow: 30d\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(30 * 24 * time.Hour) }), "month"},
		{"window without unit", "window: 15m\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Every(15 * time.Minute) }), ""},
		{"window overrides a year", "unit: year\nwindow: month\nrequests_per_unit: 5", with(func(p *policy.Policy) { p.Window = limit.Month }), "year"},
		{"sliding window", "unit: minute\nrequests_per_unit: 5\nalgorithm: sliding_window", with(func(p *policy.Policy) {
			p.Window, p.Algorithm = limit.Every(time.Minute), limit.SlidingWindow
		}), "minute"},
		{"token bucket, closed, global", "unit: hour\nrequests_per_unit: 5\nalgorithm: token_bucket\nfail_mode: closed\nscope: global", with(func(p *policy.Policy) {
			p.Window, p.Algorithm, p.FailMode, p.Scope = limit.Every(time.Hour), limit.TokenBucket, policy.FailClosed, policy.ScopeGlobal
		}), "hour"},
		{"MaxLimit", "unit: second\nrequests_per_unit: 1000000000", with(func(p *policy.Policy) { p.Window, p.Limit = limit.Every(time.Second), limit.MaxLimit }), "second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := envoyconf.Parse("d", []byte(rule(tc.fields)))
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Rules) != 1 || len(c.Policies()) != 1 {
				t.Fatalf("got %d rules, %d policies, want 1 and 1", len(c.Rules), len(c.Policies()))
			}
			got := c.Policies()[0]
			tc.want.Name = got.Name
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if got.Name != "envoy:d:k" {
				t.Fatalf("got name %q, want envoy:d:k", got.Name)
			}
			if c.Rules[0].Unit != tc.unit || c.Rules[0].Line != 4 {
				t.Fatalf("got unit %q line %d, want %q line 4", c.Rules[0].Unit, c.Rules[0].Line, tc.unit)
			}
		})
	}
}

func TestParseShadowAndNames(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "d", `
domain: d
descriptors:
  - key: k
    shadow_mode: yes
    rate_limit:
      name: main
      unit: second
      requests_per_unit: 5
  - key: other
    rate_limit:
      replaces: [{name: main}]
      unit: second
      requests_per_unit: 6
`)
	if r := c.Rules[0]; !r.Policy.Shadow || r.Name != "main" || r.Deny || r.Unlimited {
		t.Fatalf("got %+v, want shadow rule main", r)
	}
	if r := c.Rules[1]; r.Policy.Shadow || len(r.Replaces) != 1 || r.Replaces[0] != "main" {
		t.Fatalf("got %+v, want a rule replacing main", r)
	}
}

// Policy names are the rules' ids: one per rule, different across domains,
// never a native policy's name (policy.ValidateName refuses ":"), and the
// same for the same rule when the file is uploaded again.
func TestPolicyNames(t *testing.T) {
	t.Parallel()
	src := func(domain string) string {
		return fmt.Sprintf(`
domain: %q
descriptors:
  - key: a
    value: b/c
    descriptors:
      - key: d
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b
    descriptors:
      - key: c/d
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: "b:c"
    descriptors:
      - key: d
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: "x%%2Fy"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: x/y
    rate_limit: {unit: second, requests_per_unit: 1}
`, domain)
	}
	seen := map[string]string{}
	for _, domain := range []string{"a", "a:b", "a:b:c", "b", "a/b"} {
		c := mustParse(t, domain, src(domain))
		again := mustParse(t, domain, src(domain))
		for i, p := range c.Policies() {
			if !strings.HasPrefix(p.Name, "envoy:") || policy.ValidateName(p.Name) == nil {
				t.Fatalf("name %q: want an envoy: prefix and no native policy's name", p.Name)
			}
			if again.Policies()[i].Name != p.Name {
				t.Fatalf("name %q, then %q for the same rule", p.Name, again.Policies()[i].Name)
			}
			where := domain + " " + c.Rules[i].Key
			if prev, ok := seen[p.Name]; ok {
				t.Fatalf("name %q for %s and for %s", p.Name, prev, where)
			}
			seen[p.Name] = where
		}
	}
	// A name as long as the bounds allow is shortened to a digest, still one
	// per rule.
	long := strings.Repeat("k", envoyconf.MaxText)
	deep := "domain: d\ndescriptors:\n"
	for i := range envoyconf.MaxDepth {
		pad := strings.Repeat("    ", i)
		deep += pad + "  - key: " + long + "\n" + pad + "    value: " + long + "\n"
		if i < envoyconf.MaxDepth-1 {
			deep += pad + "    descriptors:\n"
		}
	}
	deep += strings.Repeat("    ", envoyconf.MaxDepth-1) + "    rate_limit: {unit: second, requests_per_unit: 1}\n"
	c := mustParse(t, "d", deep)
	if n := c.Policies()[0].Name; len(n) > envoyconf.MaxNameLen || !strings.HasPrefix(n, "envoy:") {
		t.Fatalf("got name %q (%d bytes), want at most %d bytes", n, len(n), envoyconf.MaxNameLen)
	}
}

func TestParseBounds(t *testing.T) {
	t.Parallel()
	t.Run("source", func(t *testing.T) {
		t.Parallel()
		src := "domain: d\n" + strings.Repeat("#", envoyconf.MaxSource)
		if _, err := envoyconf.Parse("d", []byte(src)); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "65536") {
			t.Fatalf("got %v, want a refusal naming the bound", err)
		}
		ok := "domain: d\n#" + strings.Repeat("#", envoyconf.MaxSource-12) + "\n"
		if _, err := envoyconf.Parse("d", []byte(ok)); err != nil {
			t.Fatalf("%d bytes: %v", len(ok), err)
		}
	})
	rules := func(n int) string {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		for i := range n {
			fmt.Fprintf(&b, "- key: k%d\n  rate_limit: {unit: second, requests_per_unit: 1}\n", i)
		}
		return b.String()
	}
	t.Run("rules", func(t *testing.T) {
		t.Parallel()
		c, err := envoyconf.Parse("d", []byte(rules(envoyconf.MaxRules)))
		if err != nil || len(c.Rules) != envoyconf.MaxRules {
			t.Fatalf("%d rules: %v", envoyconf.MaxRules, err)
		}
		_, err = envoyconf.Parse("d", []byte(rules(envoyconf.MaxRules+1)))
		var pe *envoyconf.Error
		if !errors.As(err, &pe) || pe.Line != 2*envoyconf.MaxRules+4 || !strings.Contains(pe.Reason, "1000") {
			t.Fatalf("%d rules: got %v, want a refusal at the last rule's rate_limit", envoyconf.MaxRules+1, err)
		}
	})
	nest := func(depth int) string {
		src := "domain: d\ndescriptors:\n"
		for i := range depth {
			pad := strings.Repeat("  ", i)
			src += pad + "- key: k\n" + pad + "  descriptors:\n"
		}
		return src
	}
	t.Run("depth", func(t *testing.T) {
		t.Parallel()
		if _, err := envoyconf.Parse("d", []byte(nest(envoyconf.MaxDepth))); err != nil {
			t.Fatalf("depth %d: %v", envoyconf.MaxDepth, err)
		}
		_, err := envoyconf.Parse("d", []byte(nest(envoyconf.MaxDepth+1)))
		var pe *envoyconf.Error
		if !errors.As(err, &pe) || pe.Line != 2*envoyconf.MaxDepth+3 || !strings.Contains(pe.Reason, "8") {
			t.Fatalf("depth %d: got %v, want a refusal at line %d", envoyconf.MaxDepth+1, err, 2*envoyconf.MaxDepth+3)
		}
	})
	t.Run("text", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("x", envoyconf.MaxText)
		for field, src := range map[string]string{
			"key":   "domain: d\ndescriptors:\n  - value: v\n    key: ",
			"value": "domain: d\ndescriptors:\n  - key: k\n    value: ",
		} {
			if _, err := envoyconf.Parse("d", []byte(src+long+"\n")); err != nil {
				t.Fatalf("%s of %d bytes: %v", field, len(long), err)
			}
			_, err := envoyconf.Parse("d", []byte(src+long+"x\n"))
			var pe *envoyconf.Error
			if !errors.As(err, &pe) || pe.Line != 4 || !strings.Contains(pe.Reason, "256") {
				t.Fatalf("%s of %d bytes: got %v", field, len(long)+1, err)
			}
		}
		if _, err := envoyconf.Parse("d", []byte(rule("name: "+long+"x\nunit: second\nrequests_per_unit: 1"))); !errors.Is(err, policy.ErrInvalid) {
			t.Fatalf("a name of %d bytes: got %v", len(long)+1, err)
		}
	})
	t.Run("wildcards", func(t *testing.T) {
		t.Parallel()
		src := func(n int) string {
			var b strings.Builder
			b.WriteString("domain: d\ndescriptors:\n")
			for i := range n {
				fmt.Fprintf(&b, "- key: k\n  value: v%d*\n", i)
			}
			return b.String()
		}
		if _, err := envoyconf.Parse("d", []byte(src(envoyconf.MaxWildcards))); err != nil {
			t.Fatalf("%d wildcards: %v", envoyconf.MaxWildcards, err)
		}
		_, err := envoyconf.Parse("d", []byte(src(envoyconf.MaxWildcards+1)))
		var pe *envoyconf.Error
		if !errors.As(err, &pe) || pe.Line != 2*envoyconf.MaxWildcards+3 {
			t.Fatalf("%d wildcards: got %v", envoyconf.MaxWildcards+1, err)
		}
	})
}
