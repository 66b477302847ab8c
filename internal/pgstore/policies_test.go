package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// newPolicies returns a policy store on a database of the test's own, the
// pool under it (for arranging rows the API would refuse), and a tenant.
func newPolicies(t *testing.T) (*pgstore.Policies, *pgxpool.Pool, string) {
	t.Helper()
	pool := pgtest.Pool(t)
	return pgstore.NewPolicies(pool), pool, pgtest.Tenant(t, pool, tenant.PlanStarter)
}

func mustParse(t *testing.T, name, body string) policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(body))
	if err != nil {
		t.Fatalf("Parse(%s, %s): %v", name, body, err)
	}
	return p
}

func wantNotFound(t *testing.T, err error, pol, pattern string) {
	t.Helper()
	var nf *policy.NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("got %v, want a *policy.NotFoundError", err)
	}
	if nf.Policy != pol || nf.Pattern != pattern {
		t.Errorf("not found: got policy %q pattern %q, want %q %q", nf.Policy, nf.Pattern, pol, pattern)
	}
}

func TestPolicyRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, tid := newPolicies(t)
	other := pgtest.Tenant(t, pool, tenant.PlanStarter)

	in := mustParse(t, "sign-in", `{"limit":10,"window":"60s","algorithm":"sliding_window","fail_mode":"closed","alert_after":3}`)
	got, err := s.PutPolicy(ctx, tid, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.IsZero() || !got.CreatedAt.Equal(got.UpdatedAt) {
		t.Errorf("new policy: created %v, updated %v", got.CreatedAt, got.UpdatedAt)
	}
	stored := got
	got.CreatedAt, got.UpdatedAt = time.Time{}, time.Time{}
	if got != in {
		t.Errorf("put returned %+v, want %+v", got, in)
	}
	if g, err := s.GetPolicy(ctx, tid, "sign-in"); err != nil || g != stored {
		t.Errorf("get: %+v, %v; want %+v", g, err, stored)
	}

	// Replacing keeps created_at and moves updated_at.
	repl := mustParse(t, "sign-in", `{"limit":20,"window":"month","scope":"global","shadow":true}`)
	got, err = s.PutPolicy(ctx, tid, repl)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(stored.CreatedAt) || !got.UpdatedAt.After(stored.UpdatedAt) {
		t.Errorf("replace: created %v (was %v), updated %v (was %v)", got.CreatedAt, stored.CreatedAt, got.UpdatedAt, stored.UpdatedAt)
	}
	if got.Limit != 20 || got.Window != limit.Month || got.Scope != policy.ScopeGlobal || !got.Shadow ||
		got.Algorithm != limit.FixedWindow || got.FailMode != policy.FailOpen || got.AlertAfter != 0 {
		t.Errorf("replace stored %+v", got)
	}

	for _, w := range []string{"1s", "90s", "15m", "1h", "36h", "7d", "30d"} {
		name := "w-" + w
		if _, err := s.PutPolicy(ctx, tid, mustParse(t, name, `{"limit":1,"window":"`+w+`"}`)); err != nil {
			t.Fatal(err)
		}
		g, err := s.GetPolicy(ctx, tid, name)
		if want, _ := limit.ParseWindow(w); err != nil || g.Window != want {
			t.Errorf("window %s: read back %v, %v", w, g.Window, err)
		}
	}

	list, err := s.ListPolicies(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
	}
	if want := "[sign-in w-15m w-1h w-1s w-30d w-36h w-7d w-90s]"; fmt.Sprint(names) != want {
		t.Errorf("list: got %v, want %s", names, want)
	}

	// Another tenant sees none of it.
	if l, err := s.ListPolicies(ctx, other); err != nil || len(l) != 0 {
		t.Errorf("other tenant's list: %v, %v", l, err)
	}
	_, err = s.GetPolicy(ctx, other, "sign-in")
	wantNotFound(t, err, "sign-in", "")
	wantNotFound(t, s.DeletePolicy(ctx, other, "sign-in"), "sign-in", "")

	if err := s.DeletePolicy(ctx, tid, "sign-in"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetPolicy(ctx, tid, "sign-in")
	wantNotFound(t, err, "sign-in", "")
	wantNotFound(t, s.DeletePolicy(ctx, tid, "sign-in"), "sign-in", "")
}

func TestPolicyUnknownTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, _ := newPolicies(t)
	p := mustParse(t, "p", `{"limit":1,"window":"1m"}`)
	for _, id := range []string{"0b0e3fa4-6bd5-4bd4-a1d5-4f5e5e3c1a00", "not-a-uuid"} {
		if _, err := s.PutPolicy(ctx, id, p); !errors.Is(err, policy.ErrNotFound) {
			t.Errorf("put for tenant %s: got %v, want ErrNotFound", id, err)
		}
	}
	if _, err := s.LoadSet(ctx, "not-a-uuid"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("load for a tenant id that is no UUID: got %v, want ErrNotFound", err)
	}
}

func TestOverrideRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, tid := newPolicies(t)
	if _, err := s.PutPolicy(ctx, tid, mustParse(t, "p", `{"limit":10,"window":"1m"}`)); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	in := []policy.Override{
		{Pattern: "user:1", Limit: 1},
		{Pattern: "203.0.113.*", Limit: 2, ExpiresAt: &exp},
		{Pattern: "a/b*", Limit: 3},
	}
	for _, o := range in {
		got, err := s.PutOverride(ctx, tid, "p", o)
		if err != nil {
			t.Fatal(err)
		}
		if !sameOverride(got, o) {
			t.Errorf("put returned %+v, want %+v", got, o)
		}
	}
	got, err := s.GetOverride(ctx, tid, "p", "203.0.113.*")
	if err != nil || !sameOverride(got, in[1]) {
		t.Errorf("get: %+v, %v", got, err)
	}
	// Replace: the expiry goes away.
	if _, err := s.PutOverride(ctx, tid, "p", policy.Override{Pattern: "203.0.113.*", Limit: 5}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListOverrides(ctx, tid, "p")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(patterns(list)) != "[203.0.113.* a/b* user:1]" || list[0].Limit != 5 || list[0].ExpiresAt != nil {
		t.Errorf("list: %+v", list)
	}

	// Expired overrides are invisible, deletable by nobody, and pruned by the
	// next put.
	if _, err := pool.Exec(ctx, `INSERT INTO policy_overrides (tenant_id, policy, pattern, "limit", expires_at)
		VALUES ($1, 'p', 'old', 9, now() - interval '1 second')`, tid); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetOverride(ctx, tid, "p", "old")
	wantNotFound(t, err, "p", "old")
	if l, _ := s.ListOverrides(ctx, tid, "p"); len(l) != 3 {
		t.Errorf("list shows %d overrides, want 3", len(l))
	}
	wantNotFound(t, s.DeleteOverride(ctx, tid, "p", "old"), "p", "old")
	if _, err := s.PutOverride(ctx, tid, "p", policy.Override{Pattern: "new", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM policy_overrides WHERE pattern = 'old'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("expired override still stored (%d rows, %v)", rows, err)
	}

	// Missing policy and missing override are told apart.
	_, err = s.GetOverride(ctx, tid, "nope", "x")
	wantNotFound(t, err, "nope", "")
	_, err = s.GetOverride(ctx, tid, "p", "x")
	wantNotFound(t, err, "p", "x")
	_, err = s.ListOverrides(ctx, tid, "nope")
	wantNotFound(t, err, "nope", "")
	_, err = s.PutOverride(ctx, tid, "nope", policy.Override{Pattern: "x", Limit: 1})
	wantNotFound(t, err, "nope", "")
	wantNotFound(t, s.DeleteOverride(ctx, tid, "nope", "x"), "nope", "")

	if err := s.DeleteOverride(ctx, tid, "p", "user:1"); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, s.DeleteOverride(ctx, tid, "p", "user:1"), "p", "user:1")

	// Deleting the policy deletes its overrides; a new one of that name starts
	// without any.
	if err := s.DeletePolicy(ctx, tid, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPolicy(ctx, tid, mustParse(t, "p", `{"limit":10,"window":"1m"}`)); err != nil {
		t.Fatal(err)
	}
	if l, err := s.ListOverrides(ctx, tid, "p"); err != nil || len(l) != 0 {
		t.Errorf("overrides outlived their policy: %v, %v", l, err)
	}
}

func TestOverrideOfGlobalPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, tid := newPolicies(t)
	if _, err := s.PutPolicy(ctx, tid, mustParse(t, "g", `{"limit":10,"window":"1m","scope":"global"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutOverride(ctx, tid, "g", policy.Override{Pattern: "*", Limit: 1}); !errors.Is(err, policy.ErrGlobalOverride) {
		t.Errorf("got %v, want ErrGlobalOverride", err)
	}
}

func sameOverride(a, b policy.Override) bool {
	if a.Pattern != b.Pattern || a.Limit != b.Limit || (a.ExpiresAt == nil) != (b.ExpiresAt == nil) {
		return false
	}
	return a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt)
}

func patterns(ovs []policy.Override) []string {
	var ps []string
	for _, o := range ovs {
		ps = append(ps, o.Pattern)
	}
	return ps
}

// TestPolicyCaps fills a tenant to the caps with SQL and checks that one more
// is refused, a replacement is not, and concurrent puts cannot pass the cap
// together.
func TestPolicyCaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, tid := newPolicies(t)
	const short = 10
	if _, err := pool.Exec(ctx, `INSERT INTO policies (tenant_id, name, "limit", "window", algorithm, scope, fail_mode)
		SELECT $1, 'p' || i, 1, '1m', 'fixed_window', 'subject', 'open' FROM generate_series(1, $2::int) AS i`,
		tid, policy.MaxPolicies-short); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 3 * short {
		p := mustParse(t, fmt.Sprintf("new-%d", i), `{"limit":1,"window":"1m"}`)
		wg.Go(func() {
			_, err := s.PutPolicy(ctx, tid, p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, policy.ErrTooManyPolicies):
				refused++
			default:
				t.Errorf("put: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != short || refused != 2*short {
		t.Errorf("%d puts succeeded and %d were refused, want %d and %d", ok, refused, short, 2*short)
	}
	if _, err := s.PutPolicy(ctx, tid, mustParse(t, "p1", `{"limit":2,"window":"1m"}`)); err != nil {
		t.Errorf("replacing at the cap: %v", err)
	}

	if _, err := pool.Exec(ctx, `INSERT INTO policy_overrides (tenant_id, policy, pattern, "limit")
		SELECT $1, 'p1', 's' || i, 1 FROM generate_series(1, $2::int) AS i`, tid, policy.MaxOverrides-1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO policy_overrides (tenant_id, policy, pattern, "limit", expires_at)
		VALUES ($1, 'p1', 'expired', 1, now() - interval '1 minute')`, tid); err != nil {
		t.Fatal(err)
	}
	// The expired one does not count.
	if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: "last", Limit: 1}); err != nil {
		t.Fatalf("the last override below the cap: %v", err)
	}
	if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: "one-more", Limit: 1}); !errors.Is(err, policy.ErrTooManyOverrides) {
		t.Errorf("an override beyond the cap: got %v, want ErrTooManyOverrides", err)
	}
	if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: "s1", Limit: 7}); err != nil {
		t.Errorf("replacing an override at the cap: %v", err)
	}
	// The cap is the tenant's: another policy has no room either.
	if _, err := s.PutOverride(ctx, tid, "p2", policy.Override{Pattern: "elsewhere", Limit: 1}); !errors.Is(err, policy.ErrTooManyOverrides) {
		t.Errorf("an override of another policy beyond the tenant's cap: got %v, want ErrTooManyOverrides", err)
	}
}

// TestPutOverrideBoundsWildcards: a policy holds at most MaxWildcards
// patterns with a "*" (each may be tried on every check), while exact
// subjects stay free up to the tenant's cap, and another policy has room of
// its own.
func TestPutOverrideBoundsWildcards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, tid := newPolicies(t)
	for _, name := range []string{"p1", "p2"} {
		if _, err := s.PutPolicy(ctx, tid, mustParse(t, name, `{"limit":1,"window":"1m"}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range policy.MaxWildcards {
		if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: fmt.Sprintf("*-%d", i), Limit: 1}); err != nil {
			t.Fatalf("wildcard %d: %v", i, err)
		}
	}
	if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: "one-more-*", Limit: 1}); !errors.Is(err, policy.ErrTooManyWildcards) {
		t.Errorf("a wildcard beyond the cap: got %v, want ErrTooManyWildcards", err)
	}
	if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: "*-0", Limit: 9}); err != nil {
		t.Errorf("replacing a wildcard at the cap: %v", err)
	}
	if _, err := s.PutOverride(ctx, tid, "p1", policy.Override{Pattern: "exact-subject", Limit: 1}); err != nil {
		t.Errorf("an exact override at the wildcard cap: %v", err)
	}
	if _, err := s.PutOverride(ctx, tid, "p2", policy.Override{Pattern: "other-*", Limit: 1}); err != nil {
		t.Errorf("a wildcard of another policy: %v", err)
	}
}

func TestLoadSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, tid := newPolicies(t)
	empty, err := s.LoadSet(ctx, tid)
	if err != nil || empty.Len() != 0 {
		t.Fatalf("a tenant without policies: %d policies, %v", empty.Len(), err)
	}
	for _, b := range []struct{ name, body string }{
		{"bare", `{"limit":5,"window":"1m"}`},
		{"ip", `{"limit":10,"window":"1m","algorithm":"token_bucket"}`},
		{"month", `{"limit":100,"window":"month"}`},
	} {
		if _, err := s.PutPolicy(ctx, tid, mustParse(t, b.name, b.body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []policy.Override{{Pattern: "203.0.113.*", Limit: 50}, {Pattern: "203.0.113.7", Limit: 1}, {Pattern: "*", Limit: 20}} {
		if _, err := s.PutOverride(ctx, tid, "ip", o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO policy_overrides (tenant_id, policy, pattern, "limit", expires_at)
		VALUES ($1, 'month', '*', 1, now() - interval '1 second')`, tid); err != nil {
		t.Fatal(err)
	}
	// Another tenant's policies stay out.
	other := pgtest.Tenant(t, pool, tenant.PlanStarter)
	if _, err := s.PutPolicy(ctx, other, mustParse(t, "theirs", `{"limit":1,"window":"1s"}`)); err != nil {
		t.Fatal(err)
	}

	set, err := s.LoadSet(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != 3 {
		t.Errorf("set holds %d policies, want 3", set.Len())
	}
	if _, ok := set.Lookup("theirs"); ok {
		t.Error("another tenant's policy is in the set")
	}
	now := time.Now()
	for _, c := range []struct {
		policy, subject string
		want            int64
	}{
		{"ip", "203.0.113.7", 1},
		{"ip", "203.0.113.8", 50},
		{"ip", "198.51.100.1", 20},
		{"bare", "x", 5},
		{"month", "x", 100}, // its only override expired
	} {
		p, ok := set.Lookup(c.policy)
		if !ok {
			t.Fatalf("set lacks %s", c.policy)
		}
		if got := set.LimitFor(p, c.subject, now); got != c.want {
			t.Errorf("LimitFor(%s, %s) = %d, want %d", c.policy, c.subject, got, c.want)
		}
	}
	if p, _ := set.Lookup("ip"); p.Algorithm != limit.TokenBucket || p.Window != limit.Every(time.Minute) {
		t.Errorf("ip loaded as %+v", p)
	}
}

// TestConcurrencyPolicyRoundTrip stores a concurrency policy, which has no
// window: it reads back the same, alone and in the tenant's Set, and the
// table refuses a window on it (or none on another policy).
func TestConcurrencyPolicyRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, tid := newPolicies(t)
	in := mustParse(t, "jobs", `{"limit":5,"algorithm":"concurrency","scope":"global"}`)
	got, err := s.PutPolicy(ctx, tid, in)
	if err != nil {
		t.Fatal(err)
	}
	got.CreatedAt, got.UpdatedAt = time.Time{}, time.Time{}
	if got != in {
		t.Fatalf("put: got %+v, want %+v", got, in)
	}
	back, err := s.GetPolicy(ctx, tid, "jobs")
	if err != nil || back.Algorithm != limit.Concurrency || back.Window != (limit.Window{}) || back.Limit != 5 {
		t.Fatalf("get: %+v, %v", back, err)
	}
	set, err := s.LoadSet(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := set.Lookup("jobs"); !ok || p.Algorithm != limit.Concurrency {
		t.Fatalf("set: %+v, %v", p, ok)
	}
	for _, stmt := range []string{
		`UPDATE policies SET "window" = '1m' WHERE tenant_id = $1 AND name = 'jobs'`,
		`INSERT INTO policies (tenant_id, name, "limit", "window", algorithm, scope, fail_mode) VALUES ($1, 'x', 1, '', 'fixed_window', 'subject', 'open')`,
	} {
		if _, err := pool.Exec(ctx, stmt, tid); err == nil {
			t.Errorf("%s: accepted", stmt)
		}
	}
}

// TestBudgetPolicyRoundTrip: a policy's unit and on_expiry are kept, read
// back by every read, and the table refuses what Parse refuses.
func TestBudgetPolicyRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, tid := newPolicies(t)
	in := mustParse(t, "llm", `{"limit":100000,"window":"month","unit":"tokens","on_expiry":"release"}`)
	got, err := s.PutPolicy(ctx, tid, in)
	if err != nil {
		t.Fatal(err)
	}
	got.CreatedAt, got.UpdatedAt = time.Time{}, time.Time{}
	if got != in {
		t.Fatalf("put: got %+v, want %+v", got, in)
	}
	set, err := s.LoadSet(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := set.Lookup("llm"); !ok || p.Unit != "tokens" || !p.ReleaseOnExpiry {
		t.Fatalf("set: %+v, %v", p, ok)
	}
	// Replaced without them: back to the defaults.
	if got, err = s.PutPolicy(ctx, tid, mustParse(t, "llm", `{"limit":10,"window":"1h"}`)); err != nil || got.Unit != "" || got.ReleaseOnExpiry {
		t.Fatalf("replaced: %+v, %v", got, err)
	}
	if _, err := s.PutPolicy(ctx, tid, mustParse(t, "jobs", `{"limit":5,"algorithm":"concurrency"}`)); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE policies SET unit = 'Tokens' WHERE tenant_id = $1 AND name = 'llm'`,
		`UPDATE policies SET on_expiry = 'refund' WHERE tenant_id = $1 AND name = 'llm'`,
		`UPDATE policies SET unit = 'jobs' WHERE tenant_id = $1 AND name = 'jobs'`,
		`UPDATE policies SET on_expiry = 'release' WHERE tenant_id = $1 AND name = 'jobs'`,
	} {
		if _, err := pool.Exec(ctx, stmt, tid); err == nil {
			t.Errorf("%s: accepted", stmt)
		}
	}
}
