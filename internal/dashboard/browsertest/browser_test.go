package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
	"github.com/tollgate/tollgate/internal/testkit/solo"
)

var binary string

// TestMain runs the suite alone on the machine: one Chromium beside the
// black-box suite would squeeze the timing of both on 2 cores.
func TestMain(m *testing.M) {
	release, err := solo.Exclusive()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := bintest.Run(m, &binary)
	release()
	os.Exit(code)
}

const (
	pepper   = "browser-test-pepper-0123456789abcdef0123456789"
	password = "correct horse battery staple"
	// apiIP is the client address the API calls claim, through the trusted
	// proxy 127.0.0.1, so that the per-IP layer counts them apart from the
	// browser's sign-ins.
	apiIP = "203.0.113.9"
)

func environ(dsn string, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dsn, "TOLLGATE_PEPPER=" + pepper, "TOLLGATE_LOG_FORMAT=text",
	}, extra...)
}

// tollgate runs a command of the binary with stdin and returns its stdout.
func tollgate(t *testing.T, dsn, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = environ(dsn)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tollgate %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

type newTenant struct {
	TenantID string `json:"tenant_id"`
	LiveKey  string `json:"live_key"`
}

func createTenant(t *testing.T, dsn, name, plan string) newTenant {
	t.Helper()
	var nt newTenant
	out := tollgate(t, dsn, "", "tenants", "create", "--name", name, "--plan", plan)
	if err := json.Unmarshal([]byte(out), &nt); err != nil || nt.TenantID == "" {
		t.Fatalf("tenants create printed %q: %v", out, err)
	}
	return nt
}

// serve starts `tollgate serve` and waits until it is ready.
func serve(t *testing.T, dsn string) string {
	t.Helper()
	return bintest.Start(t, binary, environ(dsn, "TOLLGATE_TRUSTED_PROXIES=127.0.0.1")).URL
}

// api calls the tenant API as a tenant's server at ip would.
func api(t *testing.T, method, u, key, ip, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func check(t *testing.T, base, key, ip, policy, subject string) *http.Response {
	t.Helper()
	return api(t, http.MethodPost, base+"/v1/check", key, ip, fmt.Sprintf(`{"items":[{"policy":%q,"subject":%q}]}`, policy, subject))
}

// allowed reports whether a check of one item was allowed (200 with
// allowed true; a policy's refusal is 200 with allowed false).
func allowed(t *testing.T, base, key, ip, policy, subject string) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", strings.NewReader(fmt.Sprintf(`{"items":[{"policy":%q,"subject":%q}]}`, policy, subject)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Allowed bool `json:"allowed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("check %s of %s: %d, %v", policy, subject, resp.StatusCode, err)
	}
	return v.Allowed
}

// chromium finds the browser: TOLLGATE_CHROMIUM, Debian's /usr/bin/chromium,
// or chromium on the PATH. It fails, never skips, without one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("TOLLGATE_CHROMIUM"), "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: install it with `scripts/deps.sh chromium` (Debian's chromium package) or set TOLLGATE_CHROMIUM")
	return ""
}

// screenshotDir is where the page pictures go: TOLLGATE_SCREENSHOTS, or
// screenshots/ at the repository's root (git-ignored).
func screenshotDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TOLLGATE_SCREENSHOTS"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "screenshots")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// browser is one headless Chromium tab.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	// The launch flags the issue names, and no others of chromedp's
	// defaults.
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser, on a context without deadline:
	// the browser lives as long as that context.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	dir := screenshotDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, base: base, shot: dir}
}

// do runs steps with a deadline of their own.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

// text returns the text of the first element with data-testid id.
func (b *browser) text(id string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(tid(id), chromedp.NodeVisible))
	if err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("text of %s (at %s): %v", id, loc, err)
	}
	return strings.TrimSpace(s)
}

// count returns how many elements match a CSS selector now.
func (b *browser) count(css string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", css)))
	if err != nil {
		b.t.Fatalf("count %s: %v", css, err)
	}
	return n
}

// submit runs an action that leaves the page (a click on a submit button
// or a link), waits for the next page to load, then runs then.
func (b *browser) submit(what string, action chromedp.Action[chromedp.Void], then ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	loaded := chromedp.Events(ctx, page.LoadEventFired)
	err := chromedp.Do(ctx, action)
	if err == nil {
		for _, e := range loaded {
			err = e
			break
		}
	}
	if err == nil {
		err = chromedp.Do(ctx, then...)
	}
	if err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

// click clicks the element with data-testid id, which leaves the page, and
// waits for the next page to show waitFor.
func (b *browser) click(id, waitFor string) {
	b.t.Helper()
	b.submit("click "+id, chromedp.Click(tid(id), chromedp.NodeVisible), chromedp.WaitVisible(tid(waitFor)))
}

func (b *browser) open(path, waitFor string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(tid(waitFor)))
}

// screenshot saves a picture of the whole page as name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	// A full-page picture lays the page out as tall as it is, without the
	// vertical scroll bar, but keeps the width measured with it: without
	// the bar from the start, the picture is the whole width, as on a
	// phone, whose scroll bars take no room.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](`document.documentElement.style.scrollbarWidth = "none"`)); err != nil {
		b.t.Fatalf("hide the scroll bar: %v", err)
	}
	b.screenshotWith(name, chromedp.FullScreenshot(100))
}

// screenshotWith saves the picture that shot takes (a PNG) as name.png.
func (b *browser) screenshotWith(name string, shot chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// inView says where the element with data-testid id is against the
// window: "" when the whole of it shows without scrolling, else what is
// wrong, with the page's fragment and scroll position.
func (b *browser) inView(id string) string {
	b.t.Helper()
	js := fmt.Sprintf(`(() => {
		const e = document.querySelector('[data-testid="%s"]');
		if (!e) return "not on the page";
		const r = e.getBoundingClientRect();
		if (r.top >= 0 && r.bottom <= window.innerHeight) return "";
		return "at " + Math.round(r.top) + " to " + Math.round(r.bottom) + " px in a window " + window.innerHeight +
			" px tall, scrolled to " + Math.round(window.scrollY) + ", fragment '" + location.hash + "'";
	})()`, id)
	where, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("where %s is: %v", id, err)
	}
	return where
}

// signIn fills and sends the sign-in form.
func (b *browser) signIn(email, pw string) {
	b.t.Helper()
	b.do("fill the sign-in form",
		chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SetValue(chromedp.ID("email"), email),
		chromedp.SetValue(chromedp.ID("password"), pw),
	)
	b.submit("sign in as "+email, chromedp.Click(tid("sign-in"), chromedp.NodeVisible))
}

func tid(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

var liveKey = regexp.MustCompile(`^tg_live_[0-9A-Za-z]{12}_[0-9A-Za-z]{32}$`)

// seedHistory writes a day of per-minute usage (as the usage recorder
// would have) and this month's earlier days for a tenant, so that the
// charts have a past to draw: a daily wave of allowed checks with policy
// refusals, a burst of per-IP refusals, and, service-wide, a degraded
// period of twelve minutes five hours ago.
func seedHistory(t *testing.T, dsn, tenantID string, scale, perDay int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stmts := []struct {
		q    string
		args []any
	}{
		// The last 24 hours, up to two minutes ago: live checks.
		{`INSERT INTO usage_minutes (tenant_id, minute, live, checked, outcome, checks)
		 SELECT $1, m, true, true, o.outcome,
		        greatest(1, round(o.share * $2 * (1.2 + sin(extract(epoch FROM m) / 86400.0 * 2 * pi())) * (0.8 + random() * 0.4)))::bigint
		 FROM generate_series(date_trunc('minute', now()) - interval '24 hours', date_trunc('minute', now()) - interval '2 minutes', interval '1 minute') AS m
		 CROSS JOIN (VALUES ('allowed', 1.0), ('policy', 0.12)) AS o (outcome, share)
		 ON CONFLICT DO NOTHING`, []any{tenantID, scale}},
		// A burst of per-IP refusals three hours ago.
		{`INSERT INTO usage_minutes (tenant_id, minute, live, checked, outcome, checks)
		 SELECT $1, m, true, true, 'ip', $2 * 2
		 FROM generate_series(date_trunc('minute', now()) - interval '3 hours', date_trunc('minute', now()) - interval '170 minutes', interval '1 minute') AS m
		 ON CONFLICT DO NOTHING`, []any{tenantID, scale}},
		// The month's earlier days, one row a day.
		{`INSERT INTO usage_minutes (tenant_id, minute, live, checked, outcome, checks)
		 SELECT $1, d + interval '12 hours', true, true, 'allowed', $2
		 FROM generate_series(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', now() - interval '36 hours', interval '1 day') AS d
		 ON CONFLICT DO NOTHING`, []any{tenantID, perDay}},
		{`INSERT INTO degraded_minutes (minute, answers)
		 SELECT m, 40 FROM generate_series(date_trunc('minute', now()) - interval '5 hours', date_trunc('minute', now()) - interval '289 minutes', interval '1 minute') AS m
		 ON CONFLICT DO NOTHING`, []any{}},
	}
	for _, st := range stmts {
		if _, err := conn.Exec(ctx, st.q, st.args...); err != nil {
			t.Fatalf("seed history: %v", err)
		}
	}
}

// seedStripeEvents records Stripe events as billing would have: applied,
// replayed, and one for a customer no tenant has.
func seedStripeEvents(t *testing.T, dsn, tenantID string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i, ev := range []struct{ id, typ, outcome, note, customer string }{
		{"evt_1QdemoCheckout", "checkout.session.completed", "applied", "customer linked to the tenant", "cus_QdemoAcme"},
		{"evt_1QdemoSubscription", "customer.subscription.updated", "applied", "plan starter to pro, status active", "cus_QdemoAcme"},
		{"evt_1QdemoStranger", "customer.subscription.created", "unknown_customer", "no tenant has customer cus_Qstranger; kept until one does", "cus_Qstranger"},
	} {
		var tid any
		if ev.outcome == "applied" {
			tid = tenantID
		}
		payload := fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2023-10-16","type":%q,"data":{"object":{"customer":%q,"status":"active"}}}`, ev.id, ev.typ, ev.customer)
		_, err := conn.Exec(ctx, `
			INSERT INTO stripe_events (id, type, created, livemode, customer_id, tenant_id, outcome, note, event, payload, deliveries, received_at)
			VALUES ($1, $2, now() - $7 * interval '1 hour', false, $3, $4, $5, $6, '{}', $8, $9, now() - $7 * interval '1 hour')`,
			ev.id, ev.typ, ev.customer, tid, ev.outcome, ev.note, 3-i, payload, 1+i%2)
		if err != nil {
			t.Fatalf("seed stripe events: %v", err)
		}
	}
	if _, err := conn.Exec(ctx, `UPDATE tenants SET stripe_customer_id = 'cus_QdemoAcme', stripe_subscription_id = 'sub_QdemoAcme' WHERE id = $1`, tenantID); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardInChromium is the dashboard's browser suite: one Chromium, one
// server, the flows an operator uses.
func TestDashboardInChromium(t *testing.T) {
	start := time.Now()
	dsn := pgtest.New(t)
	tollgate(t, dsn, password+"\n", "admins", "create", "--email", "ops@example.com")
	tollgate(t, dsn, password+"\n", "admins", "create", "--email", "cfo@example.com")
	acme := createTenant(t, dsn, "Acme Rockets", "starter")
	globex := createTenant(t, dsn, "Globex", "pro")
	seedHistory(t, dsn, acme.TenantID, 6, 2000)
	seedHistory(t, dsn, globex.TenantID, 35, 40000)
	seedStripeEvents(t, dsn, acme.TenantID)
	base := serve(t, dsn)

	// A little traffic, so that the charts have something to draw: a
	// sign-in policy of ten a minute, one address over it.
	for _, nt := range []newTenant{acme, globex} {
		if r := api(t, http.MethodPut, base+"/v1/policies/sign-in-ip", nt.LiveKey, apiIP, `{"limit":10,"window":"1m","alert_after":5}`); r.StatusCode/100 != 2 {
			t.Fatalf("put policy: %d", r.StatusCode)
		}
	}
	for i := range 24 {
		check(t, base, acme.LiveKey, apiIP, "sign-in-ip", "198.51.100.66")
		check(t, base, globex.LiveKey, apiIP, "sign-in-ip", fmt.Sprintf("192.0.2.%d", i))
	}

	b := newBrowser(t, base)

	// Signed out, the dashboard sends the browser to sign in.
	b.open("/admin", "login-form")
	b.survey([]surveyPage{{"01-login", "/admin/login", "login-form"}})

	// Wrong passwords are refused; the ninth failure of one account within
	// 15 minutes is refused by the limiter before its password is tried,
	// and says when to try again.
	for i := 1; i <= 8; i++ {
		b.signIn("cfo@example.com", "not the password")
		if got := b.text("login-error"); got != "Wrong email or password." {
			t.Fatalf("wrong password %d: error %q", i, got)
		}
	}
	b.signIn("cfo@example.com", "not the password")
	if got := b.text("login-error"); !strings.Contains(got, "Too many failed sign-ins for this account") {
		t.Fatalf("ninth failure: error %q, want the account limit", got)
	}
	if got := b.text("retry-after"); !regexp.MustCompile(`^Try again in \d+ (minute|second)`).MatchString(got) {
		t.Fatalf("ninth failure: %q does not say when to try again", got)
	}
	b.screenshot("02-login-rate-limited")

	// The tenth sign-in from this address in the minute is still allowed.
	b.signIn("ops@example.com", password)
	b.do("overview after sign-in", chromedp.WaitVisible(tid("nav-overview")))
	if got := b.text("admin-email"); got != "ops@example.com" {
		t.Fatalf("signed in as %q", got)
	}

	// The overview draws what the API counted (flushed every second).
	eventually.True(t, 10*time.Second, "the overview's hour chart showing allowed and refused checks", func() bool {
		b.open("/admin", "chart-hour")
		return b.count(`[data-testid="chart-hour"] svg rect.s-allowed`) > 0 && b.count(`[data-testid="chart-hour"] svg rect.s-policy`) > 0
	})
	if n := b.count(`[data-testid="top-checks"] tbody tr`); n != 2 {
		t.Errorf("top tenants by checks: %d rows, want 2", n)
	}
	// The seeded degraded period, and on a loaded machine maybe real ones:
	// a counter call past its 50 ms deadline answers degraded too.
	if n := b.count(`[data-testid="degraded-period"]`); n < 1 {
		t.Errorf("degraded periods: %d, want the seeded one at least", n)
	}
	if n := b.count(`[data-testid="chart-day"] svg rect.band`); n < 1 {
		t.Errorf("day chart: %d degraded bands, want one at least", n)
	}

	// Tenants: the list, and a search.
	b.click("nav-tenants", "tenant-table")
	if n := b.count(`[data-testid="tenant-row"]`); n != 2 {
		t.Errorf("tenant list: %d rows, want 2", n)
	}
	b.do("type a search", chromedp.SetValue(chromedp.ID("q"), "acme"))
	b.submit("search tenants", chromedp.Submit(chromedp.ID("q")), chromedp.WaitVisible(tid("tenant-table")))
	if n := b.count(`[data-testid="tenant-row"]`); n != 1 {
		t.Fatalf("search acme: %d rows, want 1", n)
	}

	// A tenant created on the list's form shows its keys once, and they
	// work; a mistake is answered on the form.
	b.open("/admin/tenants", "new-tenant")
	b.do("open the new tenant form", chromedp.Click(`[data-testid="new-tenant"] summary`, chromedp.NodeVisible),
		chromedp.SetValue(chromedp.ID("new-tenant-name"), "   "))
	b.click("create-tenant", "new-tenant-error")
	if got := b.text("new-tenant-error"); got != "Not created: name must not be blank." {
		t.Errorf("new tenant error %q", got)
	}
	b.do("name the tenant and choose its plan", chromedp.SetValue(chromedp.ID("new-tenant-name"), "Initech"),
		chromedp.SetValue(chromedp.ID("new-tenant-plan"), "pro"))
	b.click("create-tenant", "tenant-created")
	if got := b.text("tenant-name"); got != "Initech" {
		t.Fatalf("after creating a tenant: the page of %q", got)
	}
	if got := b.text("plan"); got != "pro" {
		t.Errorf("the new tenant's plan is %q, want pro", got)
	}
	initech := b.text("new-live-key")
	if !liveKey.MatchString(initech) {
		t.Fatalf("the new tenant's live key %q", initech)
	}
	b.screenshotWith("04-tenant-created-window", chromedp.CaptureScreenshot())
	if r := api(t, http.MethodPut, base+"/v1/policies/sign-in-ip", initech, apiIP, `{"limit":10,"window":"1m"}`); r.StatusCode/100 != 2 {
		t.Fatalf("the new tenant's live key puts a policy: %d, want 2xx", r.StatusCode)
	}
	b.open("/admin/tenants?q=acme", "tenant-table")

	// A tenant's page; its per-IP limit changed through the form applies to
	// the API at once.
	b.click("tenant-link", "limits-form")
	if got := b.text("tenant-name"); got != "Acme Rockets" {
		t.Fatalf("tenant page of %q", got)
	}
	if b.count(`[data-testid="chart-tenant-minutes"] svg path`) == 0 {
		t.Error("the tenant's minute chart draws nothing")
	}
	if n := b.count(`[data-testid="api-reference"][href="/docs"]`); n != 1 {
		t.Errorf("the tenant page links to the API reference %d times, want once", n)
	}
	b.do("type rate_limit_per_minute", chromedp.SetValue(chromedp.ID("rate_limit_per_minute"), "5"))
	b.click("save-limits", "flash")
	// Saved, the page is at its top, where the confirmation is.
	if where := b.inView("flash"); where != "" {
		t.Errorf("after saving the limits the confirmation is out of view: %s", where)
	}
	if got := b.text("limits-last-change"); !strings.Contains(got, "ops@example.com") {
		t.Errorf("last change %q does not name the admin", got)
	}
	const limitIP = "203.0.113.77"
	for i := 1; i <= 5; i++ {
		if r := check(t, base, acme.LiveKey, limitIP, "sign-in-ip", fmt.Sprintf("user-%d", i)); r.StatusCode != http.StatusOK {
			t.Fatalf("check %d from %s after the change: %d, want 200", i, limitIP, r.StatusCode)
		}
	}
	r := check(t, base, acme.LiveKey, limitIP, "sign-in-ip", "user-6")
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("X-RateLimit-Layer") != "ip" || r.Header.Get("X-RateLimit-Limit") != "5" {
		t.Fatalf("sixth check from %s: %d layer %q limit %q, want 429 from the ip layer at 5",
			limitIP, r.StatusCode, r.Header.Get("X-RateLimit-Layer"), r.Header.Get("X-RateLimit-Limit"))
	}

	// A policy created on the page applies to the API at once; a mistake
	// is shown next to its form, in the API's words, with what was typed.
	b.open("/admin/tenants/"+acme.TenantID, "new-policy")
	b.do("open the new policy form", chromedp.Click(`[data-testid="new-policy"] summary`, chromedp.NodeVisible),
		chromedp.SetValue(chromedp.ID("new-policy-name"), "export"),
		chromedp.SetValue(chromedp.ID("new-policy-limit"), "2"),
		chromedp.SetValue(chromedp.ID("new-policy-window"), "1 minute"))
	b.click("create-policy", "policy-error")
	if got := b.text("policy-error"); !strings.HasPrefix(got, `Not saved: window must be a duration from "1s"`) {
		t.Errorf("inline error %q", got)
	}
	// The page comes back where the form is, thousands of pixels below
	// its top, with the error in view.
	if where := b.inView("policy-error"); where != "" {
		t.Errorf("after a failed save the error is out of view: %s", where)
	}
	// What the window shows, not the whole page.
	b.screenshotWith("05-tenant-policy-error-window", chromedp.CaptureScreenshot())
	b.screenshot("05-tenant-policy-error")
	for _, v := range b.axe() {
		t.Errorf("the policy form with its error: axe-core %s (%s): %s, at %s", v.ID, v.Impact, v.Help, strings.Join(v.Targets, "; "))
	}
	b.do("fix the window", chromedp.SetValue(chromedp.ID("new-policy-window"), "1h"))
	b.click("create-policy", "flash")
	b.do("open the policy's changes", chromedp.Click(`[data-policy="export"] summary`, chromedp.NodeVisible),
		chromedp.SetValue(chromedp.ID("override-export-pattern"), "vip-*"),
		chromedp.SetValue(chromedp.ID("override-export-limit"), "4"))
	b.click("save-override", "flash")
	// Each check from an address of its own: Acme's per-IP limit is 5 now.
	n := 0
	for subject, limit := range map[string]int{"acct-1": 2, "vip-1": 4} {
		for i := 1; i <= limit+1; i++ {
			n++
			if got, want := allowed(t, base, acme.LiveKey, fmt.Sprintf("198.51.100.%d", n), "export", subject), i <= limit; got != want {
				t.Fatalf("export check %d of %s: allowed %t, want %t", i, subject, got, want)
			}
		}
	}

	// A subject locked out by a policy is unlocked on the page: its next
	// check is allowed. A token bucket refills one a month here, so the
	// subject stays locked however long the steps take.
	if r := api(t, http.MethodPut, base+"/v1/policies/exports-monthly", acme.LiveKey, "198.51.100.210", `{"limit":1,"window":"30d","algorithm":"token_bucket"}`); r.StatusCode/100 != 2 {
		t.Fatalf("put policy exports-monthly: %d", r.StatusCode)
	}
	for i, want := range []bool{true, false} {
		if got := allowed(t, base, acme.LiveKey, fmt.Sprintf("198.51.100.%d", 211+i), "exports-monthly", "acct-42"); got != want {
			t.Fatalf("exports-monthly check %d of acct-42: allowed %t, want %t", i+1, got, want)
		}
	}
	b.open("/admin/tenants/"+acme.TenantID, "unlock-form")
	b.do("choose the policy and the subject", chromedp.SetValue(chromedp.ID("unlock-policy"), "exports-monthly"),
		chromedp.SetValue(chromedp.ID("unlock-subject"), "acct-42"))
	b.click("unlock", "flash")
	if got := b.text("flash"); !strings.Contains(got, "Subject unlocked") {
		t.Errorf("after unlocking: flash %q", got)
	}
	if !allowed(t, base, acme.LiveKey, "198.51.100.213", "exports-monthly", "acct-42") {
		t.Fatal("after unlocking, acct-42's next check is refused")
	}
	if allowed(t, base, acme.LiveKey, "198.51.100.214", "exports-monthly", "acct-42") {
		t.Fatal("after unlocking, acct-42 got more than one check of its limit of one")
	}
	b.open("/admin/audit?tenant="+url.QueryEscape(acme.TenantID)+"&kind=counter_reset", "audit")
	if got := b.text("audit-actor"); got != "ops@example.com" {
		t.Errorf("the unlock is audited with %q", got)
	}

	// Deleting the policy asks first too; confirmed, the API no longer
	// knows it.
	b.open("/admin/tenants/"+acme.TenantID, "policies")
	b.do("open the policy's changes", chromedp.Click(`[data-policy="export"] summary`, chromedp.NodeVisible))
	b.click("delete-policy", "confirm")
	if got := b.text("confirm-facts"); !strings.Contains(got, "1 override, deleted with it") {
		t.Errorf("the delete page says %q, want the override that goes with the policy", got)
	}
	if r := check(t, base, acme.LiveKey, "198.51.100.200", "export", "acct-9"); r.StatusCode != http.StatusOK {
		t.Fatalf("export check while the delete page asks: %d, want 200", r.StatusCode)
	}
	b.click("confirm", "flash")
	if r := check(t, base, acme.LiveKey, "198.51.100.201", "export", "acct-9"); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("export check after the delete: %d, want 400 (unknown policy)", r.StatusCode)
	}

	// A key created on the page is shown once and works; revoked, the API
	// refuses it.
	// It has a name and an expiry, typed as `tollgate keys create` takes
	// them, and the page lands where the key is shown.
	b.open("/admin/tenants/"+globex.TenantID, "create-key-form")
	b.do("name the key and its expiry",
		chromedp.SetValue(chromedp.ID("key-name"), "checkout service"),
		chromedp.SetValue(chromedp.ID("key-expires"), "90d"))
	b.click("create-key", "new-key")
	key := b.text("new-key-value")
	if !liveKey.MatchString(key) {
		t.Fatalf("new key %q", key)
	}
	expires := time.Now().UTC().AddDate(0, 0, 90).Format("2006-01-02")
	if got := b.text("new-key"); !strings.Contains(got, "checkout service") || !strings.Contains(got, "expires "+expires) {
		t.Errorf("the new key says %q, want its name and an expiry on %s", got, expires)
	}
	if where := b.inView("new-key"); where != "" {
		t.Errorf("the new key is out of view: %s", where)
	}
	b.screenshotWith("06-tenant-new-key-window", chromedp.CaptureScreenshot())
	named := fmt.Sprintf(`//tr[@data-testid="key-row"][.//span[contains(text(), "%s")]]`, strings.Split(key, "_")[2])
	row, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.Search(named), chromedp.NodeVisible))
	if err != nil || !strings.Contains(row, "checkout service") || !strings.Contains(row, "expires "+expires) {
		t.Errorf("the new key's row says %q (%v), want its name and expiry", row, err)
	}
	b.screenshot("06-tenant-new-key")
	if r := check(t, base, key, apiIP, "sign-in-ip", "new-key-user"); r.StatusCode != http.StatusOK {
		t.Fatalf("check with the new key: %d, want 200", r.StatusCode)
	}
	prefix := strings.Split(key, "_")[2]
	// Revoking asks first, on a page of its own; asking changes nothing.
	revoke := fmt.Sprintf(`//tr[@data-testid="key-row"][.//span[contains(text(), "%s")]]//a[@data-testid="revoke-key"]`, prefix)
	b.submit("ask to revoke the key", chromedp.Click(chromedp.Search(revoke), chromedp.NodeVisible), chromedp.WaitVisible(tid("confirm")))
	if got := b.text("confirm-facts"); !strings.Contains(got, prefix) {
		t.Errorf("the revoke page does not name the key: %q", got)
	}
	for _, v := range b.axe() {
		t.Errorf("the revoke page: axe-core %s (%s): %s, at %s", v.ID, v.Impact, v.Help, strings.Join(v.Targets, "; "))
	}
	if r := check(t, base, key, apiIP, "sign-in-ip", "new-key-user"); r.StatusCode != http.StatusOK {
		t.Fatalf("check with the key while the revoke page asks: %d, want 200", r.StatusCode)
	}
	b.click("confirm", "flash")
	if r := check(t, base, key, apiIP, "sign-in-ip", "new-key-user"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("check with the revoked key: %d, want 401", r.StatusCode)
	}
	if r := check(t, base, globex.LiveKey, apiIP, "sign-in-ip", "other-user"); r.StatusCode != http.StatusOK {
		t.Fatalf("check with the tenant's other key: %d, want 200", r.StatusCode)
	}

	// The other pages.
	b.click("nav-webhooks", "webhooks")
	if n := b.count(`[data-testid="webhook-row"]`); n != 3 {
		t.Errorf("webhook log: %d events, want 3", n)
	}
	b.click("webhook-view", "webhook-payload")
	if got := b.text("webhook-payload"); !strings.Contains(got, `"object": "event"`) {
		t.Errorf("payload view shows %q", got)
	}
	b.click("nav-plans", "plans")
	if n := b.count(`[data-testid="plan-row"]`); n != 5 {
		t.Errorf("plan table: %d rows, want 5", n)
	}
	// An admin added on the Admins page is listed; the audit log names
	// who added it.
	b.click("nav-admins", "new-admin-form")
	b.do("fill the new admin's form", chromedp.SetValue(chromedp.ID("new-admin-email"), "auditor@example.com"),
		chromedp.SetValue(chromedp.ID("new-admin-password"), password),
		chromedp.SetValue(chromedp.ID("new-admin-password-again"), password))
	b.click("add-admin", "flash")
	if got := b.text("admins"); !strings.Contains(got, "auditor@example.com") {
		t.Errorf("admins after adding one: %q", got)
	}
	b.open("/admin/audit?kind=admin_created", "audit")
	if got := b.text("audit-actor"); got != "ops@example.com" {
		t.Errorf("the new admin was added by %q", got)
	}
	b.open("/admin/audit?tenant="+url.QueryEscape(acme.TenantID)+"&kind=tenant_limits_changed", "audit")
	if got := b.text("audit-actor"); got != "ops@example.com" {
		t.Errorf("audit entry of the limit change by %q", got)
	}
	b.click("nav-audit", "audit")

	// Every page, at a phone's width and a laptop's: the questions before
	// revoking a key and deleting a policy too.
	b.open("/admin/tenants/"+acme.TenantID, "revoke-key")
	revokePage, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="revoke-key"]').getAttribute("href")`))
	if err != nil {
		t.Fatalf("the revoke link: %v", err)
	}
	b.survey([]surveyPage{
		{"03-overview", "/admin", "chart-hour"},
		{"04-tenants", "/admin/tenants", "tenant-table"},
		{"05-tenant", "/admin/tenants/" + acme.TenantID, "limits-form"},
		{"07-webhooks", "/admin/webhooks/evt_1QdemoStranger", "webhook-payload"},
		{"08-plans", "/admin/plans", "plans"},
		{"08-admins", "/admin/admins", "admins"},
		{"09-audit", "/admin/audit", "audit"},
		{"06-revoke-confirm", revokePage, "confirm"},
		{"05-delete-policy-confirm", "/admin/tenants/" + acme.TenantID + "/policies/sign-in-ip/delete", "confirm"},
	})

	// Sign out: the session is gone.
	b.click("sign-out", "login-notice")
	b.open("/admin/tenants", "login-form")
	t.Logf("browser suite took %s", time.Since(start).Round(time.Millisecond))
}
