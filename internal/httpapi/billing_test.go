package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCheckoutRoute(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(true, true)
	tenant := w.tenant()

	a := in.serve(http.MethodPost, "/v1/billing/checkout", tenant, `{"plan":"pro"}`)
	if a.status != http.StatusOK {
		t.Fatalf("checkout: %d %s", a.status, a.body)
	}
	if u, _ := a.json(t)["url"].(string); !strings.HasPrefix(u, "http") {
		t.Errorf("checkout url %q", u)
	}
	for _, tc := range []struct {
		name, body, field string
	}{
		{"legacy plan", `{"plan":"growth"}`, "plan"},
		{"never purchasable", `{"plan":"enterprise_dedicated"}`, "plan"},
		{"no price", `{"plan":"enterprise"}`, "plan"},
		{"unknown plan", `{"plan":"gold"}`, "plan"},
		{"no plan", `{}`, "plan"},
		{"unknown member", `{"plan":"pro","coupon":"x"}`, "body"},
		{"bad success url", `{"plan":"pro","success_url":"ftp://x"}`, "success_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := in.serve(http.MethodPost, "/v1/billing/checkout", tenant, tc.body)
			wantProblem(t, a, http.StatusBadRequest, "invalid-request")
			if f, _ := a.json(t)["field"].(string); f != tc.field {
				t.Errorf("field %q, want %q: %s", f, tc.field, a.body)
			}
		})
	}
}

func TestPortalRoute(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(true, true)
	tenant := w.tenant()
	wantProblem(t, in.serve(http.MethodPost, "/v1/billing/portal", tenant, ""), http.StatusConflict, "no-billing-account")
	outcome(t, in.post(checkoutJSON("evt_ck", time.Now(), tenant, "cus_p", "sub_p"), webhookSecret, time.Time{}))
	for _, body := range []string{"", `{"return_url":"https://app.example/settings"}`} {
		a := in.serve(http.MethodPost, "/v1/billing/portal", tenant, body)
		if a.status != http.StatusOK {
			t.Fatalf("portal: %d %s", a.status, a.body)
		}
		if u, _ := a.json(t)["url"].(string); !strings.HasPrefix(u, "http") {
			t.Errorf("portal url %q", u)
		}
	}
}

func TestBillingWithoutStripeKeyAnswers503(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(false, true)
	tenant := w.tenant()
	for path, body := range map[string]string{"/v1/billing/checkout": `{"plan":"pro"}`, "/v1/billing/portal": ""} {
		a := in.serve(http.MethodPost, path, tenant, body)
		wantProblem(t, a, http.StatusServiceUnavailable, "billing-not-configured")
		if title, _ := a.json(t)["title"].(string); !strings.Contains(title, "not configured") {
			t.Errorf("%s: title %q does not say why", path, title)
		}
	}
	link := (&api{cfg: Config{PublicURL: "https://tollgate.example", BillingKey: []byte("billing-key-for-tests")}}).billingURL(tenant)
	u, _ := url.Parse(link)
	wantProblem(t, in.serve(http.MethodGet, u.Path, "", ""), http.StatusServiceUnavailable, "billing-not-configured")
}

// TestBillingLinkRedirectsToPortal follows the billing_url that 402 answers
// carry (made by api.billingURL) to a fresh portal session.
func TestBillingLinkRedirectsToPortal(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(true, true)
	tenant, other := w.tenant(), w.tenant()
	outcome(t, in.post(checkoutJSON("evt_ck", time.Now(), tenant, "cus_l", "sub_l"), webhookSecret, time.Time{}))
	link := (&api{cfg: Config{PublicURL: "https://tollgate.example", BillingKey: []byte("billing-key-for-tests")}}).billingURL(tenant)
	u, err := url.Parse(link)
	if err != nil || u.Host != "tollgate.example" || !strings.HasPrefix(u.Path, "/billing/portal/"+tenant+".") {
		t.Fatalf("billing url %q", link)
	}
	a := in.serve(http.MethodGet, u.Path, "", "")
	if a.status != http.StatusSeeOther {
		t.Fatalf("billing link: %d %s", a.status, a.body)
	}
	if loc := a.header.Get("Location"); !strings.HasPrefix(loc, "http") {
		t.Errorf("Location %q", loc)
	}
	if cc := a.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}

	token := strings.TrimPrefix(u.Path, "/billing/portal/")
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != tenant {
		t.Fatalf("token %q, want tenant.expiry.mac", token)
	}
	exp, mac := parts[1], parts[2]
	flipped := []byte(mac)
	flipped[0] ^= 1
	if flipped[0] > 'f' || (flipped[0] > '9' && flipped[0] < 'a') {
		flipped[0] = '0'
	}
	later := strconv.FormatInt(time.Now().Add(30*24*time.Hour).Unix(), 10)
	for name, bad := range map[string]string{
		"another tenant's id with this MAC": other + "." + exp + "." + mac,
		"a changed MAC":                     tenant + "." + exp + "." + string(flipped),
		"a later expiry with this MAC":      tenant + "." + later + "." + mac,
		"a short MAC":                       tenant + "." + exp + "." + mac[:8],
		"no expiry":                         tenant + "." + mac,
		"no MAC":                            tenant,
		"not hex":                           tenant + "." + exp + ".zz",
	} {
		t.Run(name, func(t *testing.T) {
			a := in.serve(http.MethodGet, "/billing/portal/"+bad, "", "")
			wantProblem(t, a, http.StatusNotFound, "not-found")
		})
	}
}

func TestVerifyPortalTokenNeedsAKey(t *testing.T) {
	t.Parallel()
	link := (&api{cfg: Config{}}).billingURL("t1")
	token := link[strings.LastIndex(link, "/")+1:]
	if _, ok := verifyPortalToken(nil, token, time.Now()); ok {
		t.Error("a token verified without a key")
	}
}

// TestVerifyPortalTokenExpires: a token opens until its expiry, and not
// from that instant on; billingURL's links last BillingLinkLifetime.
func TestVerifyPortalTokenExpires(t *testing.T) {
	t.Parallel()
	key := []byte("billing-key-for-tests")
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	token := signPortalToken(key, "t1", now.Add(BillingLinkLifetime))
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{now, true},
		{now.Add(BillingLinkLifetime - time.Second), true},
		{now.Add(BillingLinkLifetime), false},
		{now.Add(BillingLinkLifetime + time.Hour), false},
	} {
		if id, ok := verifyPortalToken(key, token, tc.at); ok != tc.want || (ok && id != "t1") {
			t.Errorf("at %v: %q, %v; want %v", tc.at, id, ok, tc.want)
		}
	}
	link := (&api{cfg: Config{BillingKey: key}}).billingURL("t1")
	token = link[strings.LastIndex(link, "/")+1:]
	if _, ok := verifyPortalToken(key, token, time.Now().Add(BillingLinkLifetime-time.Minute)); !ok {
		t.Error("billingURL's link does not open a little before its lifetime ends")
	}
	if _, ok := verifyPortalToken(key, token, time.Now().Add(BillingLinkLifetime+time.Minute)); ok {
		t.Error("billingURL's link still opens after its lifetime")
	}
}
