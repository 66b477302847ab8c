package httpapi

import (
	"testing"

	"github.com/tollgate/tollgate/internal/counter"
)

// FuzzCheckBody holds decodeCheckFast to encoding/json: whatever the fast
// decoder accepts, the strict encoding/json decode (unmarshalStrict, the
// slow path, which refuses text encoding/json alone would fold into
// U+FFFD) accepts too, to the same values.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"policy":"login","subject":"alice"}]}`,
		`{"mode":"peek","items":[{"policy":"a","subject":"b","cost":3},{"subject":"x","policy":"y"}]}`,
		` { "items" : [ ] , "mode" : "consume" } `,
		`{"items":[{"policy":"p","subject":"ü\u00e9","cost":-0}]}`,
		`{"items":[{"policy":"p","subject":"a\"b"}]}`,
		`{"items":[{"policy":"p","cost":1e3}]}`,
		`{"Items":[]}`,
		`{"items":[{"policy":"p","policy":"q"}]}`,
		`{"items":[{}]}`,
		`{}`,
		`{"items":[{"policy":"p","cost":9223372036854775807}]}`,
		`{"items":[{"policy":"p","cost":01}]}`,
		`{"mode":"Peek","items":[]}`,
		`{"items":[{"policy":"p","cost":0}]}`,
		"{\"items\":[{\"policy\":\"\xff\"}]}",
		`{"items":[{"policy":"p","subject":"\ud800"}]}`,
		`{"items":[{"policy":"p","subject":"\ud83d\ude00"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := decodeCheckFast(body)
		if !ok {
			return
		}
		var want checkBody
		if err := unmarshalStrict(body, &want); err != nil {
			t.Fatalf("fast decoder accepted %q, encoding/json: %v", body, err)
		}
		wantMode := map[string]counter.Mode{"": counter.Consume, "consume": counter.Consume, "peek": counter.Peek}
		if m, valid := wantMode[want.Mode]; !valid || fast.Mode != m || len(fast.Items) != len(want.Items) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", body, fast, want)
		}
		for i, it := range want.Items {
			got := fast.Items[i]
			cost := int64(1)
			if it.Cost != nil {
				cost = *it.Cost
			}
			if got.Policy != it.Policy || got.Subject != it.Subject || got.Cost != cost || cost < 1 {
				t.Fatalf("%q item %d: fast %+v, encoding/json %+v", body, i, got, it)
			}
		}
	})
}

// TestCheckBodyFastPath: the plain shapes tenants send take the fast path.
func TestCheckBodyFastPath(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		`{"items":[{"policy":"login","subject":"alice"}]}`,
		`{"mode":"peek","items":[{"policy":"a","subject":"203.0.113.7","cost":3},{"subject":"x","policy":"y"}]}`,
		"{\n  \"items\": [\n    {\"policy\": \"sign-in\", \"subject\": \"ünïcode\"}\n  ]\n}\n",
	} {
		if _, ok := decodeCheckFast([]byte(s)); !ok {
			t.Errorf("%s: not on the fast path", s)
		}
	}
}
