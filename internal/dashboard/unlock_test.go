package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/dashboard"
	"github.com/tollgate/tollgate/internal/gate"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
)

// TestOperatorUnlocksASubject: the tenant page unlocks a subject, as
// DELETE /v1/policies/{name}/subjects/{subject} does with the tenant's
// key: through a real gate, the subject's counter of the policy (its
// leases, for a concurrency policy) is cleared, live or the sandbox's as
// asked, and its next check is allowed while other subjects' and the other
// mode's counters stay. The reset is audited with the admin, the counter's
// key and never the subject. Policies that count no subject are not
// offered; mistakes are answered on the form in the gate's words.
func TestOperatorUnlocksASubject(t *testing.T) {
	t.Parallel()
	counters := memory.New(memory.Config{})
	t.Cleanup(func() { counters.Close() })
	// The gate needs the env's database, and the env the gate.
	late := &lateGate{}
	e := newEnv(t, func(c *dashboard.Config) { c.Counters = late })
	e.admin("ops@example.com")
	ctx := context.Background()
	raw, live, _ := tenant.NewKey(false)
	rawTest, test, _ := tenant.NewKey(true)
	acme, err := e.tenants.CreateTenant(ctx, "Acme", tenant.PlanPro, live, test)
	if err != nil {
		t.Fatal(err)
	}
	policies := pgstore.NewPolicies(e.pool)
	for name, body := range map[string]string{
		"sign-in":    `{"limit":2,"window":"1h"}`,
		"jobs":       `{"limit":1,"algorithm":"concurrency"}`,
		"global-cap": `{"limit":5,"window":"1h","scope":"global"}`,
	} {
		p, err := policy.Parse(name, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policies.PutPolicy(ctx, acme.ID, p); err != nil {
			t.Fatal(err)
		}
	}
	g := e.gateOn(counters)
	late.g = g
	allowed := func(bearer, subject string) bool {
		t.Helper()
		v, err := g.Admit(ctx, gate.Request{Route: "check", Bearer: bearer, Check: &gate.Check{Items: []gate.Item{{Policy: "sign-in", Subject: subject, Cost: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		return v.Allowed
	}
	lease := func(subject string) bool {
		t.Helper()
		v, err := g.Acquire(ctx, gate.Request{Route: "leases", Bearer: raw}, gate.Lease{Policy: "jobs", Subject: subject, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return v.Allowed
	}
	const locked = "203.0.113.7"
	for _, bearer := range []string{raw, rawTest} {
		for i := range 3 {
			if got := allowed(bearer, locked); got != (i < 2) {
				t.Fatalf("check %d: allowed %t", i+1, got)
			}
		}
	}
	allowed(raw, "bystander")
	allowed(raw, "bystander")
	if !lease("worker-1") || lease("worker-1") {
		t.Fatal("jobs: want one lease of worker-1, then a refusal")
	}

	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	page0 := b.get(tp).mustStatus(http.StatusOK)
	assertLabelled(t, page0)
	form := page0.one("unlock-form")
	var offered []string
	for _, o := range find(form, func(n *html.Node) bool { return n.Data == "option" && attr(n.Parent, "name") == "policy" }) {
		offered = append(offered, attr(o, "value"))
	}
	if !slices.Equal(offered, []string{"jobs", "sign-in"}) {
		t.Errorf("policies offered %v, want the two that count subjects", offered)
	}
	action := attr(form, "action")
	path, _, _ := strings.Cut(action, "#")
	csrf := page0.inputValue("csrf")
	if r := b.post(path, url.Values{"policy": {"sign-in"}, "subject": {locked}, "mode": {"live"}}); r.status != http.StatusForbidden {
		t.Errorf("without the form's token: %d, want 403", r.status)
	}
	for _, c := range []struct {
		form       url.Values
		field, err string
	}{
		{url.Values{"policy": {"nope"}, "subject": {locked}, "mode": {"live"}}, "policy", `Not unlocked: policy "nope" not found.`},
		{url.Values{"policy": {"sign-in"}, "subject": {""}, "mode": {"live"}}, "subject", "Not unlocked: subject required for a policy of scope subject."},
		{url.Values{"policy": {"global-cap"}, "subject": {locked}, "mode": {"live"}}, "subject", `Not unlocked: subject policy "global-cap" has scope "global": it counts no subject, so it has no subject's counter to reset.`},
	} {
		c.form.Set("csrf", csrf)
		p := b.post(path, c.form)
		assertLandsOnForm(t, c.form.Encode(), p, "unlock-error", c.field)
		if got := p.text("unlock-error"); got != c.err {
			t.Errorf("%s: error %q, want %q", c.form.Encode(), got, c.err)
		}
		if got := find(p.one("unlock-form"), func(n *html.Node) bool { return attr(n, "name") == "subject" }); attr(got[0], "value") != c.form.Get("subject") {
			t.Errorf("%s: the subject shows %q, want it as typed", c.form.Encode(), attr(got[0], "value"))
		}
	}
	if allowed(raw, locked) {
		t.Fatal("a refused form unlocked the subject")
	}

	// Live: the subject's next live check is allowed; the sandbox's
	// counter and the bystander's stay.
	p := b.post(path, url.Values{"csrf": {csrf}, "policy": {"sign-in"}, "subject": {locked}, "mode": {"live"}}).mustStatus(http.StatusSeeOther)
	if after := b.get(p.header.Get("Location")).mustStatus(http.StatusOK); !strings.Contains(after.text("flash"), "unlocked") {
		t.Errorf("flash %q", after.text("flash"))
	}
	if !allowed(raw, locked) {
		t.Error("after unlocking, the subject's live check is refused")
	}
	if allowed(rawTest, locked) {
		t.Error("unlocking the live counter unlocked the sandbox's")
	}
	if allowed(raw, "bystander") {
		t.Error("unlocking one subject unlocked another")
	}
	b.post(path, url.Values{"csrf": {csrf}, "policy": {"sign-in"}, "subject": {locked}, "mode": {"test"}}).mustStatus(http.StatusSeeOther)
	if !allowed(rawTest, locked) {
		t.Error("after unlocking the sandbox, the subject's test check is refused")
	}
	// A concurrency policy: the subject's leases are dropped.
	b.post(path, url.Values{"csrf": {csrf}, "policy": {"jobs"}, "subject": {"worker-1"}, "mode": {"live"}}).mustStatus(http.StatusSeeOther)
	if !lease("worker-1") {
		t.Error("after unlocking, worker-1 gets no lease")
	}

	es, err := e.audit.List(ctx, audit.Filter{TenantID: acme.ID, Kind: audit.KindCounterReset})
	if err != nil || len(es) != 3 {
		t.Fatalf("audited %d resets (%v), want 3", len(es), err)
	}
	for i, want := range []struct {
		policy  string
		sandbox bool
	}{{"jobs", false}, {"sign-in", true}, {"sign-in", false}} {
		en := es[i]
		key, _ := en.Detail["subject_key"].(string)
		if en.Actor != "ops@example.com" || en.Detail["policy"] != want.policy || en.Detail["sandbox"] != want.sandbox || key == "" {
			t.Errorf("audit entry %d: %+v, want %s (sandbox %t) by ops@example.com with the counter's key", i, en, want.policy, want.sandbox)
		}
		for _, v := range en.Detail {
			if s, _ := v.(string); strings.Contains(s, locked) || strings.Contains(s, "worker-1") {
				t.Errorf("audit entry %d holds the subject: %+v", i, en.Detail)
			}
		}
	}
}

// TestUnlockWithoutCounters: a dashboard started without the counter store
// says it cannot unlock, and a post is refused, never answered as done.
func TestUnlockWithoutCounters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.admin("ops@example.com")
	acme, _ := e.tenantWith("Acme", tenant.PlanPro)
	b := e.browser()
	b.signIn("ops@example.com")
	tp := "/admin/tenants/" + acme.ID
	p := b.get(tp).mustStatus(http.StatusOK)
	if p.text("unlock-unavailable") == "" || len(p.all("unlock-form")) != 0 {
		t.Errorf("without counters: note %q, %d forms", p.text("unlock-unavailable"), len(p.all("unlock-form")))
	}
	b.post(tp+"/subjects/reset", url.Values{"csrf": {p.inputValue("csrf")}, "policy": {"sign-in"}, "subject": {"x"}}).mustStatus(http.StatusNotFound)
}

// gate is a real gate on the env's database, counting in a memory store of
// its own.
func (e *env) gate() *gate.Gate {
	e.t.Helper()
	counters := memory.New(memory.Config{})
	e.t.Cleanup(func() { counters.Close() })
	return e.gateOn(counters)
}

// gateOn is a real gate on the env's database, counting in counters.
func (e *env) gateOn(counters *memory.Store) *gate.Gate {
	e.t.Helper()
	local := memory.New(memory.Config{})
	e.t.Cleanup(func() { local.Close() })
	g, err := gate.New(gate.Config{
		Store: counters, Local: local, Tenants: tenant.NewDirectory(tenant.DirectoryConfig{Store: e.tenants, Logger: slog.New(slog.DiscardHandler)}),
		Policies: policy.NewCatalog(pgstore.NewPolicies(e.pool), policy.CatalogConfig{}), Pepper: []byte("test pepper"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}
