package envoyconf_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// BenchmarkCatalogMemory parses files of about MaxSource bytes as a
// Catalog's load does (ns/op is one file's parse), and reports the heap a
// parsed file keeps per byte of the file (heap-B/file-B), which
// CatalogConfig.MaxBytes bounds through the files' sizes: MaxTenantRules
// rules of short keys, the rules of 256-byte keys and values that fit, and
// a file that is mostly comments.
func BenchmarkCatalogMemory(b *testing.B) {
	short := func() string {
		var s strings.Builder
		s.WriteString("domain: d\ndescriptors:\n")
		for i := range envoyconf.MaxRules {
			fmt.Fprintf(&s, "  - {key: k%d, rate_limit: {unit: day, requests_per_unit: 1}}\n", i)
		}
		return s.String()
	}()
	long := func() string {
		var s strings.Builder
		s.WriteString("domain: d\ndescriptors:\n")
		for i := 0; ; i++ {
			line := fmt.Sprintf("  - {key: k%0255d, value: v%0255d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i, i)
			if s.Len()+len(line) > envoyconf.MaxSource {
				break
			}
			s.WriteString(line)
		}
		return s.String()
	}()
	comments := "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n" +
		strings.Repeat("# "+strings.Repeat("x", 77)+"\n", (envoyconf.MaxSource-100)/80)
	for _, bc := range []struct{ name, src string }{{"short-rules", short}, {"long-rules", long}, {"comments", comments}} {
		b.Run(bc.name, func(b *testing.B) {
			src := []byte(bc.src)
			if len(src) > envoyconf.MaxSource {
				b.Fatalf("%d bytes", len(src))
			}
			// What a parsed file keeps, measured over kept of them.
			const kept = 20
			cs := make([]*envoyconf.Config, kept)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range cs {
				c, err := envoyconf.Parse("d", src)
				if err != nil {
					b.Fatal(err)
				}
				cs[i] = c
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(cs)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := envoyconf.Parse("d", src); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/kept/float64(len(src)), "heap-B/file-B")
			b.ReportMetric(float64(len(src)), "file-B")
		})
	}
}
