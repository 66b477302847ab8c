package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/tollgate/tollgate/internal/billing/stripeapi/stripemocktest"
	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// journeyStripeSecret signs the Stripe webhooks the journey sends.
const journeyStripeSecret = "whsec_journey_0123456789abcdef"

// TestConsoleJourneyInChromium is issue 41's whole journey of a new user,
// in a real browser at a laptop's and a phone's width (a database each),
// against `tollgate serve` as `make run` serves it (TOLLGATE_DEV, the
// development mailbox) with Stripe played by stripe-mock: sign up, read the
// confirmation mail and confirm (the live key), make a policy of 3 a
// minute per subject on the policies page, protect a route with the quick
// start's curl snippet as the page shows it (substituting only what the
// page says to), until the route refuses with 429; see the refusals on the
// usage page; upgrade through Checkout, and after Stripe's signed webhooks
// see the paid plan on the billing page. Then, held to starter by an unpaid
// subscription, the 402 answer's billing_url followed in the browser lands
// on the billing page, which says why. Every page visited: no sideways
// scrolling, no axe-core violation, a screenshot (70-journey-*).
func TestConsoleJourneyInChromium(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprintf("%dpx", w), func(t *testing.T) { journey(t, w) })
	}
}

func journey(t *testing.T, width int64) {
	dsn := pgtest.New(t)
	srv := bintest.Start(t, binary, environ(dsn, "TOLLGATE_DEV=1", "STRIPE_API_KEY=sk_test_journey",
		"STRIPE_API_BASE="+stripemocktest.URL(t), "STRIPE_WEBHOOK_SECRET="+journeyStripeSecret))
	base := srv.URL
	tollgate(t, dsn, "", "plans", "set-price", "pro", "price_journey_pro")
	b := newBrowser(t, base)
	b.do("viewport", chromedp.EmulateViewport(width, 900))
	b.do("record CSP violations", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: recordViolations})
		return err
	}))
	step := func(name string) { b.t.Helper(); b.look(fmt.Sprintf("70-journey-%s-%d", name, width), width) }
	began := time.Now()

	// Sign up.
	b.open("/console/signup", "signup-form")
	step("1-signup")
	b.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Acme Robotics"),
	)
	b.click("sign-up", "new-key-test")
	step("2-signed-up")

	// The confirmation mail, its link, the click: the live key.
	b.open("/console/dev/mailbox", "mail")
	step("3-mailbox")
	link := regexp.MustCompile(`https?://\S+/console/confirm\?token=\S+`).FindString(b.text("mail"))
	if link == "" {
		t.Fatalf("no confirmation link in the mailbox: %q", b.text("mail"))
	}
	b.do("open the mailed link", chromedp.Navigate(link), chromedp.WaitVisible(tid("confirm")))
	step("4-confirm")
	b.click("confirm", "new-key-live")
	live := b.text("new-key-live")
	if !liveKey.MatchString(live) {
		t.Fatalf("the live key: %q", live)
	}
	step("5-live-key")

	// A policy, on the policies page: 3 a minute per subject, named as the
	// quick start's snippets name theirs.
	b.open("/console/policies", "policy-form")
	b.do("fill the policy form",
		chromedp.SetValue(chromedp.ID("policy-name"), "sign-in-ip"),
		chromedp.SetValue(chromedp.ID("policy-limit"), "3"),
		chromedp.SetValue(chromedp.ID("policy-window"), "1m"),
		chromedp.SetValue(chromedp.ID("policy-scope"), "subject"),
	)
	b.click("save-policy", "policy-row")
	if row := b.text("policy-row"); !strings.Contains(row, "sign-in-ip") || !strings.Contains(row, "3") {
		t.Fatalf("the policy made: %q", row)
	}
	step("6-policy")

	// The quick start's curl snippet, as shown, protects a route of the
	// user's own: each request asks Tollgate the snippet's check and is
	// refused with 429 when Tollgate refuses, as the Go snippet does.
	b.open("/console", "snippet-curl")
	step("7-quick-start")
	snippet := b.text("snippet-curl")
	if strings.Contains(snippet, "…") {
		// The page shows a placeholder for a key it no longer has, and
		// must say what to put there.
		hint := b.text("snippet-key")
		placeholder := regexp.MustCompile(`tg_(?:live|test)_…`).FindString(snippet)
		if placeholder == "" || !strings.Contains(hint, placeholder) || !strings.Contains(hint, "live key") {
			t.Fatalf("the snippet %q holds a placeholder, and the page says %q of it", snippet, hint)
		}
		snippet = strings.ReplaceAll(snippet, placeholder, live)
	}
	ask := snippetCheck(t, snippet)
	route := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowed, err := ask()
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
		case !allowed:
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			io.WriteString(w, "welcome")
		}
	}))
	defer route.Close()
	var codes []int
	for len(codes) < 10 {
		resp, err := http.Get(route.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusBadGateway {
			t.Fatalf("the snippet's request failed: %s", body)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
	}
	if fmt.Sprint(codes) != "[200 200 200 429]" {
		t.Fatalf("the protected route answered %v, want three 200 then 429", codes)
	}

	// The usage page counts them: four checks, one refused.
	eventually.True(t, 20*time.Second, "the usage page counts the route's checks", func() bool {
		b.open("/console/usage", "usage-month")
		return strings.Contains(b.text("console-minutes"), "4 checks in the last 24 hours, 1 refused")
	})
	if s := b.text("console-refusals"); !strings.Contains(s, "1 refused request") {
		t.Errorf("refusals by layer: %q", s)
	}
	if s := b.text("usage-month"); !strings.Contains(s, "4") {
		t.Errorf("this month's live checks: %q", s)
	}
	step("8-usage")

	// Upgrade: Checkout (stripe-mock's session, whose page the browser is
	// kept from loading: Stripe sends the payer back to the success URL),
	// then Stripe's signed webhooks.
	b.open("/console/billing", "upgrade-pro")
	step("9-billing-starter")
	checkout := b.payAtStripe("upgrade-pro", base+"/console/billing?checkout=success")
	if !strings.HasPrefix(checkout, "https://") {
		t.Fatalf("Upgrade led to %q, want Stripe Checkout", checkout)
	}
	b.do("back from Checkout", chromedp.WaitVisible(tid("flash")))
	step("10-checkout-success")
	tenantID := journeyTenant(t, dsn, "dev@example.com")
	now := time.Now()
	stripeEvent(t, base, "evt_j_ck", "checkout.session.completed", now,
		fmt.Sprintf(`{"id":"cs_j","object":"checkout.session","mode":"subscription","client_reference_id":%q,"customer":"cus_j","subscription":"sub_j"}`, tenantID))
	stripeEvent(t, base, "evt_j_sub", "customer.subscription.created", now, journeySubscription("active"))
	b.open("/console/billing", "plan")
	if p, s, e := b.text("plan"), b.text("billing-status"), b.text("effective-plan"); p != "pro" || s != "active" || e != "pro" {
		t.Fatalf("after Checkout and the webhooks: plan %q, status %q, limits of %q; want pro, active, pro", p, s, e)
	}
	step("11-billing-pro")
	took := time.Since(began)

	// Unpaid: held to starter, whose allotment (4 here) is used up: the
	// 402's billing_url, followed in the browser, lands on this page.
	tollgate(t, dsn, "", "plans", "set", "starter", "--monthly-checks", "4")
	stripeEvent(t, base, "evt_j_unpaid", "customer.subscription.updated", now.Add(time.Second), journeySubscription("unpaid"))
	var billingURL string
	eventually.True(t, 10*time.Second, "a 402 with a billing_url", func() bool {
		billingURL = paymentRequired(t, base, live)
		return billingURL != ""
	})
	b.do("follow the billing_url", chromedp.Navigate(billingURL), chromedp.WaitVisible(tid("billing-link-reason")))
	if loc, _ := chromedp.Run(b.ctx, chromedp.Location()); !strings.HasPrefix(loc, base+"/console/billing?") {
		t.Errorf("the billing_url led to %s", loc)
	}
	if r := b.text("billing-link-reason"); !strings.Contains(r, "402") || !strings.Contains(r, "unpaid") {
		t.Errorf("why the owner is here: %q", r)
	}
	if p := b.text("portal"); p != "Update the payment method" {
		t.Errorf("the portal's button: %q", p)
	}
	step("12-billing-link")

	// A member of another workspace who follows the link sees nothing of
	// this one, and may sign out to sign in as its member.
	other := newBrowser(t, base)
	other.do("viewport", chromedp.EmulateViewport(width, 900))
	other.open("/console/signup", "signup-form")
	other.do("fill the sign-up form",
		chromedp.SetValue(chromedp.ID("email"), "someone@beta.example"),
		chromedp.SetValue(chromedp.ID("password"), password),
		chromedp.SetValue(chromedp.ID("name"), "Beta Bakery"),
	)
	other.click("sign-up", "new-key-test")
	other.do("follow A's billing_url", chromedp.Navigate(billingURL), chromedp.WaitVisible(tid("other-workspace")))
	other.look(fmt.Sprintf("70-journey-13-other-workspace-%d", width), width)
	if text, _ := chromedp.Run(other.ctx, chromedp.Evaluate[string](`document.body.innerText`)); strings.Contains(text, "Acme") || strings.Contains(text, "unpaid") || strings.Contains(text, "dev@example.com") {
		t.Errorf("another workspace's member sees A's billing: %q", text)
	}
	other.click("other-workspace-sign-out", "console-login-form")
	other.do("fill the sign-in form",
		chromedp.SetValue(chromedp.ID("email"), "dev@example.com"),
		chromedp.SetValue(chromedp.ID("password"), password),
	)
	other.click("console-sign-in", "billing-link-reason")
	t.Logf("at %d px the journey from sign-up to the paid plan took %s (the 402's link after it: %s in all)",
		width, took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// look checks the page shown as the survey does (no sideways scrolling,
// no axe-core violation) and saves its screenshot as name.png.
func (b *browser) look(name string, width int64) {
	b.t.Helper()
	fit, err := chromedp.Run(b.ctx, chromedp.Evaluate[[2]int64](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
	if err != nil {
		b.t.Fatalf("scroll width of %s: %v", name, err)
	}
	if sw, cw := fit[0], fit[1]; sw > cw || cw > width {
		b.t.Errorf("%s: the page is %d px wide in a window %d px wide, and scrolls sideways%s", name, sw, cw, b.widest(cw))
	}
	axeClean(b, name)
	b.cspClean(name)
	b.screenshot(name)
}

// cspClean fails the test for each thing the page's
// Content-Security-Policy refused (recordViolations keeps them).
func (b *browser) cspClean(what string) {
	b.t.Helper()
	vs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.__violations || []`))
	if err != nil {
		b.t.Fatalf("CSP violations of %s: %v", what, err)
	}
	for _, v := range vs {
		b.t.Errorf("%s: Content-Security-Policy %s", what, v)
	}
}

// payAtStripe clicks the button id, which sends the browser to Stripe
// Checkout, and plays Stripe's part: the Checkout page is not loaded (its
// request is answered here), and the payer is sent back to back (a 303).
// It returns the Checkout address the browser was sent to.
func (b *browser) payAtStripe(id, back string) string {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	paused := make(chan *fetch.EventRequestPaused, 8)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			select {
			case paused <- e:
			default:
			}
		}
	}); err != nil {
		b.t.Fatal(err)
	}
	b.do("intercept Stripe", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "https://*"}}})
		return err
	}))
	defer b.do("stop intercepting", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, fetch.Disable, cdp.Empty{})
		return err
	}))
	b.do("click "+id, chromedp.Click(tid(id), chromedp.NodeVisible))
	select {
	case ev := <-paused:
		b.do("Stripe sends the payer back", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, fetch.FulfillRequest, fetch.FulfillRequestParams{
				RequestID: ev.RequestID, ResponseCode: http.StatusSeeOther,
				ResponseHeaders: []*fetch.HeaderEntry{{Name: "Location", Value: back}},
			})
			return err
		}))
		return ev.Request.URL
	case <-time.After(15 * time.Second):
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.cspClean("Upgrade")
		b.t.Fatalf("the browser never left for Stripe (at %s: %.300q)", loc, text)
	}
	return ""
}

// shellWords splits a line as a POSIX shell would, for the quoting the
// snippets use: single and double quotes, backslashes outside them.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'' && r == '\'', quote == '"' && r == '"':
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			w.WriteRune(rs[i])
			in = true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// snippetCheck reads the curl snippet as a shell would (its export line
// sets KEY; lines ending in a backslash continue) and returns a function
// that sends its check request (the curl command that calls /v1/check)
// with net/http and says whether Tollgate allowed it.
func snippetCheck(t *testing.T, snippet string) func() (bool, error) {
	t.Helper()
	env := map[string]string{}
	var cmd []string
	for _, line := range strings.Split(strings.ReplaceAll(snippet, "\\\n", " "), "\n") {
		words := shellWords(strings.TrimSpace(line))
		if len(words) == 2 && words[0] == "export" {
			if k, v, ok := strings.Cut(words[1], "="); ok {
				env[k] = v
			}
			continue
		}
		if len(words) > 0 && words[0] == "curl" && strings.Contains(line, "/v1/check") {
			cmd = words[1:]
		}
	}
	if cmd == nil {
		t.Fatalf("no curl command of /v1/check in the snippet %q", snippet)
	}
	expand := func(s string) string {
		return regexp.MustCompile(`\$\{?([A-Z_]+)\}?`).ReplaceAllStringFunc(s, func(m string) string {
			return env[strings.Trim(m, "${}")]
		})
	}
	method, target, body := http.MethodGet, "", ""
	header := http.Header{}
	for i := 0; i < len(cmd); i++ {
		switch a := cmd[i]; a {
		case "-s":
		case "-X":
			i++
			method = cmd[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(expand(cmd[i]), ":")
			header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-d":
			i++
			body = expand(cmd[i])
			if header.Get("Content-Type") == "" {
				// What curl sends with -d.
				header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
		default:
			if strings.HasPrefix(a, "-") || target != "" {
				t.Fatalf("the snippet's curl has %q, which this test does not know", a)
			}
			target = expand(a)
		}
	}
	return func() (bool, error) {
		req, err := http.NewRequest(method, target, strings.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header = header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v struct {
			Allowed *bool `json:"allowed"`
		}
		if err := json.Unmarshal(raw, &v); err != nil || resp.StatusCode != http.StatusOK || v.Allowed == nil {
			return false, fmt.Errorf("%s %s: %d %s", method, target, resp.StatusCode, raw)
		}
		return *v.Allowed, nil
	}
}

// paymentRequired sends one check with key, and returns the billing_url
// of a 402 answer, or "" for any other.
func paymentRequired(t *testing.T, base, key string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", strings.NewReader(`{"items":[{"policy":"sign-in-ip","subject":"203.0.113.99"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		BillingURL string `json:"billing_url"`
	}
	if resp.StatusCode != http.StatusPaymentRequired || json.NewDecoder(resp.Body).Decode(&p) != nil {
		return ""
	}
	return p.BillingURL
}

// journeyTenant is the tenant of the member with email.
func journeyTenant(t *testing.T, dsn, email string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id string
	if err := conn.QueryRow(ctx, `SELECT tenant_id::text FROM members WHERE email = $1`, email).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// journeySubscription is the journey's pro subscription in status.
func journeySubscription(status string) string {
	return fmt.Sprintf(`{"id":"sub_j","object":"subscription","customer":"cus_j","status":%q,"items":{"object":"list","data":[{"id":"si_j","price":{"id":"price_journey_pro","recurring":{"usage_type":"licensed"}}}]}}`, status)
}

// stripeEvent posts a Stripe event, signed as Stripe signs it, to the
// webhook endpoint, which must apply it.
func stripeEvent(t *testing.T, base, id, typ string, created time.Time, object string) {
	t.Helper()
	payload := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"livemode":false,"api_version":"2025-03-31.basil","data":{"object":%s}}`,
		id, typ, created.Unix(), object)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: journeyStripeSecret})
	req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", bytes.NewReader([]byte(payload)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"outcome":"applied"`) {
		t.Fatalf("Stripe event %s: %d %s", id, resp.StatusCode, raw)
	}
}
