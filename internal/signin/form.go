package signin

import (
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgate/tollgate/internal/kit/digest"
)

// CSRFFor derives a session's form token from its token in realm: only the
// holder of the (HttpOnly) session cookie can compute it, and nothing more
// needs storing.
func CSRFFor(realm, token string) string {
	return base64.RawURLEncoding.EncodeToString(digest.Key([]byte(token), "tollgate "+realm+" csrf"))
}

// PostedToken is the form token of a post: from its body only, never from
// the URL's query, which proxies log, browsers keep in their history and
// send on in Referer.
func PostedToken(c echo.Context) string {
	return c.Request().PostFormValue("csrf")
}

// SameToken compares two tokens in constant time; empty never matches.
func SameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// SafeNext returns next when it is a path of this site under root ("/admin":
// root itself or below it), but neither root's sign-in nor its sign-out;
// else "": signing in must not become an open redirect.
func SafeNext(root, next string) string {
	if next == "" || len(next) > 2000 {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		!(u.Path == root || strings.HasPrefix(u.Path, root+"/")) ||
		strings.HasPrefix(next, "//") || strings.Contains(next, `\`) ||
		strings.HasPrefix(u.Path, root+"/login") || strings.HasPrefix(u.Path, root+"/logout") {
		return ""
	}
	return next
}

// Query returns "?name=value", or "" when value is empty.
func Query(name, value string) string {
	if value == "" {
		return ""
	}
	return "?" + url.Values{name: {value}}.Encode()
}

// HumanDuration says d in words, rounded up to the second: "42 seconds",
// "14 minutes 3 seconds".
func HumanDuration(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	secs = max(secs, 1)
	plural := func(n int64, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return strconv.FormatInt(n, 10) + " " + unit + "s"
	}
	m, s := secs/60, secs%60
	switch {
	case m == 0:
		return plural(s, "second")
	case s == 0:
		return plural(m, "minute")
	}
	return plural(m, "minute") + " " + plural(s, "second")
}

// contentSecurity is the pages' Content-Security-Policy, their forms
// posting to formAction.
func contentSecurity(formAction string) string {
	return "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action " + formAction + "; frame-ancestors 'none'; base-uri 'none'"
}

// SecurityHeaders keeps a site's pages out of frames and caches, and allows
// them nothing but their own style sheet: no script, no inline style.
// Their forms post to the site only (see FormsLeadToHTTPS).
func SecurityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", contentSecurity("'self'"))
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		return next(c)
	}
}

// FormsLeadToHTTPS widens the form-action of the page about to be written
// (after SecurityHeaders) to any https address, for a page whose forms'
// answers send the browser on to a payment provider: browsers hold every
// redirect after a form's post to form-action, and Stripe chooses where
// Checkout and its billing portal live (checkout.stripe.com,
// billing.stripe.com, or the account's own domain). Under 'self' alone the
// browser stays on the page, and nothing says why.
func FormsLeadToHTTPS(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurity("'self' https:"))
}

// MaxForm bounds a form body: the largest form has a handful of fields.
const MaxForm = 64 << 10

// BodyLimit bounds a request's body to MaxForm.
func BodyLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, MaxForm)
		return next(c)
	}
}
