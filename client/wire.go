package client

import (
	"encoding/json"
	"strconv"
	"time"
)

// A check's request and answer are written and read on every check, and a
// batch's on every check of it, so the common shapes go by hand: a check is
// appended as the JSON encoding/json writes for it (TestAppendCheckIn holds
// the two together), and an answer of the shapes Tollgate writes is read in
// one pass without reflection. Anything the hand-reader does not expect (an
// escape in a string, an unknown or differently spelt member, a null, a
// problem) makes it give up and encoding/json read the answer as before;
// FuzzReadDecision and FuzzSplitResults hold the two to the same results.

// appendJSON appends in as encoding/json would write it (Client.check
// always makes Items, so it is never null).
func (in *checkIn) appendJSON(b []byte) []byte {
	b = append(b, `{"mode":`...)
	b = appendString(b, in.Mode)
	b = append(b, `,"items":[`...)
	for i, it := range in.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"policy":`...)
		b = appendString(b, it.Policy)
		if it.Subject != "" {
			b = append(b, `,"subject":`...)
			b = appendString(b, it.Subject)
		}
		if it.Cost != 0 {
			b = append(b, `,"cost":`...)
			b = strconv.AppendInt(b, it.Cost, 10)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendString appends s as a JSON string: as it is when it needs no
// escaping, else as encoding/json writes it. (Tollgate's answers are
// written by the same rule in internal/httpapi, which the public client may
// not import.)
func appendString(b []byte, s string) []byte {
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

// appender is a request body that writes itself (do uses it in place of
// json.Marshal).
type appender interface {
	appendJSON([]byte) []byte
}

// answerReader is an answer that reads itself (once uses it in place of
// json.Unmarshal); an error is an answer that is not Tollgate's JSON.
type answerReader interface {
	readAnswer([]byte) error
}

// checkBatchIn is the body of POST /v1/check/batch for the waiters' checks.
type checkBatchIn []*waiter

func (in checkBatchIn) appendJSON(b []byte) []byte {
	b = append(b, `{"checks":[`...)
	for i, w := range in {
		if i > 0 {
			b = append(b, ',')
		}
		b = w.in.appendJSON(b)
	}
	return append(b, "]}"...)
}

// checkBatchOut is the answer of POST /v1/check/batch: each result's JSON,
// read by its own caller.
type checkBatchOut struct {
	results [][]byte
}

func (out *checkBatchOut) readAnswer(b []byte) error {
	if rs, ok := splitResults(b); ok {
		out.results = rs
		return nil
	}
	var v struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out.results = make([][]byte, len(v.Results))
	for i, r := range v.Results {
		out.results[i] = r
	}
	return nil
}

// decisionOut is the answer of POST /v1/check.
type decisionOut struct {
	d Decision
}

func (out *decisionOut) readAnswer(b []byte) (err error) {
	out.d, err = decodeDecision(b)
	return err
}

// decodeDecision reads a check's answer by hand, or with encoding/json
// when it is not of the shape readDecision knows.
func decodeDecision(b []byte) (Decision, error) {
	if d, ok := readDecision(b); ok {
		return d, nil
	}
	return jsonDecision(b)
}

// jsonDecision reads a check's answer with encoding/json.
func jsonDecision(b []byte) (Decision, error) {
	var v checkOut
	if err := json.Unmarshal(b, &v); err != nil {
		return Decision{}, err
	}
	return v.decision(), nil
}

// reader reads one JSON text of the shapes Tollgate writes. Its methods
// set bad, and return zero values, at the first byte they do not expect.
type reader struct {
	b   []byte
	i   int
	bad bool
	// asked are the items of the check whose answer is read (items).
	asked []checkItemIn
}

func (r *reader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// next reports whether the next byte, after white space, is c, and takes
// it if so.
func (r *reader) next(c byte) bool {
	r.space()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

func (r *reader) want(c byte) {
	if !r.next(c) {
		r.bad = true
	}
}

// plain reads a string that holds neither an escape nor a byte beyond
// ASCII, and returns its bytes (within r.b).
func (r *reader) plain() []byte {
	if !r.next('"') {
		r.bad = true
		return nil
	}
	for j := r.i; j < len(r.b); j++ {
		c := r.b[j]
		if c == '"' {
			s := r.b[r.i:j]
			r.i = j + 1
			return s
		}
		if c < 0x20 || c >= 0x80 || c == '\\' {
			break
		}
	}
	r.bad = true
	return nil
}

// key reads an object member's name and its colon.
func (r *reader) key() []byte {
	k := r.plain()
	r.want(':')
	return k
}

func (r *reader) boolean() bool {
	r.space()
	switch {
	case len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "true":
		r.i += 4
		return true
	case len(r.b)-r.i >= 5 && string(r.b[r.i:r.i+5]) == "false":
		r.i += 5
		return false
	}
	r.bad = true
	return false
}

// integer reads a JSON number that is a whole int64.
func (r *reader) integer() int64 {
	r.space()
	j := r.i
	if j < len(r.b) && r.b[j] == '-' {
		j++
	}
	d := j
	for j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9' {
		j++
	}
	if j == d || (r.b[d] == '0' && j > d+1) {
		r.bad = true
		return 0
	}
	if j < len(r.b) && (r.b[j] == '.' || r.b[j] == 'e' || r.b[j] == 'E') {
		r.bad = true
		return 0
	}
	n, err := strconv.ParseInt(string(r.b[r.i:j]), 10, 64)
	if err != nil {
		r.bad = true
		return 0
	}
	r.i = j
	return n
}

// end reports whether nothing but white space is left and nothing was bad.
func (r *reader) end() bool {
	r.space()
	return !r.bad && r.i == len(r.b)
}

// readDecision reads a check's answer, {"allowed":…,"degraded":…,"items":
// […]}, and reports whether it could.
func readDecision(b []byte) (Decision, bool) {
	return readDecisionOf(b, nil)
}

// readDecisionOf is readDecision for the answer to a check of items: an
// item's policy is the check's string when it names the same, rather than
// a copy of the answer's bytes.
func readDecisionOf(b []byte, items []checkItemIn) (Decision, bool) {
	r := reader{b: b, asked: items}
	var d Decision
	r.object(func(k []byte) {
		switch string(k) {
		case "allowed":
			d.Allowed = r.boolean()
		case "degraded":
			d.Degraded = r.boolean()
		case "items":
			if d.Items != nil {
				r.bad = true
				return
			}
			d.Items = r.items()
		default:
			r.bad = true
		}
	})
	if !r.end() {
		return Decision{}, false
	}
	if d.Items == nil {
		d.Items = []ItemDecision{}
	}
	return d, true
}

// policy reads the policy of the n-th item of an answer: the asked item's
// string when it is the same.
func (r *reader) policy(n int) string {
	p := r.plain()
	if n < len(r.asked) && r.asked[n].Policy == string(p) {
		return r.asked[n].Policy
	}
	return string(p)
}

// items reads a check answer's items.
func (r *reader) items() []ItemDecision {
	items := make([]ItemDecision, 0, 1)
	r.array(func() {
		var it ItemDecision
		r.object(func(k []byte) {
			switch string(k) {
			case "policy":
				it.Policy = r.policy(len(items))
			case "allowed":
				it.Allowed = r.boolean()
			case "limit":
				it.Limit = r.integer()
			case "remaining":
				it.Remaining = r.integer()
			case "window_seconds":
				it.Window = time.Duration(r.integer()) * time.Second
			case "reset_at":
				if err := it.ResetAt.UnmarshalText(r.plain()); err != nil {
					r.bad = true
				}
			case "retry_after_ms":
				it.RetryAfter = time.Duration(r.integer()) * time.Millisecond
			case "shadow":
				it.Shadow = r.boolean()
			case "degraded":
				it.Degraded = r.boolean()
			default:
				r.bad = true
			}
		})
		items = append(items, it)
	})
	return items
}

// object reads an object, handing each member's name to member, which
// reads its value.
func (r *reader) object(member func(name []byte)) {
	r.want('{')
	for n := 0; !r.bad && !r.next('}'); n++ {
		if n > 0 {
			r.want(',')
		}
		member(r.key())
	}
}

// array reads an array, calling elem to read each element.
func (r *reader) array(elem func()) {
	r.want('[')
	for n := 0; !r.bad && !r.next(']'); n++ {
		if n > 0 {
			r.want(',')
		}
		elem()
	}
}

// splitResults splits a batch's answer, {"results":[…]}, into each
// result's JSON (within b), and reports whether it could.
func splitResults(b []byte) ([][]byte, bool) {
	r := reader{b: b}
	rs := [][]byte{}
	results := false
	r.object(func(k []byte) {
		if string(k) != "results" || results {
			r.bad = true
			return
		}
		results = true
		r.array(func() {
			r.space()
			start := r.i
			r.skip(0)
			rs = append(rs, b[start:r.i])
		})
	})
	if !results || !r.end() {
		return nil, false
	}
	return rs, true
}

// maxDepth bounds how deeply skip goes into a value; deeper ones are left
// to encoding/json.
const maxDepth = 32

// skip passes over one JSON value, checking its grammar.
func (r *reader) skip(depth int) {
	r.space()
	if r.i >= len(r.b) || depth > maxDepth {
		r.bad = true
		return
	}
	switch c := r.b[r.i]; {
	case c == '{':
		r.object(func([]byte) { r.skip(depth + 1) })
	case c == '[':
		r.array(func() { r.skip(depth + 1) })
	case c == '"':
		r.str()
	case c == '-' || (c >= '0' && c <= '9'):
		r.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(r.b)-r.i >= len(lit) && string(r.b[r.i:r.i+len(lit)]) == lit {
				r.i += len(lit)
				return
			}
		}
		r.bad = true
	}
}

// str passes over a JSON string, escapes and all.
func (r *reader) str() {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		r.bad = true
		return
	}
	for j := r.i + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			r.i = j + 1
			return
		case c < 0x20:
			r.bad = true
			return
		case c == '\\':
			j++
			if j >= len(r.b) {
				r.bad = true
				return
			}
			switch r.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(r.b)-j < 5 {
					r.bad = true
					return
				}
				for _, h := range r.b[j+1 : j+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						r.bad = true
						return
					}
				}
				j += 4
			default:
				r.bad = true
				return
			}
		}
	}
	r.bad = true
}

// number passes over a JSON number.
func (r *reader) number() {
	j := r.i
	digits := func() bool {
		k := j
		for j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(r.b) && r.b[j] == '-' {
		j++
	}
	switch {
	case j < len(r.b) && r.b[j] == '0':
		j++
	case !digits():
		r.bad = true
		return
	}
	if j < len(r.b) && r.b[j] == '.' {
		j++
		if !digits() {
			r.bad = true
			return
		}
	}
	if j < len(r.b) && (r.b[j] == 'e' || r.b[j] == 'E') {
		j++
		if j < len(r.b) && (r.b[j] == '+' || r.b[j] == '-') {
			j++
		}
		if !digits() {
			r.bad = true
			return
		}
	}
	r.i = j
}
