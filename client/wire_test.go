package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Answers as Tollgate writes them (internal/httpapi appendCheckAnswer, and
// a batch's problems), for the readers' tests and as fuzz seeds.
var (
	answerAllowed  = `{"allowed":true,"degraded":false,"items":[{"policy":"sign-in-ip","allowed":true,"limit":5,"remaining":4,"window_seconds":60,"reset_at":"2026-12-05T23:01:00Z","retry_after_ms":0,"shadow":false}]}` + "\n"
	answerTwoItems = `{"allowed":false,"degraded":true,"items":[{"policy":"a","allowed":false,"limit":2,"remaining":0,"window_seconds":3600,"reset_at":"2026-12-06T00:00:00Z","retry_after_ms":1500,"shadow":false},{"policy":"b","allowed":true,"limit":100,"remaining":100,"window_seconds":2678400,"reset_at":"2027-01-01T00:00:00Z","retry_after_ms":0,"shadow":true,"degraded":true}]}`
	answerProblem  = `{"type":"https://tollgate.dev/problems/rate-limited","title":"Too Many Requests","status":429,"detail":"the tenant's \"per second\" quota","layer":"tenant_quota","scope":"tenant","limit":100,"retry_after_seconds":1}`
)

func TestReadDecisionReadsTollgatesAnswers(t *testing.T) {
	t.Parallel()
	for _, a := range []string{answerAllowed, answerTwoItems, `{"allowed":true,"degraded":false,"items":[]}`} {
		got, m, ok := readDecisionOf([]byte(a), nil)
		if !ok {
			t.Fatalf("readDecisionOf gave up on %s", a)
		}
		if err := m.check(); err != nil {
			t.Errorf("readDecisionOf(%s): %v", a, err)
		}
		var out checkOut
		if err := json.Unmarshal([]byte(a), &out); err != nil {
			t.Fatal(err)
		}
		if want, wantM := out.decision(); !reflect.DeepEqual(got, want) || m != wantM {
			t.Errorf("readDecisionOf(%s)\n got %+v %+v\nwant %+v %+v", a, got, m, want, wantM)
		}
	}
	// A problem is left to encoding/json (and the status switch).
	if _, _, ok := readDecisionOf([]byte(answerProblem), nil); ok {
		t.Error("readDecisionOf read a problem as a decision")
	}
	if _, err := readCheckAnswer([]byte(answerProblem), nil); err == nil {
		t.Error("readCheckAnswer read a problem as a decision")
	}
	rs, ok := splitResults([]byte(`{"results":[` + answerAllowed + `,` + answerProblem + `, ` + answerTwoItems + "]}\n"))
	if !ok || len(rs) != 3 {
		t.Fatalf("splitResults: %d results, ok %v", len(rs), ok)
	}
	if string(rs[1]) != answerProblem || string(rs[2]) != answerTwoItems {
		t.Errorf("splitResults: got %q, %q", rs[1], rs[2])
	}
}

// FuzzReadDecision: whatever readDecisionOf reads, encoding/json reads
// alike, members and all.
func FuzzReadDecision(f *testing.F) {
	for _, s := range []string{answerAllowed, answerTwoItems, answerProblem, `{}`, `{"allowed":true}`,
		`{"items":[{"limit":01}]}`, `{"items":[{"limit":1e3}]}`, `{"Allowed":true}`, `{"allowed":null}`,
		`{"items":[{"reset_at":"2026-12-05T24:00:00Z"}]}`, `{"items":[{"policy":"\u0061"}]}`, `{"items":[],"items":[]}`,
		`{"allowed":true,"degraded":false,"items":[{"policy":"a"},{"allowed":true}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, m, ok := readDecisionOf(b, nil)
		if !ok {
			return
		}
		var out checkOut
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("readDecisionOf read %q, encoding/json refuses it: %v", b, err)
		}
		if want, wantM := out.decision(); !reflect.DeepEqual(got, want) || m != wantM {
			t.Fatalf("readDecisionOf(%q)\n got %+v %+v\nwant %+v %+v", b, got, m, want, wantM)
		}
		// Read as the answer to a check, whose policies it may name.
		asked := []checkItemIn{{Policy: "sign-in-ip"}, {Policy: "a"}}
		if of, ofM, ok := readDecisionOf(b, asked); !ok || !reflect.DeepEqual(of, got) || ofM != m {
			t.Fatalf("readDecisionOf(%q, asked) = %+v %+v, %v; without %+v", b, of, ofM, ok, got)
		}
	})
}

// FuzzSplitResults: whatever splitResults splits, encoding/json splits alike.
func FuzzSplitResults(f *testing.F) {
	for _, s := range []string{`{"results":[` + answerAllowed + `,` + answerProblem + `]}`, `{"results":[]}`, `{"results":null}`,
		`{"results":[1,-0.5e+3,"\ud83d",true,null,[{}]]}`, `{"results":["\x"]}`, `{"results":[01]}`, `{"results":[1.]}`,
		`{"results":[{"a":1}],"more":2}`, `{"Results":[1]}`, `{"results":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := splitResults(b)
		if !ok {
			return
		}
		var want struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("splitResults split %q, encoding/json refuses it: %v", b, err)
		}
		if len(got) != len(want.Results) {
			t.Fatalf("splitResults(%q): %d results, encoding/json %d", b, len(got), len(want.Results))
		}
		for i := range got {
			if !bytes.Equal(got[i], want.Results[i]) {
				t.Fatalf("splitResults(%q)[%d] = %q, encoding/json %q", b, i, got[i], want.Results[i])
			}
		}
	})
}

// TestAppendCheckIn: a check and a batch are written as encoding/json
// writes them, whatever their strings hold.
func TestAppendCheckIn(t *testing.T) {
	t.Parallel()
	str := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z0-9:_-]{0,12}`), rapid.SampledFrom([]string{"", "<&>", "\"\\", "\x00\x1f\x7f", "\xff\xfe", "é\u2028"}))
	rapid.Check(t, func(t *rapid.T) {
		in := checkIn{Mode: str.Draw(t, "mode")}
		in.Items = make([]checkItemIn, rapid.IntRange(0, 3).Draw(t, "items"))
		for i := range in.Items {
			in.Items[i] = checkItemIn{Policy: str.Draw(t, "policy"), Subject: str.Draw(t, "subject"), Cost: rapid.Int64().Draw(t, "cost")}
		}
		want, _ := json.Marshal(in)
		if got := in.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("appendJSON = %s, encoding/json %s", got, want)
		}
		batch := checkBatchIn{{in: in}, {in: in}}
		wantBatch, _ := json.Marshal(struct {
			Checks []checkIn `json:"checks"`
		}{[]checkIn{in, in}})
		if got := batch.appendJSON(nil); !bytes.Equal(got, wantBatch) {
			t.Fatalf("batch appendJSON = %s, encoding/json %s", got, wantBatch)
		}
	})
}

// BenchmarkReadAnswer reads a batch answer of 16 results as a batch's
// callers do, by hand and with encoding/json.
func BenchmarkReadAnswer(b *testing.B) {
	body := []byte(`{"results":[` + strings.Repeat(answerAllowed+",", 15) + answerAllowed + "]}\n")
	asked := []checkItemIn{{Policy: "sign-in-ip", Subject: "s"}}
	b.Run("by-hand", func(b *testing.B) {
		for b.Loop() {
			var out checkBatchOut
			if err := out.readAnswer(body); err != nil {
				b.Fatal(err)
			}
			for _, r := range out.results {
				if _, err := readCheckAnswer(r, asked); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var v struct {
				Results []json.RawMessage `json:"results"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
			for _, r := range v.Results {
				var out checkOut
				if err := json.Unmarshal(r, &out); err != nil {
					b.Fatal(err)
				}
				_, _ = out.decision()
			}
		}
	})
}
