package dashboard

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// maxInputLen bounds any one value a dashboard page takes from its address
// or a form, in bytes. The longest a page makes is a search or a Stripe id;
// a password is at most admin.MaxPasswordLen, far below this.
const maxInputLen = 4096

// validInput refuses, with a 400 page, a request whose path parameters,
// query values or form values hold what no dashboard page or form makes:
// bytes that are not UTF-8, a NUL or another control character (PostgreSQL
// refuses the first two in text; none has a use), or a value over
// maxInputLen. It is the one place the dashboard checks these, before any
// handler reads its input, so that hostile input is a client's mistake
// and never reaches a query as one.
func (d *Dashboard) validInput(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		bad := func(where string) error {
			return d.fail(c, nil, badRequest(where+" holds characters no dashboard page sends, or is too long."))
		}
		names := c.ParamNames()
		for i, v := range c.ParamValues() {
			if !cleanInput(v) {
				name := "The address"
				if i < len(names) {
					name = "The address's " + strings.TrimPrefix(names[i], ":")
				}
				return bad(name)
			}
		}
		// The path itself, for routes whose parameters do not cover it.
		if !cleanInput(c.Request().URL.Path) {
			return bad("The address")
		}
		for name, vs := range c.QueryParams() {
			if !cleanInput(name) {
				return bad("A query parameter's name")
			}
			for _, v := range vs {
				if !cleanInput(v) {
					return bad(fmt.Sprintf("The query parameter %q", name))
				}
			}
		}
		if m := c.Request().Method; m != http.MethodGet && m != http.MethodHead {
			form, err := c.FormParams()
			if err != nil {
				return d.fail(c, nil, badRequest("The form could not be read."))
			}
			for name, vs := range form {
				if !cleanInput(name) {
					return bad("A form field's name")
				}
				for _, v := range vs {
					if !cleanInput(v) {
						return bad(fmt.Sprintf("The form field %q", name))
					}
				}
			}
		}
		return next(c)
	}
}

// cleanInput reports whether v is UTF-8 without control characters other
// than tab, newline and carriage return, and at most maxInputLen bytes.
func cleanInput(v string) bool {
	if len(v) > maxInputLen || !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}

// maxPage is the last page number a list accepts: far past any real list,
// near enough that page*size stays a small offset.
const maxPage = 1_000_000

// intParam reads the query parameter name as a whole number from lo to hi;
// absent or empty it is def. Anything else is a 400 page naming it, never
// a value clamped by the parser (strconv.Atoi answers an overflow with the
// largest int).
func intParam(c echo.Context, name string, def, lo, hi int) (int, error) {
	s := c.QueryParam(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badRequest(fmt.Sprintf("The %s must be a whole number from %d to %d.", name, lo, hi))
	}
	return n, nil
}
