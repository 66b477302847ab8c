package blackbox

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/mailtest"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// browser is a cookie-keeping client of the console's forms: no script,
// as the pages have none.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: base, client: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

// page is an answer: its status, final address and body.
type page struct {
	status int
	url    string
	body   string
}

func (b *browser) get(path string) page {
	b.t.Helper()
	resp, err := b.client.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.read(resp)
}

// post submits a form of the page at path, with its csrf field filled from
// the page last read (form), and fields.
func (b *browser) post(path string, form page, fields url.Values) page {
	b.t.Helper()
	if m := csrfField.FindStringSubmatch(form.body); m != nil && fields.Get("csrf") == "" {
		fields.Set("csrf", m[1])
	}
	resp, err := b.client.PostForm(b.base+path, fields)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.read(resp)
}

func (b *browser) read(resp *http.Response) page {
	b.t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return page{status: resp.StatusCode, url: resp.Request.URL.String(), body: string(body)}
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	testKey   = regexp.MustCompile(`tg_test_[A-Za-z0-9_]+`)
	liveKey   = regexp.MustCompile(`tg_live_[A-Za-z0-9_]+`)
	mailLink  = regexp.MustCompile(`https?://\S+/console/confirm\?token=\S+`)
	tokenBox  = regexp.MustCompile(`name="token" value="([^"]+)"`)
)

// TestConsoleSignUpJourney is a new user's way in, through the console's
// forms against the real binary and a real SMTP server (mailpit): sign up
// (a test key at once, signed in), the confirmation mail, its link (a GET
// that changes nothing, then the click), the live key, a policy and a
// refused check with that key, sign out and in again; and the guards: a
// second account of one email, a wrong password, the form token, the
// development mailbox closed outside TOLLGATE_DEV, sign-ups per network.
func TestConsoleSignUpJourney(t *testing.T) {
	t.Parallel()
	smtp := mailtest.Start(t)
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_SMTP_URL="+smtp.SMTPURL(), "TOLLGATE_MAIL_FROM=Tollgate <no-reply@tollgate.test>")
	b := newBrowser(t, in.base)

	form := b.get("/console/signup")
	if form.status != 200 || !strings.Contains(form.body, `data-testid="signup-form"`) {
		t.Fatalf("sign-up page: %d %s", form.status, form.body)
	}
	home := b.post("/console/signup", form, url.Values{"email": {"Dev@Example.com "}, "password": {"correct horse battery"}, "name": {"Acme"}})
	test := testKey.FindString(home.body)
	if home.status != 200 || test == "" || !strings.Contains(home.body, `data-testid="unconfirmed"`) || !strings.Contains(home.body, "dev@example.com") {
		t.Fatalf("after sign-up: %d %s", home.status, home.body)
	}
	if c := do(t, "GET", in.base+"/v1/usage", test, nil); c.status != 200 {
		t.Fatalf("the test key: %d %s", c.status, c.body)
	}

	// The confirmation mail, and its link.
	var link string
	eventually.True(t, 5*time.Second, "the confirmation mail", func() bool {
		for _, m := range smtp.Messages(t) {
			if len(m.To) == 1 && m.To[0] == "dev@example.com" && m.Subject == "Confirm your email for Tollgate" {
				link = mailLink.FindString(smtp.Message(t, m.ID).Text)
			}
		}
		return link != ""
	})
	u, err := url.Parse(link)
	if err != nil || u.Host != strings.TrimPrefix(in.base, "http://") {
		t.Fatalf("the mailed link %q does not lead to this Tollgate (%s)", link, in.base)
	}
	confirm := b.get(u.RequestURI())
	token := tokenBox.FindStringSubmatch(confirm.body)
	if confirm.status != 200 || token == nil || liveKey.MatchString(confirm.body) {
		t.Fatalf("the link's page: %d %s", confirm.status, confirm.body)
	}
	done := b.post("/console/confirm", confirm, url.Values{"token": {token[1]}})
	live := liveKey.FindString(done.body)
	if done.status != 200 || live == "" || strings.Contains(done.body, `data-testid="unconfirmed"`) {
		t.Fatalf("confirmed: %d %s", done.status, done.body)
	}
	if again := b.post("/console/confirm", confirm, url.Values{"token": {token[1]}}); again.status != 404 || liveKey.MatchString(again.body) {
		t.Fatalf("the link a second time: %d %s", again.status, again.body)
	}

	// The live key protects a route.
	u2 := apiUser{t: t, in: in, key: live}
	u2.putPolicy("sign-in-ip", map[string]any{"limit": 2, "window": "1m"})
	for i, want := range []bool{true, true, false} {
		var a checkAnswer
		c := u2.check("", map[string]any{"policy": "sign-in-ip", "subject": "203.0.113.7"})
		c.json(t, &a)
		if c.status != 200 || a.Allowed != want {
			t.Fatalf("check %d with the live key: %d %s", i+1, c.status, c.body)
		}
	}

	// Sign out, and in again.
	out := b.post("/console/logout", done, url.Values{})
	if !strings.Contains(out.url, "/console/login") || !strings.Contains(out.body, "You are signed out.") {
		t.Fatalf("sign-out: %d %s %s", out.status, out.url, out.body)
	}
	if p := b.get("/console"); !strings.Contains(p.url, "/console/login") {
		t.Fatalf("the console signed out: %s", p.url)
	}
	login := b.get("/console/login")
	if wrong := b.post("/console/login", login, url.Values{"email": {"dev@example.com"}, "password": {"wrong password!!"}}); wrong.status != 401 {
		t.Fatalf("a wrong password: %d", wrong.status)
	}
	login = b.get("/console/login")
	back := b.post("/console/login", login, url.Values{"email": {"dev@example.com"}, "password": {"correct horse battery"}})
	if back.status != 200 || !strings.Contains(back.body, `data-testid="keys"`) || strings.Count(back.body, `data-label="Kind"`) != 2 || liveKey.MatchString(back.body) || testKey.MatchString(back.body) {
		t.Fatalf("signed in again (two keys listed, neither shown): %d %s", back.status, back.body)
	}

	// Guards.
	other := newBrowser(t, in.base)
	form = other.get("/console/signup")
	if dup := other.post("/console/signup", form, url.Values{"email": {"dev@example.com"}, "password": {"another long one"}, "name": {"Other"}}); dup.status != 409 {
		t.Fatalf("a second account of one email: %d", dup.status)
	}
	if forged := other.post("/console/signup", page{}, url.Values{"csrf": {"forged"}, "email": {"x@example.com"}, "password": {"another long one"}, "name": {"X"}}); forged.status != 403 {
		t.Fatalf("a sign-up without the form's token: %d", forged.status)
	}
	if mb := other.get("/console/dev/mailbox"); mb.status != 404 {
		t.Fatalf("the development mailbox outside TOLLGATE_DEV: %d", mb.status)
	}
	// Five sign-ups an hour from one network, the taken email's among
	// them (probing which emails have accounts costs too): three more
	// accounts, then the sixth sign-up waits.
	for i := range 4 {
		form = other.get("/console/signup")
		p := other.post("/console/signup", form, url.Values{"email": {"n" + string(rune('a'+i)) + "@example.com"}, "password": {"another long one"}, "name": {"N"}})
		want := 200
		if i == 3 {
			want = 429
		}
		if p.status != want {
			t.Fatalf("sign-up %d from one network: %d, want %d", i+2, p.status, want)
		}
		other = newBrowser(t, in.base)
	}
}

// TestConsoleWithoutSMTP: with no SMTP server, a development Tollgate
// (TOLLGATE_DEV, as `make run`) puts the confirmation mail in its
// development mailbox page, where the link works; a production one keeps
// sign-ups and password resets closed (503) rather than write the links
// that open accounts to its log.
func TestConsoleWithoutSMTP(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	dev := start(t, dsn, "TOLLGATE_DEV=1")
	b := newBrowser(t, dev.base)
	form := b.get("/console/signup")
	if home := b.post("/console/signup", form, url.Values{"email": {"solo@example.com"}, "password": {"correct horse battery"}, "name": {"Solo"}}); home.status != 200 {
		t.Fatalf("sign-up in development: %d %s", home.status, home.body)
	}
	box := b.get("/console/dev/mailbox")
	link := mailLink.FindString(box.body)
	if box.status != 200 || link == "" || !strings.Contains(box.body, "solo@example.com") {
		t.Fatalf("the development mailbox: %d %s", box.status, box.body)
	}
	u, _ := url.Parse(strings.ReplaceAll(link, "&amp;", "&"))
	confirm := b.get(u.RequestURI())
	token := tokenBox.FindStringSubmatch(confirm.body)
	if token == nil {
		t.Fatalf("the mailbox's link: %d %s", confirm.status, confirm.body)
	}
	if done := b.post("/console/confirm", confirm, url.Values{"token": {token[1]}}); !liveKey.MatchString(done.body) {
		t.Fatalf("confirmed from the mailbox: %d %s", done.status, done.body)
	}

	prod := start(t, pgtest.New(t))
	b = newBrowser(t, prod.base)
	form = b.get("/console/signup")
	if p := b.post("/console/signup", form, url.Values{"email": {"solo@example.com"}, "password": {"correct horse battery"}, "name": {"Solo"}}); p.status != 503 || testKey.MatchString(p.body) {
		t.Fatalf("sign-up without SMTP in production: %d %s", p.status, p.body)
	}
	form = b.get("/console/reset")
	if p := b.post("/console/reset", form, url.Values{"email": {"solo@example.com"}}); p.status != 503 {
		t.Fatalf("a password reset without SMTP in production: %d %s", p.status, p.body)
	}
}
