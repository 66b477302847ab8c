package httpapi

import (
	"encoding/json"
	"math"
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

// setRateLimit writes the IETF RateLimit fields for the tightest quota.
func setRateLimit(c echo.Context, q gate.Quota) {
	if q.Limit == 0 {
		return
	}
	// Both values in one string, each field a slice of it: two allocations
	// for the two headers instead of four.
	var buf [160]byte
	b := appendJSONString(buf[:0], q.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, q.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, int64(math.Ceil(q.Window.Seconds())), 10)
	policyEnd := len(b)
	b = appendJSONString(b, q.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, q.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, max(0, ceilDiv(q.ResetIn, time.Second)), 10)
	both := string(b)
	vals := []string{both[:policyEnd], both[policyEnd:]}
	h := c.Response().Header()
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
}
