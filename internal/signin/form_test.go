package signin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/admin":                     "/admin",
		"/admin/tenants?page=2":      "/admin/tenants?page=2",
		"":                           "",
		"/administrator":             "",
		"/admin/login?next=/admin":   "",
		"/admin/logout":              "",
		"//evil.example/admin":       "",
		"https://evil.example/admin": "",
		`/admin\..\x`:                "",
		"/console":                   "",
	} {
		if got := SafeNext("/admin", next); got != want {
			t.Errorf("SafeNext(/admin, %q) = %q, want %q", next, got, want)
		}
	}
	if got := SafeNext("/console", "/console/keys"); got != "/console/keys" {
		t.Errorf("another root: %q", got)
	}
}

func TestCSRFForKeepsRealmsApart(t *testing.T) {
	t.Parallel()
	a, b := CSRFFor("admin", "token"), CSRFFor("console", "token")
	if a == b || a != CSRFFor("admin", "token") || a == CSRFFor("admin", "other") {
		t.Errorf("form tokens: admin %q, console %q", a, b)
	}
	if SameToken("", "") || !SameToken(a, a) || SameToken(a, b) {
		t.Error("SameToken")
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                              "1 second",
		1500 * time.Millisecond:        "2 seconds",
		time.Minute:                    "1 minute",
		14*time.Minute + 3*time.Second: "14 minutes 3 seconds",
		2*time.Minute + 1*time.Second:  "2 minutes 1 second",
	} {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestFormsLeadToHTTPS: a page whose forms lead on to Stripe may post to
// https addresses; everything else of the policy stays as SecurityHeaders
// wrote it, and other pages post to the site only.
func TestFormsLeadToHTTPS(t *testing.T) {
	t.Parallel()
	e := echo.New()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/console/billing", nil), httptest.NewRecorder())
	if err := SecurityHeaders(func(echo.Context) error { return nil })(c); err != nil {
		t.Fatal(err)
	}
	before := c.Response().Header().Get("Content-Security-Policy")
	if !strings.Contains(before, "form-action 'self';") {
		t.Fatalf("SecurityHeaders: %q, want form-action 'self'", before)
	}
	FormsLeadToHTTPS(c.Response().Header())
	after := c.Response().Header().Get("Content-Security-Policy")
	if want := strings.Replace(before, "form-action 'self';", "form-action 'self' https:;", 1); after != want {
		t.Errorf("FormsLeadToHTTPS: got %q, want %q", after, want)
	}
}
