package envoyconf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// BenchmarkMatch is one descriptor's match: the common per-address rule,
// a nested one, and the worst a file within the bounds allows (MaxWildcards
// patterns that fail only after scanning the value, at each of MaxDepth levels) against values of
// 256 bytes and of 64 KiB.
func BenchmarkMatch(b *testing.B) {
	perAddress := mustParseB(b, "edge", `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
`)
	var worst strings.Builder
	worst.WriteString("domain: worst\ndescriptors:\n")
	for level := range envoyconf.MaxDepth {
		pad := strings.Repeat("  ", 2*level)
		for i := range envoyconf.MaxWildcards - 1 {
			fmt.Fprintf(&worst, "%s- key: k\n%s  value: a*z%d*c\n", pad, pad, i)
		}
		fmt.Fprintf(&worst, "%s- key: k\n%s  rate_limit: {unit: second, requests_per_unit: 1}\n%s  descriptors:\n", pad, pad, pad)
	}
	w := mustParseB(b, "worst", worst.String())
	deep := func(value string) []envoyconf.Entry {
		es := make([]envoyconf.Entry, envoyconf.MaxDepth)
		for i := range es {
			es[i] = envoyconf.Entry{Key: "k", Value: value}
		}
		return es
	}
	for _, bc := range []struct {
		name string
		c    *envoyconf.Config
		es   []envoyconf.Entry
	}{
		{"key", perAddress, d("remote_address", "203.0.113.7")},
		{"key_value", perAddress, d("remote_address", "50.0.0.5")},
		{"nested", perAddress, d("message_type", "marketing", "to_number", "2061111111")},
		{"worst/256B", w, deep("a" + strings.Repeat("b", 254) + "c")},
		{"worst/64KiB", w, deep("a" + strings.Repeat("b", 64<<10) + "c")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if m := bc.c.Match(bc.es); m.Rule == nil {
				b.Fatalf("%s: no rule", bc.name)
			}
			b.ReportAllocs()
			for b.Loop() {
				bc.c.Match(bc.es)
			}
		})
	}
}

func mustParseB(b *testing.B, domain, src string) *envoyconf.Config {
	b.Helper()
	c, err := envoyconf.Parse(domain, []byte(src))
	if err != nil {
		b.Fatalf("Parse: %v", err)
	}
	return c
}
