package gate

import (
	"math"
	"strconv"
	"time"
)

// The RateLimit rule. Every answer that carries the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11: RateLimit-Policy
// `"name";q=limit;w=window` and RateLimit `"name";r=remaining;t=seconds`),
// whatever carries it (a /v1 answer, a forward-auth answer, the headers the
// Envoy rate limit service asks Envoy to add), names one quota in both, and
// its Retry-After, when it has one, agrees:
//
//   - a ceiling refused (429, or 402): that ceiling; r=0, and t is
//     Retry-After, its wait in whole seconds rounded up, at least 1;
//   - the tenant's policies refused: of the enforced items that refused,
//     the one with the longest wait (the first of equals); r its remaining,
//     and t is Retry-After, as above;
//   - allowed: the tightest quota of the ceilings and the enforced items,
//     the smallest share of its limit left, then the fewest left
//     (Verdict.Tightest); t is the seconds until it is whole again (the
//     item's reset_at); no Retry-After.
//
// w is the quota's window in whole seconds, rounded up (a calendar month's
// is that month's length). A shadow item names nothing: it refuses nothing.

// RateLimit is an answer's RateLimit fields by the rule above.
type RateLimit struct {
	// Policy and Fields are the values of RateLimit-Policy and RateLimit;
	// both empty when the answer names no quota.
	Policy, Fields string
	// RetryAfter is Retry-After in seconds; 0 when the answer has none.
	RetryAfter int64
}

// RateLimit returns v's RateLimit fields.
func (v Verdict) RateLimit() RateLimit {
	switch {
	case v.Refusal != nil:
		r := v.Refusal
		retry := RetrySeconds(r.RetryAfter)
		return rateLimitOf(Quota{Name: r.Layer, Limit: r.Limit, Window: r.Window}, retry, retry)
	case v.Allowed:
		return v.Tightest.RateLimit()
	}
	if q, retry, ok := refusingItem(v); ok {
		return rateLimitOf(q, retry, retry)
	}
	return RateLimit{}
}

// RateLimit returns the fields of an allowed answer whose tightest quota is
// q: t is the seconds until q is whole again, and no Retry-After. A q of
// no limit names nothing.
func (q Quota) RateLimit() RateLimit {
	if q.Limit == 0 {
		return RateLimit{}
	}
	return rateLimitOf(q, max(0, ceilDiv(q.ResetIn, time.Second)), 0)
}

// refusingItem returns the quota of v's answer when the tenant's policies
// refused it, and its wait in whole seconds; ok is false when no enforced
// item refused.
func refusingItem(v Verdict) (q Quota, retry int64, ok bool) {
	var worst *ItemVerdict
	for i := range v.Items {
		it := &v.Items[i]
		if it.Allowed || it.Shadow {
			continue
		}
		if worst == nil || it.RetryAfter > worst.RetryAfter {
			worst = it
		}
	}
	if worst == nil {
		return Quota{}, 0, false
	}
	return Quota{Name: worst.Policy, Limit: worst.Limit, Remaining: worst.Remaining, Window: worst.Window},
		RetrySeconds(worst.RetryAfter), true
}

// rateLimitOf writes the fields of q with t seconds; w is left out when
// q's window is unknown (zero).
func rateLimitOf(q Quota, t, retry int64) RateLimit {
	// Both values in one string, each field a slice of it: one allocation.
	var buf [160]byte
	b := appendSFString(buf[:0], q.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, q.Limit, 10)
	if q.Window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, int64(math.Ceil(q.Window.Seconds())), 10)
	}
	policyEnd := len(b)
	b = appendSFString(b, q.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, q.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	both := string(b)
	return RateLimit{Policy: both[:policyEnd], Fields: both[policyEnd:], RetryAfter: retry}
}

// appendSFString appends s as an RFC 9651 String: quoted, with '"' and '\'
// escaped. A String holds printable ASCII only; any other byte (no policy
// or layer name has one) is written as '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// RetrySeconds is a wait as Retry-After says it: whole seconds rounded up,
// at least 1.
func RetrySeconds(d time.Duration) int64 { return max(1, ceilDiv(d, time.Second)) }

// ceilDiv is d/unit rounded up.
func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}
