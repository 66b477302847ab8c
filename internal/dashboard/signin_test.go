package dashboard_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/testkit/logbuf"
)

// TestSignInHashesAreBounded: forty sign-ins at once, each from an address
// of its own (so that the sign-in limiter lets every one through), against
// a hash at the real cost (19 MiB of argon2 each). At most the Hasher's
// bound run at once, the Hasher's own count says so, and whoever gets no
// turn within the wait is told 503 with Retry-After, never left to pile
// up memory.
func TestSignInHashesAreBounded(t *testing.T) {
	t.Parallel()
	const bound = 2
	hasher := admin.NewHasher(bound, 100*time.Millisecond)
	e := newEnvBehindProxy(t, func(c *dashboard.Config) { c.Hasher = hasher })
	hash, err := admin.HashPassword(password, admin.DefaultArgon2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admins.CreateAdmin(t.Context(), "ops@example.com", hash); err != nil {
		t.Fatal(err)
	}

	const n = 40
	type result struct {
		status     int
		retryAfter string
		message    string
	}
	results := make([]result, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			b := e.browser()
			b.from = fmt.Sprintf("2001:db8:%x::1", i+1)
			csrf := b.csrf("/admin/login")
			email := "ops@example.com"
			if i%2 == 1 {
				// Unknown accounts cost a decoy hash, bounded the same.
				email = fmt.Sprintf("nobody%d@example.com", i)
			}
			ready.Done()
			<-start
			p := b.post("/admin/login", url.Values{"csrf": {csrf}, "email": {email}, "password": {"wrong password " + strconv.Itoa(i)}})
			results[i] = result{p.status, p.header.Get("Retry-After"), p.text("login-error")}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()

	var wrong, busy int
	for i, r := range results {
		switch r.status {
		case http.StatusUnauthorized:
			wrong++
		case http.StatusServiceUnavailable:
			busy++
			if ra, err := strconv.Atoi(r.retryAfter); err != nil || ra < 1 {
				t.Errorf("sign-in %d: 503 with Retry-After %q", i, r.retryAfter)
			}
			if !strings.Contains(r.message, "busy") {
				t.Errorf("sign-in %d: 503 saying %q", i, r.message)
			}
		default:
			t.Errorf("sign-in %d: status %d (%s), want 401 or 503", i, r.status, r.message)
		}
	}
	if peak := hasher.Peak(); peak > bound || peak < 1 {
		t.Errorf("%d password hashes ran at once, want 1 to %d", peak, bound)
	}
	if wrong == 0 || busy == 0 {
		t.Errorf("%d answered 401 and %d 503: want both (a bound that refuses nothing or everything proves nothing)", wrong, busy)
	}
	t.Logf("%d wrong passwords answered, %d told to retry; at most %d hashes at once", wrong, busy, hasher.Peak())
}

// TestFailuresElsewhereDoNotLockTheOperatorOut: failed sign-ins count per
// account and client address, so that a stranger's guesses lock only the
// stranger out; a much higher count per account, from everywhere, still
// stops a guess spread over many addresses, and then locks everyone.
func TestFailuresElsewhereDoNotLockTheOperatorOut(t *testing.T) {
	t.Parallel()
	e := newEnvBehindProxy(t)
	e.admin("ops@example.com")
	attempt := func(from, pw string) page {
		t.Helper()
		b := e.browser()
		b.from = from
		return b.post("/admin/login", url.Values{"csrf": {b.csrf("/admin/login")}, "email": {"ops@example.com"}, "password": {pw}})
	}
	const stranger = "198.51.100.7"
	for i := range dashboard.FailuresPerAccount {
		attempt(stranger, "guess "+strconv.Itoa(i)).mustStatus(http.StatusUnauthorized)
	}
	// The stranger is refused before the password is tried, even the right
	// one...
	p := attempt(stranger, password).mustStatus(http.StatusTooManyRequests)
	if !strings.Contains(p.text("login-error"), "failed sign-ins for this account from your network address") {
		t.Fatalf("refusal %q", p.text("login-error"))
	}
	// ...the operator, elsewhere, is not.
	attempt("203.0.113.9", password).mustStatus(http.StatusSeeOther)

	// Guesses spread over many addresses stop at the account's ceiling.
	failures := dashboard.FailuresPerAccount
	for a := 1; failures < dashboard.FailuresPerAccountEverywhere; a++ {
		from := fmt.Sprintf("192.0.2.%d", a)
		for i := 0; i < dashboard.FailuresPerAccount && failures < dashboard.FailuresPerAccountEverywhere; i++ {
			attempt(from, "guess").mustStatus(http.StatusUnauthorized)
			failures++
		}
	}
	p = attempt("203.0.113.10", password).mustStatus(http.StatusTooManyRequests)
	if !strings.Contains(p.text("login-error"), "from everywhere") {
		t.Fatalf("refusal %q", p.text("login-error"))
	}
}

// TestFailedSignInIsLoggedAndAudited: a wrong password for an admin's
// account is logged as a warning and audited (admin_sign_in_failed, with the
// account and the client IP's digest, never the address or the password);
// an unknown email is logged only; the audit page's kind filter finds the
// entry.
func TestFailedSignInIsLoggedAndAudited(t *testing.T) {
	t.Parallel()
	logs := &logbuf.Buffer{}
	e := newEnvBehindProxy(t, func(c *dashboard.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	e.admin("ops@example.com")
	const addr = "198.51.100.23"
	const guess = "hunter2 is not it"
	b := e.browser()
	b.from = addr
	for _, email := range []string{"ops@example.com", "nobody@example.com"} {
		csrf := b.csrf("/admin/login")
		b.post("/admin/login", url.Values{"csrf": {csrf}, "email": {email}, "password": {guess}}).mustStatus(http.StatusUnauthorized)
	}
	l := logs.String()
	for _, want := range []string{"level=WARN msg=\"admin sign-in failed: wrong password\"", "level=WARN msg=\"admin sign-in failed: no such account\"", "client_ip_digest="} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q:\n%s", want, l)
		}
	}
	for _, secret := range []string{addr, guess, "nobody@example.com"} {
		if strings.Contains(l, secret) {
			t.Errorf("log shows %q:\n%s", secret, l)
		}
	}

	es, err := e.audit.List(t.Context(), audit.Filter{Kind: dashboard.KindSignInFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 {
		t.Fatalf("%d failed sign-ins audited, want the admin's one: %+v", len(es), es)
	}
	d := es[0].Detail
	if d["account"] != "ops@example.com" || d["reason"] != "wrong password" || len(fmt.Sprint(d["client_ip_digest"])) != 32 {
		t.Errorf("audit detail %v", d)
	}
	if strings.Contains(fmt.Sprint(d), addr) || strings.Contains(fmt.Sprint(d), guess) {
		t.Errorf("audit detail shows the address or the password: %v", d)
	}

	b.signIn("ops@example.com")
	p := b.get("/admin/audit?kind=" + dashboard.KindSignInFailed).mustStatus(http.StatusOK)
	if got := rowsText(p.one("audit")); !strings.Contains(got, "admin_sign_in_failed service sign-in form account ops@example.com") {
		t.Errorf("audit page shows %q", got)
	}
}
