package httpapi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/gate"
)

// batchBodySeeds are FuzzBatchBody's seed corpus: the shapes clients send,
// and each way a batch can differ from the plain shape by a byte or a
// member.
var batchBodySeeds = []string{
	`{"checks":[{"mode":"consume","items":[{"policy":"bench","subject":"user-1"}]}]}`,
	`{"checks":[{"items":[{"policy":"a","subject":"b","cost":3},{"subject":"x","policy":"y"}]},{"mode":"peek","items":[{"policy":"p"}]}]}`,
	" {\n \"checks\" : [ { \"items\" : [ { \"policy\" : \"p\" , \"subject\" : \"ünï\" } ] } ] } \n",
	`{"checks":[]}`,
	`{"checks":null}`,
	`{"checks":[{}]}`,
	`{"checks":[{"items":[]}]}`,
	`{"checks":[{"mode":"peek"}]}`,
	`{"checks":[{"items":null}]}`,
	`{}`,
	`{"Checks":[{"items":[{"policy":"p"}]}]}`,
	`{"checks":[{"items":[{"policy":"p"}]}],"checks":[{"items":[{"policy":"q"}]}]}`,
	`{"checks":[{"items":[{"policy":"p"}]}],"extra":1}`,
	`{"checks":[{"items":[{"policy":"p"}]}]} {}`,
	`{"checks":[{"items":[{"policy":"p"}]},]}`,
	`{"checks":[{"items":[{"policy":"p","cost":0}]}]}`,
	`{"checks":[{"items":[{"policy":"p","cost":-0}]}]}`,
	`{"checks":[{"items":[{"policy":"p","cost":1.0}]}]}`,
	`{"checks":[{"items":[{"policy":"p","cost":9223372036854775808}]}]}`,
	`{"checks":[{"items":[{"policy":"p","cost":"1"}]}]}`,
	`{"checks":[{"items":[{"policy":"p\u0041","subject":"a\"b"}]}]}`,
	`{"checks":[{"items":[{"policy":"p","subject":1}]}]}`,
	`{"checks":[{"mode":"count","items":[{"policy":"p"}]}]}`,
	`{"checks":[{"mode":"Peek","items":[{"policy":"p"}]}]}`,
	`{"checks":[{"items":[{"policy":"p","extra":true}]}]}`,
	`{"checks":{"items":[{"policy":"p"}]}}`,
	`{"checks":[1]}`,
	`[]`,
	``,
	"{\"checks\":[{\"items\":[{\"policy\":\"\xff\"}]}]}",
	"{\"checks\":[{\"items\":[{\"policy\":\"a\x01\"}]}]}",
	`{"checks":[{"items":[{"policy":"p","subject":"\udc00"}]}]}`,
	`{"checks":[{"items":[{"policy":"p","subject":"\ud83d\ude00"}]}]}`,
	`{"checks":[` + strings.TrimSuffix(strings.Repeat(`{"items":[{"policy":"p"}]},`, gate.MaxBatchChecks+1), ",") + `]}`,
	`{"checks":[` + strings.TrimSuffix(strings.Repeat(`{"items":[`+strings.TrimSuffix(strings.Repeat(`{"policy":"p"},`, 32), ",")+`]},`, 126), ",") + `]}`,
}

// FuzzBatchBody holds the batch body's two decoders together: whatever
// the body, parseBatchBody (the hand-written decoder, falling back to
// encoding/json) and parseBatchSlow (encoding/json alone) accept the same
// bodies, decode them to the same checks, and refuse the others with the
// same fault, field and reason alike.
func FuzzBatchBody(f *testing.F) {
	for _, s := range batchBodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := parseBatchBody(body)
		want, wantErr := parseBatchSlow(body)
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%q: parseBatchBody's fault %v, encoding/json's %v", body, gotErr, wantErr)
		}
		if !sameChecks(got, want) {
			t.Fatalf("%q: parseBatchBody %+v, encoding/json %+v", body, got, want)
		}
	})
}

// sameChecks reports whether two batches hold the same checks: the same
// modes and items, an empty list of items as good as none.
func sameChecks(a, b []gate.Check) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if a[i].Mode != b[i].Mode || len(a[i].Items) != len(b[i].Items) {
			return false
		}
		for j := range a[i].Items {
			if a[i].Items[j] != b[i].Items[j] {
				return false
			}
		}
	}
	return true
}

// TestBatchBodyFastPath: the batches clients send take the hand-written
// decoder, and what it decodes is what encoding/json decodes.
func TestBatchBodyFastPath(t *testing.T) {
	t.Parallel()
	for name, body := range map[string][]byte{
		"client.WithBatching": batchBodies(1)[0],
		"two checks":          []byte(batchBodySeeds[1]),
		"white space":         []byte(batchBodySeeds[2]),
		"the most checks":     []byte(`{"checks":[` + strings.TrimSuffix(strings.Repeat(`{"items":[{"policy":"p","subject":"s"}]},`, gate.MaxBatchChecks), ",") + `]}`),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, ok := decodeBatchFast(body)
			if !ok {
				t.Fatal("not on the fast path")
			}
			want, err := parseBatchSlow(body)
			if err != nil || !sameChecks(got, want) {
				t.Errorf("fast %+v, encoding/json %+v (%v)", got, want, err)
			}
		})
	}
}

// TestBatchBodySlowPath: what the hand-written decoder leaves to
// encoding/json, faults or not, it leaves whole.
func TestBatchBodySlowPath(t *testing.T) {
	t.Parallel()
	for _, s := range batchBodySeeds[3:] {
		if _, ok := decodeBatchFast([]byte(s)); ok {
			t.Errorf("%.80q: on the fast path", s)
		}
	}
}
