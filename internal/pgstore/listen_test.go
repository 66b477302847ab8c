package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

type listener func(ctx context.Context, dsn string, log *slog.Logger, onChange func(kind, id string), onReconnect func()) error

// events runs listen on dsn until the test ends and returns its
// notifications ("kind:id") and its (re)connections.
func events(t *testing.T, listen listener, dsn string, log *slog.Logger) (changes <-chan string, connects <-chan struct{}) {
	t.Helper()
	ch := make(chan string, 100)
	co := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- listen(ctx, dsn, log,
			func(kind, id string) { ch <- kind + ":" + id },
			func() { co <- struct{}{} })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen returned %v when its context ended, want nil", err)
		}
	})
	return ch, co
}

func waitConnect(t *testing.T, co <-chan struct{}) {
	t.Helper()
	select {
	case <-co:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not (re)connect within 10 s")
	}
}

// expect reads notifications until it has seen every one of want, in any
// order, failing on anything else.
func expect(t *testing.T, ch <-chan string, want ...string) {
	t.Helper()
	left := map[string]bool{}
	for _, w := range want {
		left[w] = true
	}
	for len(left) > 0 {
		select {
		case got := <-ch:
			if !left[got] {
				t.Fatalf("notification %q, want one of %v", got, left)
			}
			delete(left, got)
		case <-time.After(5 * time.Second):
			t.Fatalf("no notification within 5 s; still waiting for %v", left)
		}
	}
}

func exec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

func TestChangeNotifications(t *testing.T) {
	t.Parallel()
	s, dsn := newStore(t)
	ctx := context.Background()
	ch, co := events(t, pgstore.Listen, dsn, slog.New(slog.DiscardHandler))
	waitConnect(t, co)

	_, k := newKey(t, false)
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro, k)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "tenant:"+acme.ID, "key:"+k.Prefix)

	if _, err := s.SetTenantLimits(ctx, acme.ID, tenant.TenantLimits{RateLimitPerMinute: 10}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "tenant:"+acme.ID)

	// Recording use is not a change anyone caches: silent.
	if err := s.TouchKeys(ctx, map[string]time.Time{k.ID: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPlanPrice(ctx, "pro", "price_pro"); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "plan:pro")

	if _, err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "key:"+k.Prefix)

	if _, err := s.SetPlanLimits(ctx, "starter", tenant.PlanLimits{IPPerMinute: ptr(700)}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "plan:starter")

	exec(t, dsn, `INSERT INTO policies (tenant_id, name, "limit", "window", algorithm, scope, fail_mode)
		VALUES ($1, 'sign-in-ip', 10, '1m', 'fixed_window', 'subject', 'open')`, acme.ID)
	expect(t, ch, "policy:"+acme.ID)
	exec(t, dsn, `INSERT INTO policy_overrides (tenant_id, policy, pattern, "limit") VALUES ($1, 'sign-in-ip', '203.0.113.*', 20)`, acme.ID)
	expect(t, ch, "policy:"+acme.ID)

	// A deleted tenant takes its keys and policies along; every cache hears.
	exec(t, dsn, `DELETE FROM tenants WHERE id = $1`, acme.ID)
	expect(t, ch, "tenant:"+acme.ID, "key:"+k.Prefix, "policy:"+acme.ID)
	select {
	case got := <-ch:
		t.Fatalf("unexpected notification %q", got)
	default:
	}
}

// logged is a slog.Handler that passes on the messages logged.
type logged chan string

func (l logged) Enabled(context.Context, slog.Level) bool { return true }
func (l logged) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}
func (l logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logged) WithGroup(string) slog.Handler      { return l }

func TestListenReconnects(t *testing.T) {
	t.Parallel()
	s, dsn := newStore(t)
	ctx := context.Background()
	proxied, proxy := pgtest.Proxied(t, dsn)
	logs := make(logged, 100)
	ch, co := events(t, pgstore.ListenQuick, proxied, slog.New(logs))
	waitConnect(t, co)

	for _, fault := range []struct {
		name  string
		apply func()
	}{{"server gone", proxy.Cut}, {"server silent", proxy.Stall}} {
		for len(logs) > 0 {
			<-logs
		}
		fault.apply()
		// Changes made while the listener is away are lost to it: it
		// must say so by reconnecting, so that its caller drops caches.
		if _, err := s.SetPlanLimits(ctx, "starter", tenant.PlanLimits{IPPerMinute: ptr(601)}); err != nil {
			t.Fatal(err)
		}
		// Noticed without help: a silent server by the idle check.
		for msg := ""; msg != "change listener disconnected"; {
			select {
			case msg = <-logs:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the listener did not notice within 5 s", fault.name)
			}
		}
		if err := proxy.Restore(); err != nil {
			t.Fatal(err)
		}
		waitConnect(t, co)
		for len(ch) > 0 {
			<-ch
		}
		if _, err := s.SetPlanLimits(ctx, "pro", tenant.PlanLimits{IPPerMinute: ptr(60001)}); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, "plan:pro")
	}
}

func TestListenRefusesBadURL(t *testing.T) {
	t.Parallel()
	err := pgstore.Listen(context.Background(), "postgres://user:secret@host:notaport/db", slog.New(slog.DiscardHandler), func(string, string) {}, func() {})
	if err == nil {
		t.Fatal("no error for a bad URL")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("got %q: want an error that does not show the password", err)
	}
}

// instance is one Tollgate instance's Directory, kept current by its own
// listener, as serve wires them.
func instance(t *testing.T, s tenant.Store, dsn string) *tenant.Directory {
	t.Helper()
	d := tenant.NewDirectory(tenant.DirectoryConfig{Store: s, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan struct{}, 10)
	done := make(chan error, 2)
	go func() {
		done <- pgstore.Listen(ctx, dsn, slog.New(slog.DiscardHandler), d.Invalidate, func() {
			d.InvalidateAll()
			connected <- struct{}{}
		})
	}()
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	waitConnect(t, connected)
	return d
}

// within polls ok until it holds and fails unless that took less than d.
func within(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	took := eventually.True(t, d, what, ok)
	t.Logf("%s: seen after %v", what, took.Round(time.Millisecond))
}

func TestChangesReachEveryInstanceWithinASecond(t *testing.T) {
	t.Parallel()
	s, dsn := newStore(t)
	ctx := context.Background()
	raw, k := newKey(t, false)
	acme, err := s.CreateTenant(ctx, "Acme", tenant.PlanPro, k)
	if err != nil {
		t.Fatal(err)
	}
	a, b := instance(t, s, dsn), instance(t, s, dsn)
	for _, d := range []*tenant.Directory{a, b} {
		// Warm: from here on only a notification can change the answers
		// (the safety TTL is 30 s).
		if _, _, err := d.Authenticate(ctx, raw); err != nil {
			t.Fatal(err)
		}
		if p, err := d.Plan(ctx, "starter"); err != nil || p.IPPerMinute != 600 {
			t.Fatalf("starter: %+v, %v", p, err)
		}
		if got := d.MaxIPPerMinute(ctx); got != 600_000 {
			t.Fatalf("MaxIPPerMinute %d, want 600000", got)
		}
	}

	if _, err := s.SetTenantLimits(ctx, acme.ID, tenant.TenantLimits{RateLimitPerMinute: 77}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "tenant limit on the other instance", func() bool {
		_, tn, err := b.Authenticate(ctx, raw)
		return err == nil && tn.RateLimitPerMinute == 77
	})

	if _, err := s.SetPlanLimits(ctx, "starter", tenant.PlanLimits{IPPerMinute: ptr(1234)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPlanLimits(ctx, "enterprise_dedicated", tenant.PlanLimits{IPPerMinute: ptr(700_000)}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "plan change on the other instance", func() bool {
		p, err := b.Plan(ctx, "starter")
		return err == nil && p.IPPerMinute == 1234 && b.MaxIPPerMinute(ctx) == 700_000
	})

	// Revoked through the store, as `tollgate keys revoke` does.
	if _, err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "revocation on the other instance", func() bool {
		_, _, err := b.Authenticate(ctx, raw)
		return errors.Is(err, tenant.ErrUnauthorized)
	})
	within(t, time.Second, "revocation on the first instance", func() bool {
		_, _, err := a.Authenticate(ctx, raw)
		return errors.Is(err, tenant.ErrUnauthorized)
	})
}
