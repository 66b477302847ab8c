package policy

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Set is one tenant's policies with their overrides, as loaded at one
// moment. A Set is immutable and safe for concurrent use; the zero Set holds
// no policy.
type Set struct {
	m map[string]*entry
	// overrides is how many overrides the Set holds: its weight in a
	// Catalog's memory.
	overrides int
	// stale says the Set is the last one read, served because reading it
	// again failed (Catalog.For): a policy missing from it may exist.
	stale bool
}

// Stale reports whether s is the last Set read of a tenant whose policies
// changed, or may have, since: served because the database could not be
// read. A name it lacks is then unknown, not missing.
func (s Set) Stale() bool { return s.stale }

// entry is one policy with its overrides arranged for LimitFor.
type entry struct {
	p     Policy
	exact map[string]Override
	// The patterns with a "*": by their literal prefix (the bytes before the
	// first "*") when it is not empty, else by their literal suffix (after
	// the last "*") when that is not empty, else in rest. A subject can match
	// only the patterns filed under one of its own prefixes or suffixes, so
	// LimitFor looks up a list per distinct length instead of trying every
	// pattern; only patterns such as "*" and "*x*" are always tried.
	byPrefix, bySuffix index
	rest               []Override
	wildcards          int // patterns filed in byPrefix, bySuffix and rest
}

// index files wildcard patterns by a literal part of a given length. Each
// list is in the order its patterns take precedence (see precedes).
type index struct {
	lists map[string][]Override
	lens  []int // the distinct key lengths, ascending
}

func (x *index) add(key string, o Override) {
	if x.lists == nil {
		x.lists = make(map[string][]Override)
	}
	x.lists[key] = append(x.lists[key], o)
	x.lens = append(x.lens, len(key))
}

func (x *index) sort() {
	for _, os := range x.lists {
		sortByPrecedence(os)
	}
	slices.Sort(x.lens)
	x.lens = slices.Compact(x.lens)
}

// precedes reports whether wildcard pattern a takes precedence over b: the
// longer does, and of two as long the first in byte order.
func precedes(a, b string) bool {
	return len(a) > len(b) || len(a) == len(b) && a < b
}

func sortByPrecedence(os []Override) {
	slices.SortFunc(os, func(a, b Override) int {
		return cmp.Or(cmp.Compare(len(b.Pattern), len(a.Pattern)), strings.Compare(a.Pattern, b.Pattern))
	})
}

// NewSet returns a Set of policies, each with the overrides listed under its
// name in overrides (overrides of a name not in policies are dropped). It
// copies what it keeps. Of a policy's wildcard patterns it keeps the
// MaxWildcards that take precedence, whatever the list holds, so that a
// check's cost stays bounded even over rows stored before the bound.
func NewSet(policies []Policy, overrides map[string][]Override) Set {
	s := Set{m: make(map[string]*entry, len(policies))}
	for _, p := range policies {
		e := &entry{p: p}
		os := overrides[p.Name]
		if wildcards(os) > MaxWildcards {
			os = boundWildcards(os)
		}
		s.overrides += len(os)
		for _, o := range os {
			first := strings.IndexByte(o.Pattern, '*')
			last := strings.LastIndexByte(o.Pattern, '*')
			switch {
			case first < 0:
				if e.exact == nil {
					e.exact = make(map[string]Override)
				}
				e.exact[o.Pattern] = o
			case first > 0:
				e.wildcards++
				e.byPrefix.add(o.Pattern[:first], o)
			case last < len(o.Pattern)-1:
				e.wildcards++
				e.bySuffix.add(o.Pattern[last+1:], o)
			default:
				e.wildcards++
				e.rest = append(e.rest, o)
			}
		}
		e.byPrefix.sort()
		e.bySuffix.sort()
		sortByPrecedence(e.rest)
		s.m[p.Name] = e
	}
	return s
}

// wildcards counts the patterns of os with a "*".
func wildcards(os []Override) int {
	n := 0
	for _, o := range os {
		if strings.IndexByte(o.Pattern, '*') >= 0 {
			n++
		}
	}
	return n
}

// boundWildcards returns the exact overrides of os and its MaxWildcards
// wildcard ones that take precedence.
func boundWildcards(os []Override) []Override {
	var exact, wild []Override
	for _, o := range os {
		if strings.IndexByte(o.Pattern, '*') >= 0 {
			wild = append(wild, o)
		} else {
			exact = append(exact, o)
		}
	}
	sortByPrecedence(wild)
	return append(exact, wild[:MaxWildcards]...)
}

// Wildcards returns the number of wildcard patterns a check of the policy
// called name may try: those it holds when its scope is subject, else 0.
func (s Set) Wildcards(name string) int {
	e, ok := s.m[name]
	if !ok || e.p.Scope == ScopeGlobal {
		return 0
	}
	return e.wildcards
}

// Overrides returns the number of overrides s holds.
func (s Set) Overrides() int { return s.overrides }

// Lookup returns the policy called name.
func (s Set) Lookup(name string) (Policy, bool) {
	e, ok := s.m[name]
	if !ok {
		return Policy{}, false
	}
	return e.p, true
}

// Len returns the number of policies in s.
func (s Set) Len() int { return len(s.m) }

// LimitFor returns the limit that applies to subject under policy p at
// instant now: that of the override that matches it and has not expired,
// else p.Limit. An override whose pattern is the subject itself beats every
// wildcard pattern; among wildcard patterns the longest wins, and of equally
// long ones the first in byte order. A policy with scope global has one
// counter for every subject, so overrides never apply to it.
func (s Set) LimitFor(p Policy, subject string, now time.Time) int64 {
	e, ok := s.m[p.Name]
	if !ok || p.Scope == ScopeGlobal {
		return p.Limit
	}
	// An exact override that has expired gives way to the wildcards, as if
	// it had been deleted.
	if o, ok := e.exact[subject]; ok && o.Active(now) {
		return o.Limit
	}
	var best *Override
	for _, n := range e.byPrefix.lens {
		if n > len(subject) {
			break
		}
		best = better(best, e.byPrefix.lists[subject[:n]], subject, now)
	}
	for _, n := range e.bySuffix.lens {
		if n > len(subject) {
			break
		}
		best = better(best, e.bySuffix.lists[subject[len(subject)-n:]], subject, now)
	}
	best = better(best, e.rest, subject, now)
	if best != nil {
		return best.Limit
	}
	return p.Limit
}

// better returns the first override of os (a list in precedence order) that
// applies to subject at now and precedes best, else best.
func better(best *Override, os []Override, subject string, now time.Time) *Override {
	for i := range os {
		o := &os[i]
		if best != nil && !precedes(o.Pattern, best.Pattern) {
			// The rest of the list comes after o, so after best too.
			return best
		}
		if o.Active(now) && Match(o.Pattern, subject) {
			return o
		}
	}
	return best
}

// Match reports whether subject matches pattern, in which each "*" stands
// for any run of bytes, the empty run and "/" included, and every other byte
// for itself. (path.Match and filepath.Match stop "*" at "/" and give "?",
// "[" and "\" meanings a subject may not intend.)
//
// The literal runs between the stars must appear in the subject in order:
// the first at its start, the last at its end, and each one between at its
// leftmost place after the one before, which leaves the most room for the
// rest, so no choice is ever revisited. The cost is one strings.Index per run
// over the subject, linear in its length, whatever the pattern: a tenant's
// patterns cannot make a check quadratic.
func Match(pattern, subject string) bool {
	first := strings.IndexByte(pattern, '*')
	if first < 0 {
		return pattern == subject
	}
	last := strings.LastIndexByte(pattern, '*')
	prefix, suffix := pattern[:first], pattern[last+1:]
	if len(prefix)+len(suffix) > len(subject) || !strings.HasPrefix(subject, prefix) || !strings.HasSuffix(subject, suffix) {
		return false
	}
	rest := subject[len(prefix) : len(subject)-len(suffix)]
	runs := pattern[first+1 : last+1] // each run ends with its "*"
	for len(runs) > 0 {
		end := strings.IndexByte(runs, '*')
		run := runs[:end]
		runs = runs[end+1:]
		i := strings.Index(rest, run)
		if i < 0 {
			return false
		}
		rest = rest[i+len(run):]
	}
	return true
}
