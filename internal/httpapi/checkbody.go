package httpapi

import (
	"strconv"
	"unicode/utf8"

	"github.com/tollgate/tollgate/internal/gate"
)

// A /v1/check body is read on every check, so its common shape has a
// decoder of its own: one pass over the bytes, no reflection, and two
// allocations (one copy of the body, of which every string is a slice, and
// the check with room for one item). It accepts only what encoding/json
// would decode to the same checkBody, with a valid mode and costs of at
// least 1 (FuzzCheckBody holds it to that); anything else, escapes and
// every error included, it leaves to decodeJSON, whose messages name the
// field at fault.

// decodeCheckFast decodes body, reporting ok false for anything outside the
// plain shape {"mode":"…","items":[{"policy":"…","subject":"…","cost":N}]}
// with members in any order, strings without escapes or control
// characters, costs that are plain integers of at least 1 (1 when absent),
// and a mode of "consume" (or none) or "peek".
func decodeCheckFast(body []byte) (chk *gate.Check, ok bool) {
	d := fastDecoder{b: string(body)}
	c := new(oneItemCheck)
	if c.Mode, c.Items, ok = d.check(c.one[:0]); !ok {
		return nil, false
	}
	d.space()
	if d.i != len(d.b) {
		return nil, false
	}
	return &c.Check, true
}

// check reads one check object of the plain shape decodeCheckFast
// describes, its items appended to items.
func (d *fastDecoder) check(items []gate.Item) (mode gate.Mode, _ []gate.Item, ok bool) {
	if !d.byte('{') {
		return mode, nil, false
	}
	var seenMode, seenItems bool
	// An empty object is consumed here, and refused by the closing brace
	// below: decodeJSON answers it.
	if !d.byte('}') {
		for {
			key, ok := d.str()
			if !ok || !d.byte(':') {
				return mode, nil, false
			}
			switch key {
			case "mode":
				if seenMode {
					return mode, nil, false
				}
				seenMode = true
				m, ok := d.str()
				switch {
				case !ok:
					return mode, nil, false
				case m == "" || m == "consume":
					mode = gate.Consume
				case m == "peek":
					mode = gate.Peek
				default:
					return mode, nil, false
				}
			case "items":
				if seenItems {
					return mode, nil, false
				}
				seenItems = true
				if items, ok = d.items(items); !ok {
					return mode, nil, false
				}
			default:
				return mode, nil, false
			}
			if d.byte(',') {
				continue
			}
			break
		}
	}
	if !d.byte('}') {
		return mode, nil, false
	}
	return mode, items, true
}

// oneItemCheck is a check with room for one item, the common case: one
// allocation for both.
type oneItemCheck struct {
	gate.Check
	one [1]gate.Item
}

type fastDecoder struct {
	b string
	i int
}

func (d *fastDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c, after white space, if it is next.
func (d *fastDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str reads a string without escapes: valid UTF-8, no control characters
// (encoding/json would reject those, or replace bytes of invalid UTF-8).
func (d *fastDecoder) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	ascii := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !ascii && !utf8.ValidString(s) {
				return "", false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
		d.i++
	}
	return "", false
}

// items reads the items array, appending them to items.
func (d *fastDecoder) items(items []gate.Item) ([]gate.Item, bool) {
	if !d.byte('[') {
		return nil, false
	}
	if d.byte(']') {
		return items, true
	}
	for {
		it, ok := d.item()
		if !ok {
			return nil, false
		}
		items = append(items, it)
		if d.byte(',') {
			continue
		}
		return items, d.byte(']')
	}
}

// item reads one item object.
func (d *fastDecoder) item() (it gate.Item, ok bool) {
	it.Cost = 1
	if !d.byte('{') {
		return it, false
	}
	if d.byte('}') {
		return it, true
	}
	var seen [3]bool
	for {
		key, ok := d.str()
		if !ok || !d.byte(':') {
			return it, false
		}
		var n int
		switch key {
		case "policy":
			it.Policy, ok = d.str()
		case "subject":
			n = 1
			it.Subject, ok = d.str()
		case "cost":
			n = 2
			it.Cost, ok = d.integer()
			ok = ok && it.Cost >= 1
		default:
			return it, false
		}
		if !ok || seen[n] {
			return it, false
		}
		seen[n] = true
		if d.byte(',') {
			continue
		}
		return it, d.byte('}')
	}
}

// integer reads a JSON integer that fits an int64: an optional "-", then
// "0" or a digit 1-9 and more digits, and no fraction or exponent.
func (d *fastDecoder) integer() (int64, bool) {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i > digits+1) || d.i-start > 19 {
		return 0, false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(d.b[start:d.i], 10, 64)
	return n, err == nil
}
