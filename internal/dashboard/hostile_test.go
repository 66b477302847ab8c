package dashboard_test

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/httpapi"
)

// hostile are values no form or link of the dashboard makes: NUL and bytes
// that are not UTF-8 (which PostgreSQL refuses in text), very long strings,
// numbers out of every range, and path tricks.
var hostile = []string{
	"\x00", "a\x00b", "\xff", "\xc0\xaf", "\xed\xa0\x80",
	strings.Repeat("a", 10_000), strings.Repeat("é", 3_000),
	"-1", "0", "-9223372036854775808", "9223372036854775807", "99999999999999999999999", "1e309", "NaN",
	"../../etc/passwd", "' OR 1=1 --", "%", "%25", " ",
}

// TestHostileInputIsNeverA500 walks every /admin route Echo has, signed in
// and signed out, with each hostile value in each path parameter, in every
// query parameter a page reads and in every form field a form posts, and
// wants an answer below 500 every time: a client's mistake is a 400 page,
// never an internal error.
func TestHostileInputIsNeverA500(t *testing.T) {
	t.Parallel()
	late := &lateGate{}
	// The walk sends thousands of pages from one address: without the
	// per-IP ceiling of the pages that take no key, which would answer
	// them 429 long before the walk ends.
	e := newEnvWith(t, func(c *httpapi.Config) { c.Public = nil }, func(c *dashboard.Config) {
		c.Webhooks = c.Billing.(dashboard.WebhookLog)
		c.Counters = late
	})
	late.g = e.gate()
	e.admin("ops@example.com")
	tn, keys := e.tenantWith("Acme", "pro")
	e.stripeEvent("evt_hostile", "invoice.paid", "unknown_customer", "", 1, `{}`)
	b := e.browser()
	b.signIn("ops@example.com")
	csrf := b.get("/admin/plans").mustStatus(http.StatusOK).inputValue("csrf")

	queryParams := []string{"q", "page", "tenant", "kind", "before", "outcome", "offset", "done", "next", "signed_out"}
	formFields := []string{"email", "password", "password_again", "next", "mode", "rate_limit_per_minute", "quota_per_minute", "quota_per_hour",
		"ip_per_minute", "monthly_checks", "unlimited", "stripe_price_id", "tenant_id", "name", "plan", "expires_at", "policy", "subject",
		"limit", "window", "pattern"}
	good := map[string]string{"id": tn.ID, "webhook": "evt_hostile", "key": keys[0].ID, "name": "pro"}

	var routes []string
	seen := map[string]bool{}
	for _, r := range e.echo.Routes() {
		if !strings.HasPrefix(r.Path, "/admin") || strings.HasPrefix(r.Path, "/admin/static") {
			continue
		}
		method := r.Method
		if method != http.MethodGet && method != http.MethodPost {
			continue
		}
		if k := method + " " + r.Path; !seen[k] {
			seen[k] = true
			routes = append(routes, k)
		}
	}
	// Signing out ends the walk's session: it goes last.
	sort.Slice(routes, func(i, j int) bool {
		li, lj := strings.HasSuffix(routes[i], "/logout"), strings.HasSuffix(routes[j], "/logout")
		if li != lj {
			return lj
		}
		return routes[i] < routes[j]
	})
	if len(routes) < 10 {
		t.Fatalf("only %d /admin routes found: %v", len(routes), routes)
	}

	fails := 0
	try := func(b *browser, method, target string, form url.Values) {
		t.Helper()
		var p page
		if method == http.MethodGet {
			req, err := http.NewRequest(method, b.e.srv.URL+target, nil)
			if err != nil {
				// Not even a request: no client can send it.
				return
			}
			p = b.do(req)
		} else {
			p = b.post(target, form)
		}
		if p.status >= 500 {
			fails++
			if fails <= 20 {
				t.Errorf("%s %.200q: %d", method, target, p.status)
			}
		}
	}
	for _, route := range routes {
		method, path, _ := strings.Cut(route, " ")
		segs := strings.Split(path, "/")
		// The route with good parameters, then each parameter hostile.
		fill := func(hostileParam int, v string) string {
			out := make([]string, len(segs))
			for i, s := range segs {
				switch {
				case strings.HasPrefix(s, ":") && i == hostileParam:
					out[i] = url.PathEscape(v)
				case strings.HasPrefix(s, ":"):
					out[i] = good[s[1:]]
				case s == "*":
					out[i] = url.PathEscape(v)
				default:
					out[i] = s
				}
			}
			return strings.Join(out, "/")
		}
		for _, v := range hostile {
			for _, signedIn := range []bool{true, false} {
				who := b
				if !signedIn {
					who = e.browser()
				}
				for i, s := range segs {
					if strings.HasPrefix(s, ":") || s == "*" {
						try(who, method, fill(i, v), url.Values{"csrf": {csrf}})
					}
				}
				base := fill(-1, "x")
				if method == http.MethodGet {
					for _, q := range queryParams {
						try(who, method, base+"?"+q+"="+url.QueryEscape(v), nil)
					}
					// Raw, not re-encoded: a lone % and bytes a browser
					// would never send.
					try(who, method, base+"?q="+v[:min(len(v), 64)], nil)
					continue
				}
				for _, f := range formFields {
					try(who, method, base, url.Values{"csrf": {csrf}, f: {v}})
				}
			}
		}
	}
	// The ones first seen as 500s are 400 pages that say what is wrong.
	b = e.browser()
	b.signIn("ops@example.com")
	for _, target := range []string{"/admin/tenants?q=%00", "/admin/webhooks/%FF", "/admin/audit?kind=%00", "/admin/tenants?page=99999999999999999999", "/admin/webhooks?offset=-1"} {
		p := b.get(target).mustStatus(http.StatusBadRequest)
		if !strings.Contains(p.body, "Bad request") {
			t.Errorf("%s: the 400 page does not say so:\n%.500s", target, p.body)
		}
	}
	if fails > 20 {
		t.Errorf("… and %d more", fails-20)
	}
}

// TestAuditPageRefusesPageNumbers: the audit log pages by entry number
// ("Older entries", before=N), not by page number, so a page parameter, in
// range or not, is input no page makes: a 400 page naming it, never the
// first page answered as if it were the one asked for.
func TestAuditPageRefusesPageNumbers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	for _, q := range []string{"page=999999999999", "page=99999999999999999999", "page=0", "page=-1", "page=abc", "page=2", "kind=plan_changed&page=3"} {
		p := b.get("/admin/audit?" + q).mustStatus(http.StatusBadRequest)
		if !strings.Contains(p.body, "Bad request") || !strings.Contains(p.body, "page") {
			t.Errorf("%s: the 400 page does not name the parameter:\n%.800s", q, p.body)
		}
	}
	for _, q := range []string{"", "before=999999999999", "kind=plan_changed", "page="} {
		b.get("/admin/audit?" + q).mustStatus(http.StatusOK)
	}
	b.get("/admin/audit?before=0").mustStatus(http.StatusBadRequest)
}

// TestTenantListRefusesBadPages: a page number that is not one (negative,
// zero, not a number, past any list) is a 400 page naming the parameter and
// its range, never the first page answered as if it were the one asked for.
func TestTenantListRefusesBadPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	for _, q := range []string{"page=-5", "page=0", "page=abc", "page=1.5", "page=99999999999999999999", "q=acme&page=-1"} {
		p := b.get("/admin/tenants?" + q).mustStatus(http.StatusBadRequest)
		if !strings.Contains(p.body, "The page must be a whole number from 1 to") {
			t.Errorf("%s: the 400 page does not say what a page is:\n%.800s", q, p.body)
		}
	}
	for _, q := range []string{"", "page=1", "page=2", "page="} {
		b.get("/admin/tenants?" + q).mustStatus(http.StatusOK)
	}
}
