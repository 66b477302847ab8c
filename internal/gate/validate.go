package gate

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
)

// Bounds of one check.
const (
	MaxItems      = 32
	MaxSubjectLen = 512
	MaxCost       = limit.MaxLimit
)

// ErrInvalid is returned (wrapped, as a *policy.FieldError when a field is at
// fault) for a check the client got wrong: an unknown policy, a missing
// subject, a cost out of range.
var ErrInvalid = policy.ErrInvalid

// ErrUnavailable is returned (wrapped) when what a request is decided by,
// the key's tenant, its plan or its policies, is neither cached nor
// readable from the database: nothing can be decided, and the caller may
// retry.
var ErrUnavailable = errors.New("tenant data unavailable")

// ErrBusy is returned (wrapped) for a request that found its tenant's work
// in progress on this instance at its bound (Config.TenantInflight) for
// longer than Config.InflightWait: the tenant's own burst, which waits
// behind itself, never in front of other tenants. The caller may retry
// after a second.
var ErrBusy = errors.New("tenant's work in progress at its bound")

// errStalePolicy is a policy name missing from a tenant's policies as last
// read, while they cannot be read again: it may have been made since, so
// nothing can be decided (ErrUnavailable, 503) rather than "no such policy".
func errStalePolicy(tenantID, name string) error {
	return fmt.Errorf("%w: policy %q of tenant %s is not among its policies as last read, and they cannot be read again now", ErrUnavailable, truncate(name, 64), tenantID)
}

// itemErr builds a field error for items[i].field.
func itemErr(i int, field, reason string) error {
	return &policy.FieldError{Field: fmt.Sprintf("items[%d].%s", i, field), Reason: reason}
}

// policyItem is one check item resolved against its policy.
type policyItem struct {
	counter.Item
	name       string
	shadow     bool
	failOpen   bool
	alertAfter int64
	// rule is set for a rule of an Envoy domain's configuration, not one
	// of the tenant's policies.
	rule bool
	// index is where its item sits in the counter request (storeRequest).
	index int
}

// policyItems resolves a check's items. A test key's counters are the
// sandbox's, apart from the live ones ("t:" in front of the key), so that
// trying an integration out never moves what live traffic is answered.
//
// It appends them to out, and also returns the time spent matching wildcard
// overrides, for the tenant's matching budget.
func (g *Gate) policyItems(out []policyItem, tenantID string, set policy.Set, test bool, c *Check, now time.Time) (_ []policyItem, matching time.Duration, _ error) {
	if len(c.Items) == 0 {
		return nil, 0, &policy.FieldError{Field: "items", Reason: "at least one item is required"}
	}
	if len(c.Items) > MaxItems {
		return nil, 0, &policy.FieldError{Field: "items", Reason: fmt.Sprintf("at most %d items per check", MaxItems)}
	}
	for i, it := range c.Items {
		p, ok := policy.Policy{}, true
		if it.Rule != nil {
			p = *it.Rule
		} else {
			p, ok = set.Lookup(it.Policy)
		}
		if !ok {
			if set.Stale() {
				return nil, 0, errStalePolicy(tenantID, it.Policy)
			}
			return nil, 0, itemErr(i, "policy", fmt.Sprintf("no policy named %q", truncate(it.Policy, 64)))
		}
		if p.Algorithm == limit.Concurrency {
			return nil, 0, itemErr(i, "policy", fmt.Sprintf(`policy %q has algorithm "concurrency": it bounds holders in flight; take a lease with POST /v1/leases`, p.Name))
		}
		cost := it.Cost
		if cost == 0 {
			cost = 1
		}
		if cost < 1 || cost > MaxCost {
			return nil, 0, itemErr(i, "cost", fmt.Sprintf("must be 1 to %d", MaxCost))
		}
		if reason := subjectFault(p, it.Subject); reason != "" {
			return nil, 0, itemErr(i, "subject", reason)
		}
		var buf [80]byte
		key := g.appendPolicyKey(buf[:0], tenantID, test, p, it.Subject)
		lim := p.Limit
		if p.Scope != policy.ScopeGlobal && it.Rule == nil {
			if set.Wildcards(p.Name) == 0 {
				lim = set.LimitFor(p, it.Subject, now)
			} else {
				began := time.Now()
				lim = set.LimitFor(p, it.Subject, now)
				matching += time.Since(began)
			}
		}
		out = append(out, policyItem{
			// Shadow policies are advisory: counted when they would admit,
			// never failing the check.
			Item:       counter.Item{Key: string(key), Algorithm: p.Algorithm, Limit: lim, Window: p.Window, Cost: cost, Advisory: p.Shadow},
			name:       p.Name,
			shadow:     p.Shadow,
			failOpen:   p.FailMode == policy.FailOpen,
			alertAfter: p.AlertAfter,
			rule:       it.Rule != nil,
		})
	}
	return out, matching, nil
}

// subjectFault returns why subject cannot name a counter of p, or "". It
// is the one rule for subjects, whatever carries them (a check, a lease, a
// reset's path): text, so that what a client sends is what is counted and
// every route names the same subject the same way. Bytes that are not UTF-8
// would be replaced by U+FFFD on one route and kept on another, and many
// subjects would collapse into one; NUL is no text anyone types, and ends
// strings in many a client's language.
func subjectFault(p policy.Policy, subject string) string {
	switch {
	case p.Scope == policy.ScopeGlobal:
		return ""
	case subject == "":
		return "required for a policy of scope subject"
	case len(subject) > MaxSubjectLen:
		return fmt.Sprintf("at most %d bytes", MaxSubjectLen)
	case !utf8.ValidString(subject):
		return "must be UTF-8 text"
	case strings.IndexByte(subject, 0) >= 0:
		return "must not contain NUL (U+0000)"
	}
	return ""
}

// appendPolicyKey appends the key of p's counter (or leases) for subject,
// which subjectFault accepts: "p:" and the policy's name, then "*" for a
// policy of scope global (a keyless ceiling: nothing in the request picks
// the counter) or the subject's digest. A test key's counters are the
// sandbox's, "t:" in front.
func (g *Gate) appendPolicyKey(key []byte, tenantID string, test bool, p policy.Policy, subject string) []byte {
	if test {
		key = append(key, "t:"...)
	}
	key = append(append(append(key, "p:"...), p.Name...), ':')
	if p.Scope == policy.ScopeGlobal {
		return append(key, '*')
	}
	return g.digest.AppendHex(key, digestLen, "subject", tenantID, ":", p.Name, ":", subject)
}

// wildcardTries is how many wildcard patterns cost as much as one check
// item (an HMAC, a counter in the store): BenchmarkLimitForWorstCase puts
// a try of the worst pattern at about half a microsecond.
const wildcardTries = 8

// checkWeight is what a check weighs in its tenant's work in progress: one
// unit an item, and one per wildcardTries wildcard patterns its items may
// try, so that the heaviest check the API allows weighs more than the
// budget holds and runs alone.
func checkWeight(set policy.Set, c *Check) int64 {
	tries := 0
	for _, it := range c.Items {
		if it.Rule == nil {
			tries += set.Wildcards(it.Policy)
		}
	}
	return int64(max(len(c.Items), 1) + (tries+wildcardTries-1)/wildcardTries)
}

// ipDigest is the client IP's key part: an HMAC, never the address. Every
// client whose address could not be resolved shares the one bucket
// "unresolved": a bucket per request would let a malformed header escape
// every per-IP limit.
func (g *Gate) ipDigest(ip netip.Addr) string {
	if !ip.IsValid() {
		return "unresolved"
	}
	var buf [2 * digestLen]byte
	return string(g.digest.AppendHex(buf[:0], digestLen, "ip", ip.Unmap().String()))
}

// digestLen is how much of an HMAC-SHA-256 a counter key keeps: 128 bits,
// hex-encoded, keep collisions out of reach and keys short.
const digestLen = 16

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
