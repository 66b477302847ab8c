package envoyconf

import (
	"strings"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/policy"
)

// Match is what one descriptor of a request meets.
type Match struct {
	// Rule is the rule that applies: one that counts, or a Deny rule. It is
	// nil when none does, and then Unlimited or Replaced say why, or neither
	// when nothing in the file matched (the reference answers OK, without
	// a limit, in all three cases).
	Rule *Rule
	// Subject names the descriptor's counter of Rule: every entry as its
	// key, "=" and its value, joined by "&", with "%", "=", "&", control
	// characters and bytes that are not UTF-8 escaped as %XX. So a key
	// without value in the file counts each value apart, a value matched by
	// a wildcard with share_threshold counts as the wildcard, and the
	// subject is UTF-8 text without NUL and never empty. "" for a rule of
	// scope global, and when Rule is nil.
	Subject string
	// Unlimited is a descriptor that met a rule of unlimited: true.
	Unlimited bool
	// Replaced is a descriptor whose rule another descriptor's rule in the
	// same request replaces (MatchAll only).
	Replaced bool
}

// Match returns what a descriptor meets in c, as GetLimit of
// envoyproxy/ratelimit finds it (see the package's documentation). It
// knows nothing of the request's other descriptors: see MatchAll.
func (c *Config) Match(entries []Entry) Match {
	r, shared := c.lookup(entries)
	return match(r, entries, &shared)
}

// MatchAll returns what each descriptor of one request meets, with the
// rules that other rules of the request replace taken out (Replaced), as
// envoyproxy/ratelimit's service does: every name in the replaces of a rule
// any descriptor met, unlimited rules and replaced ones included, takes
// out every limited or Deny rule of that name.
func (c *Config) MatchAll(descriptors [][]Entry) []Match {
	ms := make([]Match, len(descriptors))
	var replacing map[string]bool
	for i, es := range descriptors {
		r, shared := c.lookup(es)
		if r != nil && len(r.Replaces) > 0 {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			for _, name := range r.Replaces {
				replacing[name] = true
			}
		}
		ms[i] = match(r, es, &shared)
	}
	for i, m := range ms {
		if m.Rule != nil && m.Rule.Name != "" && replacing[m.Rule.Name] {
			ms[i] = Match{Replaced: true}
		}
	}
	return ms
}

// shares holds, by entry, the wildcard a value matched when its
// descriptor has share_threshold; "" for the others.
type shares [MaxDepth]string

// lookup walks c's descriptors with entries and returns the rule at the
// descriptor the last entry reached, unlimited ones included.
func (c *Config) lookup(entries []Entry) (*Rule, shares) {
	var shared shares
	n := &c.root
	for i, e := range entries {
		full := e.Key + "_" + e.Value
		next := n.children[full]
		if next == nil {
			for _, w := range n.wildcards {
				if w.match(full) {
					next = n.children[w.key]
					if next.share != "" {
						// The reference drops the request's key and "_"
						// from the pattern, when the pattern starts with
						// them.
						shared[i] = strings.TrimPrefix(next.share, e.Key+"_")
					}
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next == nil {
			return nil, shared
		}
		// A rule applies only where the descriptor ends.
		if i == len(entries)-1 {
			return next.rule, shared
		}
		if len(next.children) == 0 {
			return nil, shared
		}
		n = next
	}
	return nil, shared
}

// match is the Match of entries meeting rule r.
func match(r *Rule, entries []Entry, shared *shares) Match {
	switch {
	case r == nil:
		return Match{}
	case r.Unlimited:
		return Match{Unlimited: true}
	case r.Policy.Scope == policy.ScopeGlobal:
		return Match{Rule: r}
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(escape(e.Key, "=&"))
		b.WriteByte('=')
		// entries reached a rule, so there are at most MaxDepth of them.
		if shared[i] != "" {
			b.WriteString(escape(shared[i], "=&"))
		} else {
			b.WriteString(escape(e.Value, "=&"))
		}
	}
	return Match{Rule: r, Subject: b.String()}
}

// match reports whether s matches the wildcard: it starts with the first
// part, ends with the last, and holds the others in order between, without
// overlap; each "*" stands for any run of bytes, the empty one included.
func (w wildcard) match(s string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		// The leftmost place of each part leaves the most room for the
		// next ones, so it finds a match when there is one.
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// escape returns s with "%", the bytes of special, control characters and
// bytes that are not UTF-8 written as %XX, so that s can be joined with
// special's bytes as separators and split again, and reads as text.
func escape(s, special string) string {
	clean := true
	for i := 0; i < len(s) && clean; {
		r, size := utf8.DecodeRuneInString(s[i:])
		clean = !needsEscape(r, size, special)
		i += size
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, size, special) {
			for _, c := range []byte(s[i : i+size]) {
				b.Write([]byte{'%', hex[c>>4], hex[c&15]})
			}
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(r rune, size int, special string) bool {
	return r == utf8.RuneError && size == 1 || r < 0x20 || r == 0x7f || r == '%' ||
		r < utf8.RuneSelf && strings.IndexByte(special, byte(r)) >= 0
}
