package dashboard_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/dashboard"
)

func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()

	// Signed out, a page sends the browser to sign in, and back afterwards.
	p := b.get("/admin/tenants?q=acme").mustStatus(http.StatusSeeOther)
	if got, want := p.header.Get("Location"), "/admin/login?next="+url.QueryEscape("/admin/tenants?q=acme"); got != want {
		t.Fatalf("redirect to %q, want %q", got, want)
	}
	login := b.get("/admin/login?next=" + url.QueryEscape("/admin/tenants?q=acme")).mustStatus(http.StatusOK)
	form := login.one("login-form")
	if attr(form, "method") != "post" || attr(form, "action") != "/admin/login" {
		t.Fatalf("login form %v", form.Attr)
	}
	assertLabelled(t, login)
	c := cookieHeader(t, login.header, "tg_admin_login")
	for _, want := range []string{"HttpOnly", "SameSite=Lax", "Path=/admin/login"} {
		if !strings.Contains(c, want) {
			t.Errorf("sign-in cookie %q lacks %s", c, want)
		}
	}
	if strings.Contains(c, "Secure") {
		t.Errorf("sign-in cookie %q is Secure over plain HTTP without TOLLGATE_SECURE_COOKIES", c)
	}
	csrf := login.inputValue("csrf")

	// A wrong password is refused and says so, without saying which part.
	p = b.post("/admin/login", url.Values{"csrf": {csrf}, "email": {"ops@example.com"}, "password": {"wrong"}, "next": {"/admin/tenants?q=acme"}})
	p.mustStatus(http.StatusUnauthorized)
	if got := p.text("login-error"); got != "Wrong email or password." {
		t.Fatalf("wrong password: %q", got)
	}
	p = b.post("/admin/login", url.Values{"csrf": {p.inputValue("csrf")}, "email": {"nobody@example.com"}, "password": {password}})
	if p.mustStatus(http.StatusUnauthorized).text("login-error") != "Wrong email or password." {
		t.Fatal("an unknown email is told apart from a wrong password")
	}

	// The right one opens a session, stored hashed, and goes where it was
	// going; the email is matched whatever its case.
	p = b.post("/admin/login", url.Values{"csrf": {p.inputValue("csrf")}, "email": {" Ops@Example.COM "}, "password": {password}, "next": {"/admin/tenants?q=acme"}})
	p.mustStatus(http.StatusSeeOther)
	if got := p.header.Get("Location"); got != "/admin/tenants?q=acme" {
		t.Fatalf("after sign-in: to %q", got)
	}
	sc := cookieHeader(t, p.header, "tg_admin")
	for _, want := range []string{"HttpOnly", "SameSite=Lax", "Path=/admin", "Max-Age=43200"} {
		if !strings.Contains(sc, want) {
			t.Errorf("session cookie %q lacks %s", sc, want)
		}
	}
	token := b.cookie("tg_admin").Value
	sum := sha256.Sum256([]byte(token))
	var stored, raw int
	e.pool.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE token_hash = $1), count(*) FILTER (WHERE token_hash = $2) FROM admin_sessions", sum[:], []byte(token)).Scan(&stored, &raw)
	if stored != 1 || raw != 0 {
		t.Fatalf("sessions stored by hash %d, by token %d; want 1 and 0", stored, raw)
	}
	home := b.get("/admin").mustStatus(http.StatusOK)
	if got := home.text("admin-email"); got != "ops@example.com" {
		t.Fatalf("signed in as %q", got)
	}
	// Signed in, the sign-in page sends the browser on.
	b.get("/admin/login").mustStatus(http.StatusSeeOther)

	// Signing out needs the form token; afterwards the cookie opens nothing.
	b.post("/admin/logout", nil).mustStatus(http.StatusForbidden)
	p = b.post("/admin/logout", url.Values{"csrf": {home.inputValue("csrf")}}).mustStatus(http.StatusSeeOther)
	if got := p.header.Get("Location"); got != "/admin/login?signed_out=1" {
		t.Fatalf("after sign-out: to %q", got)
	}
	e.pool.QueryRow(context.Background(), "SELECT count(*) FROM admin_sessions").Scan(&stored)
	if stored != 0 {
		t.Fatalf("%d sessions left after sign-out", stored)
	}
	replay := e.browser()
	replay.http.Jar.SetCookies(mustURL(e.srv.URL+"/admin"), []*http.Cookie{{Name: "tg_admin", Value: token, Path: "/admin"}})
	replay.get("/admin").mustStatus(http.StatusSeeOther)
	if got := b.get("/admin/login?signed_out=1").text("login-notice"); got != "You are signed out." {
		t.Fatalf("notice %q", got)
	}
}

func TestSignInFormNeedsItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	// A cross-site form has neither the cookie nor its value.
	p := b.post("/admin/login", url.Values{"email": {"ops@example.com"}, "password": {password}})
	p.mustStatus(http.StatusForbidden)
	if !strings.Contains(p.text("login-error"), "expired") {
		t.Fatalf("error %q", p.text("login-error"))
	}
	// The cookie without the matching field is refused too.
	b.csrf("/admin/login")
	b.post("/admin/login", url.Values{"csrf": {"forged"}, "email": {"ops@example.com"}, "password": {password}}).mustStatus(http.StatusForbidden)
}

// TestFormTokenOnlyFromTheBody: the form token counts only in the posted
// form, never in the URL's query, where it would be logged by proxies,
// kept in the history and sent on in Referer: a post with the right token
// in the query and an empty body is refused, for the sign-in form and for
// a signed-in page alike, and the same post with the token in its body
// passes.
func TestFormTokenOnlyFromTheBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	csrf := b.csrf("/admin/login")
	q := "?" + url.Values{"csrf": {csrf}}.Encode()
	b.post("/admin/login"+q, nil).mustStatus(http.StatusForbidden)
	b.post("/admin/login"+q, url.Values{"email": {"ops@example.com"}, "password": {password}}).mustStatus(http.StatusForbidden)
	b.post("/admin/login", url.Values{"csrf": {b.csrf("/admin/login")}, "email": {"ops@example.com"}, "password": {password}}).mustStatus(http.StatusSeeOther)

	csrf = b.get("/admin").mustStatus(http.StatusOK).inputValue("csrf")
	q = "?" + url.Values{"csrf": {csrf}}.Encode()
	b.post("/admin/logout"+q, nil).mustStatus(http.StatusForbidden)
	b.get("/admin").mustStatus(http.StatusOK)
	b.post("/admin/logout", url.Values{"csrf": {csrf}}).mustStatus(http.StatusSeeOther)
	b.get("/admin").mustStatus(http.StatusSeeOther)
}

func TestSecureCookies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dashboard.Config) { c.SecureCookies = true })
	e.admin("ops@example.com")
	b := e.browser()
	p := b.get("/admin/login")
	if c := cookieHeader(t, p.header, "tg_admin_login"); !strings.Contains(c, "Secure") {
		t.Fatalf("sign-in cookie %q not Secure", c)
	}
	p = b.post("/admin/login", url.Values{"csrf": {p.inputValue("csrf")}, "email": {"ops@example.com"}, "password": {password}})
	if c := cookieHeader(t, p.header, "tg_admin"); !strings.Contains(c, "Secure") {
		t.Fatalf("session cookie %q not Secure", c)
	}
}

var retryAfterText = regexp.MustCompile(`^Try again in (\d+ minutes? )?(\d+ seconds?)? ?\(after \d\d:\d\d:\d\d UTC\)\.$`)

func TestSignInLimiter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	e.admin("cfo@example.com")
	b := e.browser()
	csrf := b.csrf("/admin/login")
	try := func(email, pw string) page {
		t.Helper()
		p := b.post("/admin/login", url.Values{"csrf": {csrf}, "email": {email}, "password": {pw}})
		if p.status != http.StatusSeeOther {
			csrf = p.inputValue("csrf")
		}
		return p
	}
	// Eight failures of one account within 15 minutes are answered...
	for i := 1; i <= dashboard.FailuresPerAccount; i++ {
		try("cfo@example.com", "guess "+strconv.Itoa(i)).mustStatus(http.StatusUnauthorized)
	}
	// ...the ninth is refused before its password is tried (even the right
	// one) and says when to try again.
	{
		p := try("cfo@example.com", password).mustStatus(http.StatusTooManyRequests)
		if !strings.Contains(p.text("login-error"), "failed sign-ins for this account") {
			t.Fatalf("refusal %q", p.text("login-error"))
		}
		if got := p.text("retry-after"); !retryAfterText.MatchString(got) {
			t.Fatalf("retry text %q", got)
		}
		if ra, err := strconv.Atoi(p.header.Get("Retry-After")); err != nil || ra < 1 || ra > 15*60 {
			t.Fatalf("Retry-After %q", p.header.Get("Retry-After"))
		}
	}
	// Ten attempts a minute from one address: the tenth, for another
	// account, passes; the eleventh is refused whatever the account.
	try("ops@example.com", password).mustStatus(http.StatusSeeOther)
	b.http.Jar, _ = newJar()
	csrf = b.csrf("/admin/login")
	p := try("ops@example.com", password).mustStatus(http.StatusTooManyRequests)
	if !strings.Contains(p.text("login-error"), "from your network address") {
		t.Fatalf("refusal %q", p.text("login-error"))
	}
}

func TestSafeRedirectAfterSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	for _, next := range []string{"https://evil.example/admin", "//evil.example/admin", "/elsewhere", `/\evil.example`, "/admin/logout"} {
		b := e.browser()
		p := b.post("/admin/login", url.Values{"csrf": {b.csrf("/admin/login")}, "email": {"ops@example.com"}, "password": {password}, "next": {next}})
		if got := p.mustStatus(http.StatusSeeOther).header.Get("Location"); got != "/admin" {
			t.Errorf("next %q: redirected to %q, want /admin", next, got)
		}
	}
}

// assertLabelled fails unless every visible input, select and textarea has
// a label.
func assertLabelled(t *testing.T, p page) {
	t.Helper()
	labels := map[string]bool{}
	for _, l := range find(p.root, func(n *html.Node) bool { return n.Data == "label" }) {
		labels[attr(l, "for")] = true
	}
	for _, in := range find(p.root, func(n *html.Node) bool {
		return (n.Data == "input" && attr(n, "type") != "hidden") || n.Data == "select" || n.Data == "textarea"
	}) {
		if id := attr(in, "id"); id == "" || !labels[id] {
			t.Errorf("%s %q (id %q) has no label", in.Data, attr(in, "name"), id)
		}
	}
}

func cookieHeader(t *testing.T, h http.Header, name string) string {
	t.Helper()
	for _, c := range h.Values("Set-Cookie") {
		if strings.HasPrefix(c, name+"=") {
			return c
		}
	}
	t.Fatalf("no Set-Cookie %s in %v", name, h.Values("Set-Cookie"))
	return ""
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
