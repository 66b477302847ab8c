package httpapi

import (
	"sync"

	"github.com/tollgate/tollgate/internal/gate"
)

// A /v1/check/batch body carries up to 1,000 checks, and reading it through
// encoding/json (a json.RawMessage copied out of it for each check, then
// each check decoded on its own) cost more allocations than everything
// else a batched check does. Its common shape has a decoder of its own, as
// /v1/check's body has (checkbody.go): one pass over the bytes, one copy
// of the body of which every string is a slice, and the checks and their
// items in one slice each. It accepts only batches that parseBatchSlow
// would decode to the same checks without error; anything else (escapes,
// a check without items, more checks or items than a batch may hold,
// every error) it leaves to parseBatchSlow, whose messages name the check
// and field at fault. FuzzBatchBody holds the two together.

// decodeBatchFast decodes body, reporting ok false for anything outside
// the plain shape {"checks":[check, …]}: one to gate.MaxBatchChecks checks
// of the shape decodeCheckFast reads, each with at least one item, and at
// most gate.MaxBatchItems items in all.
func decodeBatchFast(body []byte) (checks []gate.Check, ok bool) {
	sc := batchScratches.Get().(*batchScratch)
	defer sc.release()
	d := fastDecoder{b: string(body)}
	if !d.byte('{') {
		return nil, false
	}
	if key, ok := d.str(); !ok || key != "checks" || !d.byte(':') || !d.byte('[') {
		return nil, false
	}
	for {
		start := len(sc.items)
		mode, items, ok := d.check(sc.items)
		if !ok || len(items) == start {
			return nil, false
		}
		sc.items = items
		sc.checks = append(sc.checks, checkSpan{mode: mode, start: start, end: len(items)})
		if len(sc.checks) > gate.MaxBatchChecks || len(sc.items) > gate.MaxBatchItems {
			return nil, false
		}
		if !d.byte(',') {
			break
		}
	}
	if !d.byte(']') || !d.byte('}') {
		return nil, false
	}
	d.space()
	if d.i != len(d.b) {
		return nil, false
	}
	checks = make([]gate.Check, len(sc.checks))
	items := make([]gate.Item, len(sc.items))
	copy(items, sc.items)
	for i, c := range sc.checks {
		checks[i] = gate.Check{Mode: c.mode, Items: items[c.start:c.end:c.end]}
	}
	return checks, true
}

// batchScratch is what decodeBatchFast reads a batch into before it knows
// its size.
type batchScratch struct {
	checks []checkSpan
	items  []gate.Item
}

// checkSpan is one check of a batch: its mode and where its items are.
type checkSpan struct {
	mode       gate.Mode
	start, end int
}

var batchScratches = sync.Pool{New: func() any { return new(batchScratch) }}

// release empties sc, so that it keeps no string of the body alive, and
// puts it back in batchScratches.
func (sc *batchScratch) release() {
	clear(sc.items)
	sc.checks, sc.items = sc.checks[:0], sc.items[:0]
	batchScratches.Put(sc)
}
