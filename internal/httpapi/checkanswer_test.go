package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/limit"
)

// checkAnswer and checkItemOut are the /v1/check answer as encoding/json
// would write it: the reference appendCheckAnswer is held to.
type checkAnswer struct {
	Allowed  bool           `json:"allowed"`
	Degraded bool           `json:"degraded"`
	Items    []checkItemOut `json:"items"`
}

type checkItemOut struct {
	Policy       string `json:"policy"`
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	WindowS      int64  `json:"window_seconds"`
	ResetAt      string `json:"reset_at"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Shadow       bool   `json:"shadow"`
	Degraded     bool   `json:"degraded,omitempty"`
}

// TestCheckAnswerEncoding: the hand-written answer is byte for byte what
// encoding/json's Encoder writes for checkAnswer, over random verdicts.
func TestCheckAnswerEncoding(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	names := []string{"login", "sign-in.v2", "a_b", "x<y>&\"q\"", "ünï", "tab\there"}
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for range 2000 {
		v := gate.Verdict{Allowed: rng.IntN(2) == 0, Degraded: rng.IntN(4) == 0}
		want := checkAnswer{Allowed: v.Allowed, Degraded: v.Degraded, Items: []checkItemOut{}}
		for range rng.IntN(4) {
			it := gate.ItemVerdict{
				Policy: names[rng.IntN(len(names))],
				Decision: limit.Decision{
					Allowed: rng.IntN(2) == 0, Limit: rng.Int64N(1 << 40), Remaining: rng.Int64N(1 << 40),
					ResetAt:    base.Add(time.Duration(rng.Int64N(int64(48 * time.Hour)))),
					RetryAfter: time.Duration(rng.Int64N(int64(time.Hour))),
				},
				Window: time.Duration(rng.Int64N(int64(31 * 24 * time.Hour))),
				Shadow: rng.IntN(2) == 0, Degraded: rng.IntN(3) == 0,
			}
			v.Items = append(v.Items, it)
			want.Items = append(want.Items, checkItemOut{
				Policy: it.Policy, Allowed: it.Allowed, Limit: it.Limit, Remaining: it.Remaining,
				WindowS:      int64(math.Ceil(it.Window.Seconds())),
				ResetAt:      ceilSecond(it.ResetAt).Format(time.RFC3339),
				RetryAfterMS: ceilDiv(it.RetryAfter, time.Millisecond),
				Shadow:       it.Shadow, Degraded: it.Degraded,
			})
		}
		var ref bytes.Buffer
		if err := json.NewEncoder(&ref).Encode(want); err != nil {
			t.Fatal(err)
		}
		if got := appendCheckAnswer(nil, v); !bytes.Equal(got, ref.Bytes()) {
			t.Fatalf("got  %s\nwant %s", got, ref.Bytes())
		}
	}
}
