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

// setCheckRateLimit writes the RateLimit fields of a check answer that no
// ceiling refused (the rule in gate/ratelimit.go), and Retry-After when its
// policies refused it.
func setCheckRateLimit(c echo.Context, v gate.Verdict) {
	writeRateLimit(c.Response().Header(), v.RateLimit())
}

// writeRateLimit writes RateLimit-Policy, RateLimit and Retry-After as rl
// has them.
func writeRateLimit(h http.Header, rl gate.RateLimit) {
	if rl.Policy == "" {
		return
	}
	vals := []string{rl.Policy, rl.Fields, ""}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	if rl.RetryAfter > 0 {
		vals[2] = strconv.FormatInt(rl.RetryAfter, 10)
		h["Retry-After"] = vals[2:3:3]
	}
}
