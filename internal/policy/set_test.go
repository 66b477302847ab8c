package policy

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, subject string
		want             bool
	}{
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"abc", "ab", false},
		{"abc", "abcd", false},
		{"*", "", true},
		{"*", "anything/at all", true},
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*c", "abc", true},
		{"*c", "abcd", false},
		{"a*c", "ac", true},
		{"a*c", "a/b/c", true},
		{"a*c", "a/b/cd", false},
		{"203.0.113.*", "203.0.113.7", true},
		{"203.0.113.*", "203.0.1130.7", false},
		{"user:*:admin", "user:42:admin", true},
		{"user:*:admin", "user:42:admin:x", false},
		{"*a*b*", "xxaxxbxx", true},
		{"*a*b*", "xxbxxaxx", false},
		{"*ab", "aab", true},           // the "*" must take back what a partial match consumed
		{"*aab", "aaab", true},         // backtracking over a run
		{"a*b*c", "abbbbcbc", true},    // the last "*" absorbs more
		{"a*bc*bd", "abcbcbcbd", true}, // a later star retries from a later mark
		{"?", "x", false},              // "?" is literal
		{"?", "?", true},
		{"[a]", "a", false}, // "[" is literal
		{"[a]", "[a]", true},
		{`a\*`, `a\bc`, true}, // "\" escapes nothing
		{"ü*", "über", true},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.subject, func(t *testing.T) {
			t.Parallel()
			if got := Match(tt.pattern, tt.subject); got != tt.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.subject, got, tt.want)
			}
			if ref := matchRegexp(tt.pattern, tt.subject); ref != tt.want {
				t.Errorf("reference disagrees with the table: %v", ref)
			}
		})
	}
}

// matchRegexp is the reference Match is fuzzed against: each "*" as "any
// bytes", everything else literal.
func matchRegexp(pattern, subject string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`).MatchString(subject)
}

func FuzzMatch(f *testing.F) {
	f.Add("a*b*c", "aXbYc")
	f.Add("*ab", "aab")
	f.Add("*", "")
	f.Add("a**b", "ab")
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		// The regexp reference reads UTF-8; Match reads bytes, which agree
		// on valid UTF-8, the only kind ValidatePattern admits.
		if len(pattern) > 64 || len(subject) > 256 || !validUTF8(pattern) || !validUTF8(subject) {
			t.Skip()
		}
		if got, want := Match(pattern, subject), matchRegexp(pattern, subject); got != want {
			t.Errorf("Match(%q, %q) = %v, want %v", pattern, subject, got, want)
		}
	})
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestLimitFor(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	p := Policy{Name: "p", Limit: 10, Window: limit.Every(time.Minute), Scope: ScopeSubject}
	g := Policy{Name: "g", Limit: 100, Window: limit.Every(time.Minute), Scope: ScopeGlobal}
	set := NewSet([]Policy{p, g}, map[string][]Override{
		"p": {
			{Pattern: "user-1", Limit: 1},
			{Pattern: "user-*", Limit: 2},
			{Pattern: "user-1*", Limit: 3},
			{Pattern: "user-2*", Limit: 4},
			{Pattern: "*-9", Limit: 5},     // shorter than "user-*"
			{Pattern: "user-9*", Limit: 6}, // longer than "user-*" and "*-9"
			{Pattern: "use*-3", Limit: 7},  // as long as "user-*", and lexically before it
			{Pattern: "*-33", Limit: 8},    // as long as "us*3", and lexically before it
			{Pattern: "us*3", Limit: 18},
			{Pattern: "gone", Limit: 9, ExpiresAt: &past},
			{Pattern: "gone*", Limit: 11, ExpiresAt: &future},
			{Pattern: "old*", Limit: 12, ExpiresAt: &past},
			{Pattern: "ol*", Limit: 13, ExpiresAt: &future},
			{Pattern: "*", Limit: 14, ExpiresAt: &past},
			{Pattern: "a*z", Limit: 15},
			{Pattern: "a*", Limit: 16},
			{Pattern: "ends-now", Limit: 17, ExpiresAt: &now},
		},
		"g":     {{Pattern: "*", Limit: 1}},
		"other": {{Pattern: "*", Limit: 1}},
	})
	tests := []struct {
		name    string
		p       Policy
		subject string
		want    int64
	}{
		{"exact beats every wildcard", p, "user-1", 1},
		{"longer wildcard beats shorter", p, "user-12", 3},
		{"shorter wildcard when the longer does not match", p, "user-5", 2},
		{"longest of three", p, "user-9", 6},
		{"same length: lexically first", p, "user-3", 7},
		{"same length: lexically first, again", p, "usr-33", 8},
		{"expired exact gives way to a wildcard", p, "gone", 11},
		{"expired longer wildcard gives way to a shorter", p, "old-1", 13},
		{"expired catch-all does not apply", p, "nobody", 10},
		{"expiry is exclusive", p, "ends-now", 10},
		{"longer pattern by bytes", p, "abcz", 15},
		{"shorter only", p, "abc", 16},
		{"global policies ignore overrides", g, "anyone", 100},
		{"unknown policy", Policy{Name: "nope", Limit: 7}, "user-1", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := set.LimitFor(tt.p, tt.subject, now); got != tt.want {
				t.Errorf("LimitFor(%s, %q) = %d, want %d", tt.p.Name, tt.subject, got, tt.want)
			}
		})
	}
}

// TestLimitForAgainstReference compares LimitFor with the rules read
// literally (exact, else every unexpired wildcard in precedence order) on
// random overrides and subjects over a small alphabet, so that prefixes and
// lengths collide often.
func TestLimitForAgainstReference(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute), now.Add(time.Minute)
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(alphabet string, max int) string {
		b := make([]byte, 1+rng.IntN(max))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	p := Policy{Name: "p", Limit: 1_000_000, Scope: ScopeSubject}
	for round := range 200 {
		var ovs []Override
		seen := map[string]bool{}
		for i := range 1 + rng.IntN(40) {
			o := Override{Pattern: word("ab*/", 6), Limit: int64(i + 1)}
			if seen[o.Pattern] || strings.Contains(o.Pattern, "**") {
				continue
			}
			seen[o.Pattern] = true
			switch rng.IntN(3) {
			case 0:
				o.ExpiresAt = &past
			case 1:
				o.ExpiresAt = &future
			}
			ovs = append(ovs, o)
		}
		set := NewSet([]Policy{p}, map[string][]Override{"p": ovs})
		for range 50 {
			subject := word("ab/", 8)
			if got, want := set.LimitFor(p, subject, now), referenceLimit(p, ovs, subject, now); got != want {
				t.Fatalf("round %d: LimitFor(%q) = %d, want %d; overrides %v", round, subject, got, want, ovs)
			}
		}
	}
}

func referenceLimit(p Policy, ovs []Override, subject string, now time.Time) int64 {
	for _, o := range ovs {
		if o.Pattern == subject && o.Active(now) {
			return o.Limit
		}
	}
	var wild []Override
	for _, o := range ovs {
		if strings.Contains(o.Pattern, "*") && o.Active(now) && matchRegexp(o.Pattern, subject) {
			wild = append(wild, o)
		}
	}
	slices.SortFunc(wild, func(a, b Override) int {
		if precedes(a.Pattern, b.Pattern) {
			return -1
		}
		return 1
	})
	if len(wild) > 0 {
		return wild[0].Limit
	}
	return p.Limit
}

func TestSetLookup(t *testing.T) {
	t.Parallel()
	p := Policy{Name: "p", Limit: 10}
	set := NewSet([]Policy{p}, map[string][]Override{"ghost": {{Pattern: "*", Limit: 1}}})
	if got, ok := set.Lookup("p"); !ok || got != p {
		t.Errorf("Lookup(p) = %+v, %v", got, ok)
	}
	if _, ok := set.Lookup("ghost"); ok {
		t.Error("overrides of a missing policy made a policy")
	}
	if set.Len() != 1 {
		t.Errorf("Len = %d, want 1", set.Len())
	}
	var zero Set
	if _, ok := zero.Lookup("p"); ok || zero.Len() != 0 {
		t.Error("the zero Set is not empty")
	}
	if got := zero.LimitFor(p, "x", time.Now()); got != 10 {
		t.Errorf("zero Set LimitFor = %d, want 10", got)
	}
}

// BenchmarkLimitFor measures a subject that matches none of MaxOverrides
// patterns (of which NewSet keeps MaxWildcards): with literal prefixes (the
// index skips them) and with leading wildcards (every one is tried).
func BenchmarkLimitFor(b *testing.B) {
	for _, bb := range []struct {
		name    string
		pattern func(i int) string
	}{
		{"prefixed", func(i int) string { return fmt.Sprintf("203.0.%d.%d*", i/256, i%256) }},
		{"leading star", func(i int) string { return fmt.Sprintf("*.%d.%d", i/256, i%256) }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			p := Policy{Name: "p", Limit: 10, Scope: ScopeSubject}
			var ovs []Override
			for i := range MaxOverrides {
				ovs = append(ovs, Override{Pattern: bb.pattern(i), Limit: int64(i + 1)})
			}
			set := NewSet([]Policy{p}, map[string][]Override{"p": ovs})
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				set.LimitFor(p, "198.51.100.7", now)
			}
		})
	}
}

func TestMatchAgainstReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	word := func(alphabet string, max int) string {
		b := make([]byte, rng.IntN(max+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 20_000 {
		pattern, subject := word("ab*", 9), word("ab", 12)
		if got, want := Match(pattern, subject), matchRegexp(pattern, subject); got != want {
			t.Fatalf("Match(%q, %q) = %v, want %v", pattern, subject, got, want)
		}
	}
}

func TestNewSetKeepsTheWildcardsThatTakePrecedence(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	p := Policy{Name: "p", Limit: 1, Scope: ScopeSubject}
	// More wildcards than a policy may hold (rows stored before the bound):
	// the longest MaxWildcards are kept, the shortest dropped, and exact
	// overrides are all kept.
	var ovs []Override
	for i := range MaxWildcards + 10 {
		ovs = append(ovs, Override{Pattern: "u" + strings.Repeat("x", i) + "*", Limit: int64(100 + i)})
	}
	ovs = append(ovs, Override{Pattern: "exact", Limit: 7})
	set := NewSet([]Policy{p}, map[string][]Override{"p": ovs})
	if got, want := set.Overrides(), MaxWildcards+1; got != want {
		t.Errorf("set holds %d overrides, want %d", got, want)
	}
	if got := set.LimitFor(p, "exact", now); got != 7 {
		t.Errorf("exact override: limit %d, want 7", got)
	}
	long := "u" + strings.Repeat("x", MaxWildcards+9)
	if got, want := set.LimitFor(p, long, now), int64(100+MaxWildcards+9); got != want {
		t.Errorf("longest pattern: limit %d, want %d", got, want)
	}
	// "u*" (the shortest) was dropped: a subject only it matches gets the
	// policy's limit.
	if got := set.LimitFor(p, "uy", now); got != 1 {
		t.Errorf("dropped pattern still applies: limit %d, want 1", got)
	}
}

// BenchmarkLimitForWorstCase is the most a tenant can make one check item
// cost: MaxWildcards patterns of MaxStars stars that every subject nearly
// matches, against a subject of the longest length a check allows.
func BenchmarkLimitForWorstCase(b *testing.B) {
	p := Policy{Name: "p", Limit: 1, Scope: ScopeSubject}
	var ovs []Override
	// Patterns that start and end with "*" are tried for every subject; the
	// last run fails only at its last byte, wherever it is tried.
	for i := range MaxWildcards {
		seg := strings.Repeat("a", 60)
		ovs = append(ovs, Override{Pattern: fmt.Sprintf("*%s*%s*%s%03d*", seg, seg, seg[:62-3], i), Limit: 5})
	}
	set := NewSet([]Policy{p}, map[string][]Override{"p": ovs})
	subject := strings.Repeat("a", 512)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		set.LimitFor(p, subject, now)
	}
}
