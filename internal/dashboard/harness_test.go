package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// cheap makes test password hashes fast; the format is the real one.
var cheap = admin.Argon2Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

const password = "correct horse battery staple"

// env is the service as serve builds it (app.New: the dashboard mounted on
// httpapi's real Echo, the gate, the recorders) over a database of the
// test's own, served on its own real listener, with the memory counter
// store.
type env struct {
	t       *testing.T
	srv     *server
	echo    *echo.Echo
	pool    *pgxpool.Pool
	tenants *pgstore.Tenants
	admins  *pgstore.Admins
	usage   *pgstore.Usage
	traffic *pgstore.Traffic
	audit   *audit.Log
	// billing is the service's billing (without Stripe's API).
	billing *billing.Service

	mu      sync.Mutex
	changed []string
}

// server is where env's app serves, and a client of its own.
type server struct {
	URL       string
	transport *http.Transport
}

// Client is an HTTP client with a transport of this server's own.
func (s *server) Client() *http.Client { return &http.Client{Transport: s.transport} }

type option func(*dashboard.Config)

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	return newEnvWith(t, nil, opts...)
}

// newEnvBehindProxy is newEnv behind a trusted proxy on the loopback: a
// browser's from address reaches the dashboard as its client IP.
func newEnvBehindProxy(t *testing.T, opts ...option) *env {
	t.Helper()
	_, loopback, _ := net.ParseCIDR("127.0.0.1/32")
	return newEnvWith(t, func(c *httpapi.Config) { c.ClientIP.TrustedProxies = []*net.IPNet{loopback} }, opts...)
}

// newEnvWith is newEnv with api changing the HTTP layer's configuration.
// The dashboard's configuration starts as serve's, without the parts a
// test opts into (webhook log, endpoints, leases, counters), with cheap
// password hashes and the changes it reports recorded.
func newEnvWith(t *testing.T, api func(*httpapi.Config), opts ...option) *env {
	t.Helper()
	e := &env{t: t}
	dash := func(c *dashboard.Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Webhooks, c.Endpoints, c.Leases, c.Counters = nil, nil, nil, nil
		c.Argon2 = cheap
		invalidate := c.Changed
		c.Changed = func(kind, id string) {
			e.mu.Lock()
			e.changed = append(e.changed, kind+":"+id)
			e.mu.Unlock()
			invalidate(kind, id)
		}
		for _, o := range opts {
			o(c)
		}
	}
	cfg := app.Config{Addr: "127.0.0.1:0", CounterStore: "memory", Pepper: []byte("test pepper"),
		PublicURL: "https://tollgate.example", ShutdownTimeout: 10 * time.Second}
	a, err := app.New(t.Context(), cfg, app.Deps{DSN: pgtest.New(t), Dashboard: dash, API: api})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Run(ctx) }()
	e.srv = &server{URL: "http://" + a.Addr(), transport: &http.Transport{}}
	t.Cleanup(func() {
		e.srv.transport.CloseIdleConnections()
		stop()
		if err := <-served; err != nil {
			t.Errorf("app: %v", err)
		}
	})
	e.echo, e.pool, e.billing = a.Echo, a.Pool, a.Parts.Billing
	e.tenants, e.admins = pgstore.NewTenants(a.Pool), pgstore.NewAdmins(a.Pool)
	e.usage, e.traffic, e.audit = pgstore.NewUsage(a.Pool), a.Parts.Traffic, audit.NewLog(a.Parts.AuditStore)
	return e
}

// admin creates an admin with password.
func (e *env) admin(email string) admin.Admin {
	e.t.Helper()
	hash, err := admin.HashPassword(password, cheap)
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := e.admins.CreateAdmin(context.Background(), email, hash)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *env) changes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.changed...)
}

// browser is an HTTP client with cookies that does not follow redirects.
type browser struct {
	t    *testing.T
	e    *env
	http *http.Client
	// from, when set, is sent as X-Forwarded-For: the client's address
	// behind newEnvBehindProxy's proxy.
	from string
}

func newJar() (http.CookieJar, error) { return cookiejar.New(nil) }

func (e *env) browser() *browser {
	jar, _ := newJar()
	// The server's own transport, not http.DefaultTransport: every other
	// parallel test's httptest.Server.Close closes the default transport's
	// idle connections, and a POST about to reuse one then fails with
	// "CloseIdleConnections called" (it is not retried, not being idempotent).
	return &browser{t: e.t, e: e, http: &http.Client{Transport: e.srv.Client().Transport, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// page is an answer with its parsed HTML.
type page struct {
	t      *testing.T
	status int
	header http.Header
	root   *html.Node
	body   string
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	if b.from != "" {
		req.Header.Set("X-Forwarded-For", b.from)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	root, err := html.Parse(strings.NewReader(string(body)))
	if err != nil {
		b.t.Fatal(err)
	}
	return page{t: b.t, status: resp.StatusCode, header: resp.Header, root: root, body: string(body)}
}

func (b *browser) get(path string) page {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.e.srv.URL+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// csrf reads the form token of the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	p := b.get(path)
	if p.status != http.StatusOK {
		b.t.Fatalf("GET %s: %d", path, p.status)
	}
	return p.inputValue("csrf")
}

// signIn signs in as email.
func (b *browser) signIn(email string) {
	b.t.Helper()
	p := b.post("/admin/login", url.Values{"csrf": {b.csrf("/admin/login")}, "email": {email}, "password": {password}})
	if p.status != http.StatusSeeOther {
		b.t.Fatalf("sign in as %s: %d\n%s", email, p.status, p.text("login-error"))
	}
}

// cookie returns the jar's cookie name for the dashboard.
func (b *browser) cookie(name string) *http.Cookie {
	u, _ := url.Parse(b.e.srv.URL + "/admin/login")
	for _, c := range b.http.Jar.Cookies(u) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// find returns the elements below n that match.
func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

var inline = map[string]bool{"a": true, "span": true, "code": true, "strong": true, "em": true, "abbr": true}

// textOf is n's text with runs of white space made one space.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		// Cells and blocks read apart even where the markup has no space
		// between them; inline elements (a, span, code) do not split words.
		block := n.Type == html.ElementNode && !inline[n.Data]
		if block {
			b.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
		if block {
			b.WriteByte(' ')
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func byTestID(id string) func(*html.Node) bool {
	return func(n *html.Node) bool { return attr(n, "data-testid") == id }
}

// all returns the elements with data-testid id.
func (p page) all(id string) []*html.Node { return find(p.root, byTestID(id)) }

// one returns the first element with data-testid id, failing without one.
func (p page) one(id string) *html.Node {
	p.t.Helper()
	ns := p.all(id)
	if len(ns) == 0 {
		p.t.Fatalf("no element with data-testid %q (status %d)", id, p.status)
	}
	return ns[0]
}

func (p page) text(id string) string {
	p.t.Helper()
	ns := p.all(id)
	if len(ns) == 0 {
		return ""
	}
	return textOf(ns[0])
}

// within returns the elements with data-testid id inside n.
func within(n *html.Node, id string) []*html.Node { return find(n, byTestID(id)) }

// inputValue is the value of the first input named name.
func (p page) inputValue(name string) string {
	p.t.Helper()
	ns := find(p.root, func(n *html.Node) bool { return n.Data == "input" && attr(n, "name") == name })
	if len(ns) == 0 {
		p.t.Fatalf("no input %q", name)
	}
	return attr(ns[0], "value")
}

// mustStatus fails unless the page has status want.
func (p page) mustStatus(want int) page {
	p.t.Helper()
	if p.status != want {
		p.t.Fatalf("status %d, want %d; body:\n%.2000s", p.status, want, p.body)
	}
	return p
}
