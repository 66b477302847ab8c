package client

import (
	"encoding/json"
	"fmt"
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

// readJSON reads b, a JSON object, into v with encoding/json, and returns
// an error naming the first of the members required that b lacks or holds
// as null: the answers that are not read by hand check their members with
// it.
func readJSON(b []byte, v any, required ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, name := range required {
		if r, ok := m[name]; !ok || string(r) == "null" {
			return fmt.Errorf("no %q", name)
		}
	}
	return json.Unmarshal(b, v)
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
	if err := readJSON(b, &v, "results"); err != nil {
		return err
	}
	out.results = make([][]byte, len(v.Results))
	for i, r := range v.Results {
		out.results[i] = r
	}
	return nil
}

// decisionOut is the answer of POST /v1/check to a check of asked.
type decisionOut struct {
	asked []checkItemIn
	d     Decision
}

func (out *decisionOut) readAnswer(b []byte) (err error) {
	out.d, err = readCheckAnswer(b, out.asked)
	return err
}

// readCheckAnswer reads Tollgate's answer to a check of the items asked:
// a decision with every member a decision has and one item for each item
// asked, or an error that says what the answer lacks. It is the one reader
// of decisions, for /v1/check and for each result of a batch: an answer
// that is not Tollgate's must not pass for a decision (a zero Decision
// refuses, as if the tenant's policy had, and is not Degraded).
func readCheckAnswer(b []byte, asked []checkItemIn) (Decision, error) {
	d, m, ok := readDecisionOf(b, asked)
	if !ok {
		var err error
		if d, m, err = jsonDecision(b); err != nil {
			return Decision{}, err
		}
	}
	if err := m.check(); err != nil {
		return Decision{}, err
	}
	if len(d.Items) != len(asked) {
		return Decision{}, fmt.Errorf("%d items for %d asked", len(d.Items), len(asked))
	}
	return d, nil
}

// members records which of the members a decision must have an answer
// had: those CheckResponse requires in the OpenAPI document, and those its
// items require but window_seconds, which a Tollgate of before 2026-12-04
// does not write (an item's degraded is written only when true).
type members struct {
	// answer holds the answer's bits; items the bits every item had.
	answer, items uint16
}

// The bits of members.
const (
	hasAllowed uint16 = 1 << iota
	hasDegraded
	hasItems
	hasPolicy
	hasLimit
	hasRemaining
	hasResetAt
	hasRetryAfter
	hasShadow

	answerMembers = hasAllowed | hasDegraded | hasItems
	itemMembers   = hasPolicy | hasAllowed | hasLimit | hasRemaining | hasResetAt | hasRetryAfter | hasShadow
)

// memberNames are the members' JSON names, by bit.
var memberNames = []string{"allowed", "degraded", "items", "policy", "limit", "remaining", "reset_at", "retry_after_ms", "shadow"}

// check returns an error naming the first member missing, or nil.
func (m members) check() error {
	for i, name := range memberNames {
		bit := uint16(1) << i
		switch {
		case answerMembers&bit != 0 && m.answer&bit == 0:
			return fmt.Errorf("no %q", name)
		case itemMembers&bit != 0 && m.items&bit == 0:
			return fmt.Errorf("an item without %q", name)
		}
	}
	return nil
}

// jsonDecision reads a check's answer with encoding/json.
func jsonDecision(b []byte) (Decision, members, error) {
	var v checkOut
	if err := json.Unmarshal(b, &v); err != nil {
		return Decision{}, members{}, err
	}
	d, m := v.decision()
	return d, m, nil
}

// reader reads one JSON text of the shapes Tollgate writes. Its methods
// set bad, and return zero values, at the first byte they do not expect.
type reader struct {
	b   []byte
	i   int
	bad bool
	// asked are the items of the check whose answer is read (items).
	asked []checkItemIn
	// seen holds the members every item read so far had (items).
	seen uint16
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

// readDecisionOf reads the answer to a check of items, {"allowed":…,
// "degraded":…,"items":[…]}, noting the members it had, and reports
// whether it could. An item's policy is the check's string when it names
// the same, rather than a copy of the answer's bytes.
func readDecisionOf(b []byte, items []checkItemIn) (Decision, members, bool) {
	r := reader{b: b, asked: items, seen: ^uint16(0)}
	var d Decision
	var m members
	r.object(func(k []byte) {
		switch string(k) {
		case "allowed":
			d.Allowed = r.boolean()
			m.answer |= hasAllowed
		case "degraded":
			d.Degraded = r.boolean()
			m.answer |= hasDegraded
		case "items":
			if d.Items != nil {
				r.bad = true
				return
			}
			d.Items = r.items()
			m.answer |= hasItems
		default:
			r.bad = true
		}
	})
	if !r.end() {
		return Decision{}, members{}, false
	}
	if d.Items == nil {
		d.Items = []ItemDecision{}
	}
	m.items = r.seen
	return d, m, true
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
		var seen uint16
		r.object(func(k []byte) {
			switch string(k) {
			case "policy":
				it.Policy = r.policy(len(items))
				seen |= hasPolicy
			case "allowed":
				it.Allowed = r.boolean()
				seen |= hasAllowed
			case "limit":
				it.Limit = r.integer()
				seen |= hasLimit
			case "remaining":
				it.Remaining = r.integer()
				seen |= hasRemaining
			case "window_seconds":
				it.Window = time.Duration(r.integer()) * time.Second
			case "reset_at":
				if err := it.ResetAt.UnmarshalText(r.plain()); err != nil {
					r.bad = true
				}
				seen |= hasResetAt
			case "retry_after_ms":
				it.RetryAfter = time.Duration(r.integer()) * time.Millisecond
				seen |= hasRetryAfter
			case "shadow":
				it.Shadow = r.boolean()
				seen |= hasShadow
			case "degraded":
				it.Degraded = r.boolean()
			default:
				r.bad = true
			}
		})
		r.seen &= seen
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
