package blackbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

var (
	hookSecret = regexp.MustCompile(`data-testid="webhook-secret">(whsec_[A-Za-z0-9+/=]+)<`)
	hookLink   = regexp.MustCompile(`href="/console/webhooks/([A-Za-z0-9_-]+)"`)
)

// signedPost is one post a receiver saw: its Standard Webhooks headers
// and body.
type signedPost struct{ id, ts, sig, body string }

// postLog is a webhook receiver that keeps every post.
type postLog struct {
	mu  sync.Mutex
	got []signedPost
}

func (l *postLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	l.got = append(l.got, signedPost{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), string(body)})
	l.mu.Unlock()
}

func (l *postLog) posts() []signedPost {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]signedPost(nil), l.got...)
}

// signedBy reports whether p carries a v1 signature under the whsec_
// secret, computed here as the Standard Webhooks specification says.
func (p signedPost) signedBy(t *testing.T, secret string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("secret %q: %v", secret, err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(p.id + "." + p.ts + "." + p.body))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, s := range strings.Fields(p.sig) {
		if s == want {
			return true
		}
	}
	return false
}

// createHook adds an endpoint from the webhooks page and returns its id
// and its secret, shown once.
func createHook(t *testing.T, b *browser, u string, events ...string) (string, string) {
	t.Helper()
	list := b.get("/console/webhooks")
	p := b.post("/console/webhooks", list, url.Values{"url": {u}, "events": events})
	secret, id := hookSecret.FindStringSubmatch(p.body), hookLink.FindStringSubmatch(p.body)
	if p.status != 200 || secret == nil || id == nil {
		t.Fatalf("create endpoint %s: %d %s", u, p.status, p.body)
	}
	return id[1], secret[1]
}

// TestConsoleWebhooks manages webhook endpoints from the console against
// the real binary and a real receiver: an endpoint made with its secret
// shown once, a test event that arrives signed under it and shows in the
// deliveries log, redelivered; a rotation (a page that asks, then the
// post) whose new secret signs the next test event; disabling and
// enabling; a refused URL; the test sends' limit shared with the API;
// deleting (a page that asks, then the post): the API no longer has it,
// the audit log names the member.
func TestConsoleWebhooks(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	in := start(t, dsn, "TOLLGATE_DEV=1", allowPrivate)
	rcv := &postLog{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)

	a := newBrowser(t, in.base)
	consoleSignUp(t, a, "a@example.com", "Acme")
	id, secret := createHook(t, a, srv.URL+"/a", "key.revoked")
	if again := a.get("/console/webhooks"); again.status != 200 || strings.Contains(again.body, secret) || !strings.Contains(again.body, srv.URL+"/a") {
		t.Fatalf("the list shows the secret again, or not the endpoint: %d %s", again.status, again.body)
	}
	if p := a.post("/console/webhooks", a.get("/console/webhooks"), url.Values{"url": {"ftp://example.com"}, "events": {"key.revoked"}}); p.status != 400 || !strings.Contains(p.body, `data-testid="webhook-error"`) {
		t.Fatalf("a refused URL: %d %s", p.status, p.body)
	}

	// A test event: it arrives signed, and the log lists it delivered.
	hook := a.get("/console/webhooks/" + id)
	if p := a.post("/console/webhooks/"+id+"/test", hook, url.Values{}); p.status != 200 {
		t.Fatalf("test send: %d %s", p.status, p.body)
	}
	eventually.True(t, 20*time.Second, "the test event arrives", func() bool { return len(rcv.posts()) == 1 })
	if got := rcv.posts()[0]; !got.signedBy(t, secret) || !strings.Contains(got.body, "test.ping") {
		t.Fatalf("the test event is not signed by the secret shown, or not a test: %+v", got)
	}
	eventually.True(t, 20*time.Second, "the log shows it delivered", func() bool {
		p := a.get("/console/webhooks/" + id)
		return strings.Contains(p.body, `data-label="Event">test.ping<`) && strings.Contains(p.body, `data-label="Status">delivered<`) &&
			strings.Contains(p.body, `data-label="Response">200<`)
	})

	// Redeliver it: it arrives again.
	hook = a.get("/console/webhooks/" + id)
	resend := regexp.MustCompile(`action="(/console/webhooks/` + id + `/deliveries/[^"]+/resend)"`).FindStringSubmatch(hook.body)
	if resend == nil {
		t.Fatalf("no redeliver button: %s", hook.body)
	}
	if p := a.post(resend[1], hook, url.Values{}); p.status != 200 {
		t.Fatalf("redeliver: %d %s", p.status, p.body)
	}
	eventually.True(t, 20*time.Second, "the redelivery arrives", func() bool { return len(rcv.posts()) == 2 })

	// Rotate: a page that asks, then the post with the new secret once.
	ask := a.get("/console/webhooks/" + id + "/rotate")
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="rotate"`) {
		t.Fatalf("rotate page: %d %s", ask.status, ask.body)
	}
	rotated := a.post("/console/webhooks/"+id+"/rotate", ask, url.Values{})
	m := hookSecret.FindStringSubmatch(rotated.body)
	if rotated.status != 200 || m == nil || m[1] == secret {
		t.Fatalf("rotate: %d %s", rotated.status, rotated.body)
	}
	if p := a.post("/console/webhooks/"+id+"/test", rotated, url.Values{}); p.status != 200 {
		t.Fatalf("test send after rotation: %d %s", p.status, p.body)
	}
	eventually.True(t, 20*time.Second, "the second test event arrives", func() bool { return len(rcv.posts()) == 3 })
	if got := rcv.posts()[2]; !got.signedBy(t, m[1]) {
		t.Fatalf("the test event after rotation is not signed by the new secret: %+v", got)
	}

	// Disable and enable it again: its state says so.
	hook = a.get("/console/webhooks/" + id)
	if p := a.post("/console/webhooks/"+id+"/disable", hook, url.Values{}); p.status != 200 || !strings.Contains(p.body, `data-testid="webhook-state">disabled: disabled by the tenant<`) {
		t.Fatalf("disable: %d %s", p.status, p.body)
	}
	if p := a.post("/console/webhooks/"+id+"/enable", hook, url.Values{}); p.status != 200 || !strings.Contains(p.body, `data-testid="webhook-state">enabled<`) {
		t.Fatalf("enable: %d %s", p.status, p.body)
	}

	// The test sends' limit (10 a minute) is the API's: the console's
	// sends count in it, and past it both refuse.
	consoleConfirm(t, a)
	_, live := createKey(a, "api", "live", "none")
	sent := 2
	last := a.get("/console/webhooks/" + id)
	for ; sent < 10; sent++ {
		if last = a.post("/console/webhooks/"+id+"/test", last, url.Values{}); last.status != 200 {
			t.Fatalf("test send %d: %d %s", sent+1, last.status, last.body)
		}
	}
	if p := a.post("/console/webhooks/"+id+"/test", last, url.Values{}); p.status != 429 || !strings.Contains(p.body, "10 test events a minute") {
		t.Fatalf("test send past the limit: %d %s", p.status, p.body)
	}
	if c := do(t, "POST", in.base+"/v1/webhooks/"+id+"/test", live, nil); c.status != 429 {
		t.Fatalf("the API's test send after the console's ten: %d %s", c.status, c.body)
	}

	// Delete it: the endpoint's page links to a page that asks, whose
	// button deletes; the list and the API no longer have it, and the
	// audit log names the member.
	hook = a.get("/console/webhooks/" + id)
	if !strings.Contains(hook.body, `href="/console/webhooks/`+id+`/delete"`) {
		t.Fatalf("no delete link on the endpoint's page: %s", hook.body)
	}
	ask = a.get("/console/webhooks/" + id + "/delete")
	if ask.status != 200 || !strings.Contains(ask.body, `data-testid="delete-webhook"`) || !strings.Contains(ask.body, srv.URL+"/a") {
		t.Fatalf("delete page: %d %s", ask.status, ask.body)
	}
	if c := do(t, "GET", in.base+"/v1/webhooks/"+id, live, nil); c.status != 200 {
		t.Fatalf("the API's endpoint after the delete page (which must change nothing): %d %s", c.status, c.body)
	}
	gone := a.post("/console/webhooks/"+id+"/delete", ask, url.Values{})
	if gone.status != 200 || !strings.HasSuffix(gone.url, "/console/webhooks?done=deleted") || strings.Contains(gone.body, srv.URL+"/a") ||
		!strings.Contains(gone.body, `data-testid="flash"`) {
		t.Fatalf("after deleting: %d %s %s", gone.status, gone.url, gone.body)
	}
	if c := do(t, "GET", in.base+"/v1/webhooks/"+id, live, nil); c.status != 404 {
		t.Fatalf("the API's endpoint after the console's delete: %d %s", c.status, c.body)
	}
	if p := a.get("/console/webhooks/" + id); p.status != 404 {
		t.Fatalf("the deleted endpoint's page: %d %s", p.status, p.body)
	}
	if p := a.post("/console/webhooks/"+id+"/delete", ask, url.Values{}); p.status != 404 {
		t.Fatalf("deleting it again: %d %s", p.status, p.body)
	}
	if n := queryInt(t, dsn, `SELECT count(*) FROM audit WHERE kind = 'webhook_endpoint_deleted' AND actor = 'a@example.com' AND detail->>'endpoint_id' = $1`, id); n != 1 {
		t.Fatalf("%d audit entries of the deletion, want 1", n)
	}
}

// TestConsoleWebhooksIsolation tries tenant B's endpoint id in every
// address of A's webhooks pages: each a 404, nothing of B's shown or sent.
// (Its own instance: the pages' requests stay under the per-address
// limit of keyless requests.)
func TestConsoleWebhooksIsolation(t *testing.T) {
	t.Parallel()
	in := start(t, pgtest.New(t), "TOLLGATE_DEV=1", allowPrivate)
	rcv := &postLog{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	a := newBrowser(t, in.base)
	consoleSignUp(t, a, "a@example.com", "Acme")
	createHook(t, a, srv.URL+"/a", "key.revoked")
	b := newBrowser(t, in.base)
	consoleSignUp(t, b, "b@example.com", "Bolt")
	bID, _ := createHook(t, b, srv.URL+"/b", "plan.changed")
	for _, path := range []string{"/console/webhooks/" + bID, "/console/webhooks/" + bID + "/rotate", "/console/webhooks/" + bID + "/delete"} {
		if p := a.get(path); p.status != 404 || strings.Contains(p.body, srv.URL+"/b") {
			t.Fatalf("GET %s as A: %d %s", path, p.status, p.body)
		}
	}
	form := a.get("/console/webhooks")
	for _, path := range []string{"/console/webhooks/" + bID + "/test", "/console/webhooks/" + bID + "/rotate",
		"/console/webhooks/" + bID + "/deliveries/" + bID + "/resend", "/console/webhooks/" + bID + "/disable",
		"/console/webhooks/" + bID + "/delete", "/console/webhooks/not-an-id/delete"} {
		if p := a.post(path, form, url.Values{}); p.status != 404 {
			t.Fatalf("POST %s as A: %d %s", path, p.status, p.body)
		}
	}
	if p := b.get("/console/webhooks/" + bID); p.status != 200 || strings.Contains(p.body, "delivery-row") || !strings.Contains(p.body, `data-testid="webhook-state">enabled<`) {
		t.Fatalf("B's endpoint after A's tries: %d %s", p.status, p.body)
	}
	if got := rcv.posts(); len(got) != 0 {
		t.Fatalf("posts after A's tries: %+v", got)
	}
}
