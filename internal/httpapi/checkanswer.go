package httpapi

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/gate"
)

// The /v1/check answer is written on every check, so it is appended by hand
// into a pooled buffer rather than reflected over: the same JSON that
// encoding/json would write for checkAnswer (TestCheckAnswerEncoding holds
// the two together).

// answerBufs holds buffers for check answers.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeCheckAnswer answers 200 with v's items.
func writeCheckAnswer(c echo.Context, v gate.Verdict) error {
	bp := answerBufs.Get().(*[]byte)
	b := appendCheckAnswer((*bp)[:0], v)
	err := c.JSONBlob(200, b)
	if cap(b) <= 64<<10 {
		*bp = b
		answerBufs.Put(bp)
	}
	return err
}

// appendCheckAnswer appends v as the checkAnswer JSON, with a newline as
// encoding/json's Encoder ends it.
func appendCheckAnswer(b []byte, v gate.Verdict) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, v.Allowed)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, v.Degraded)
	b = append(b, `,"items":[`...)
	for i, it := range v.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"policy":`...)
		b = appendJSONString(b, it.Policy)
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, it.Allowed)
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, it.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, it.Remaining, 10)
		b = append(b, `,"window_seconds":`...)
		b = strconv.AppendInt(b, int64(math.Ceil(it.Window.Seconds())), 10)
		b = append(b, `,"reset_at":"`...)
		b = ceilSecond(it.ResetAt).AppendFormat(b, time.RFC3339)
		b = append(b, `","retry_after_ms":`...)
		b = strconv.AppendInt(b, ceilDiv(it.RetryAfter, time.Millisecond), 10)
		b = append(b, `,"shadow":`...)
		b = strconv.AppendBool(b, it.Shadow)
		if it.Degraded {
			b = append(b, `,"degraded":true`...)
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendJSONString appends s as a JSON string: as it is when it needs no
// escaping (policy names never do), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// The RateLimit rule. Every answer of /v1 that carries the IETF RateLimit
// fields (draft-ietf-httpapi-ratelimit-headers-11: RateLimit-Policy
// `"name";q=limit;w=window` and RateLimit `"name";r=remaining;t=seconds`)
// names one quota in both, and its Retry-After, when it has one, agrees:
//
//   - a ceiling refused (429, or 402): that ceiling; r=0, and t is
//     Retry-After, its wait in whole seconds rounded up, at least 1;
//   - the tenant's policies refused (200 with allowed false): of the
//     enforced items that refused, the one with the longest wait (the first
//     of equals); r its remaining, and t is Retry-After, as above;
//   - allowed: the tightest quota of the ceilings and the enforced items,
//     the smallest share of its limit left, then the fewest left
//     (gate.Verdict.Tightest); t is the seconds until it is whole again (the
//     item's reset_at); no Retry-After.
//
// w is the quota's window in whole seconds, rounded up (a calendar month's
// is that month's length). A shadow item names nothing: it refuses nothing.

// refusingItem returns the quota of v's answer when the tenant's policies
// refused it, and its wait in whole seconds; ok is false when no enforced
// item refused.
func refusingItem(v gate.Verdict) (q gate.Quota, retry int64, ok bool) {
	var worst *gate.ItemVerdict
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
		return gate.Quota{}, 0, false
	}
	retry = retrySeconds(worst.RetryAfter)
	return gate.Quota{Name: worst.Policy, Limit: worst.Limit, Remaining: worst.Remaining, Window: worst.Window}, retry, true
}

// retrySeconds is a wait as Retry-After says it: whole seconds rounded up,
// at least 1.
func retrySeconds(d time.Duration) int64 { return max(1, ceilDiv(d, time.Second)) }

// setCheckRateLimit writes the RateLimit fields of a check answer that no
// ceiling refused, and Retry-After when its policies refused it.
func setCheckRateLimit(c echo.Context, v gate.Verdict) {
	if v.Allowed {
		setRateLimit(c, v.Tightest)
		return
	}
	if q, retry, ok := refusingItem(v); ok {
		writeRateLimit(c.Response().Header(), q, retry)
		c.Response().Header()["Retry-After"] = []string{strconv.FormatInt(retry, 10)}
	}
}

// setRateLimit writes the RateLimit fields of an allowed answer for its
// tightest quota q: t is the seconds until q is whole again.
func setRateLimit(c echo.Context, q gate.Quota) {
	if q.Limit == 0 {
		return
	}
	writeRateLimit(c.Response().Header(), q, max(0, ceilDiv(q.ResetIn, time.Second)))
}

// writeRateLimit writes RateLimit-Policy and RateLimit for q, with t
// seconds; w is left out when q's window is unknown (zero).
func writeRateLimit(h http.Header, q gate.Quota, t int64) {
	// Both values in one string, each field a slice of it: two allocations
	// for the two headers instead of four.
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
	vals := []string{both[:policyEnd], both[policyEnd:]}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
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
