package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// clock is a settable clock for the member store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func newMembers(t *testing.T) (*pgstore.Members, *pgxpool.Pool, *clock) {
	t.Helper()
	pool := pgtest.Pool(t)
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	return pgstore.NewMembers(pool, c.now), pool, c
}

// signUp signs email up for a tenant named after it and returns the owner,
// the tenant made and the confirm token.
func signUp(t *testing.T, s *pgstore.Members, email string) (console.Member, tenant.Created, string) {
	t.Helper()
	m, c, tok, err := s.SignUp(context.Background(), email, hashA, "tenant of "+email)
	if err != nil {
		t.Fatalf("sign up %s: %v", email, err)
	}
	return m, c, tok
}

// keysOf returns the tenant's keys, live first.
func keysOf(t *testing.T, pool *pgxpool.Pool, tenantID string) (live, test int) {
	t.Helper()
	keys, err := pgstore.NewTenants(pool).Keys(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Test {
			test++
		} else {
			live++
		}
	}
	return live, test
}

func TestMemberSignUp(t *testing.T) {
	t.Parallel()
	s, pool, _ := newMembers(t)
	ctx := context.Background()
	m, c, tok := signUp(t, s, "owner@example.com")
	if m.Role != console.RoleOwner || m.ConfirmedAt != nil || m.TenantID != c.Tenant.ID || m.PasswordHash != hashA || tok == "" {
		t.Fatalf("owner %+v, token %q; want an unconfirmed owner of %s with a token", m, tok, c.Tenant.ID)
	}
	if c.Tenant.Plan != console.StarterPlan || c.Test == "" || c.Live != "" {
		t.Fatalf("tenant on %q, test key %q, live key %q; want starter with a test key only", c.Tenant.Plan, c.Test, c.Live)
	}
	if live, test := keysOf(t, pool, c.Tenant.ID); live != 0 || test != 1 {
		t.Fatalf("stored keys: %d live, %d test; want 0 and 1", live, test)
	}
	k, err := pgstore.NewTenants(pool).KeyByPrefix(ctx, c.TestKey.Prefix)
	if err != nil || !k.Test || k.TenantID != c.Tenant.ID {
		t.Fatalf("test key by prefix: %+v, %v", k, err)
	}
	got, err := s.MemberByEmail(ctx, "  Owner@Example.com ")
	if err != nil || got.ID != m.ID {
		t.Fatalf("by email: %+v, %v", got, err)
	}
}

// TestMemberSignUpEmailTaken: a taken email is ErrEmailTaken and leaves no
// tenant behind.
func TestMemberSignUpEmailTaken(t *testing.T) {
	t.Parallel()
	s, pool, _ := newMembers(t)
	ctx := context.Background()
	signUp(t, s, "owner@example.com")
	if _, _, _, err := s.SignUp(ctx, "owner@example.com", hashA, "second"); !errors.Is(err, console.ErrEmailTaken) {
		t.Fatalf("second sign-up: %v, want ErrEmailTaken", err)
	}
	all, err := pgstore.NewTenants(pool).Tenants(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("tenants after a refused sign-up: %d, %v; want 1", len(all), err)
	}
	if _, _, _, err := s.SignUp(ctx, "x@example.com", hashA, ""); !errors.Is(err, tenant.ErrInvalid) {
		t.Fatalf("empty tenant name: %v, want tenant.ErrInvalid", err)
	}
	if _, _, _, err := s.SignUp(ctx, "x@example.com", "plaintext", "t"); !errors.Is(err, console.ErrInvalid) {
		t.Fatalf("not a hash: %v, want ErrInvalid", err)
	}
}

func TestMemberConfirmOnce(t *testing.T) {
	t.Parallel()
	s, pool, _ := newMembers(t)
	ctx := context.Background()
	m, c, tok := signUp(t, s, "owner@example.com")
	got, live, err := s.Confirm(ctx, tok)
	if err != nil || got.ID != m.ID || got.ConfirmedAt == nil || live == "" {
		t.Fatalf("confirm: %+v, live %q, %v", got, live, err)
	}
	// tg_live_, then the twelve characters of the prefix.
	if !strings.HasPrefix(live, "tg_live_") || len(live) < 20 {
		t.Fatalf("live key %q: want tg_live_…", live)
	}
	k, err := pgstore.NewTenants(pool).KeyByPrefix(ctx, live[8:20])
	if err != nil || k.Test || k.TenantID != c.Tenant.ID {
		t.Fatalf("live key stored: %+v, %v", k, err)
	}
	if _, _, err := s.Confirm(ctx, tok); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("second confirm: %v, want ErrTokenInvalid", err)
	}
	if live, test := keysOf(t, pool, c.Tenant.ID); live != 1 || test != 1 {
		t.Fatalf("keys: %d live, %d test; want 1 and 1", live, test)
	}
}

// TestMemberConfirmResent: of two confirm tokens (the mail sent again),
// the first confirms and makes the live key; the second finds the member
// confirmed and is ErrTokenInvalid, with no second live key.
func TestMemberConfirmResent(t *testing.T) {
	t.Parallel()
	s, pool, _ := newMembers(t)
	ctx := context.Background()
	m, c, first := signUp(t, s, "owner@example.com")
	again, err := s.IssueToken(ctx, m.TenantID, m.ID, console.PurposeConfirm)
	if err != nil {
		t.Fatal(err)
	}
	if _, live, err := s.Confirm(ctx, again); err != nil || live == "" {
		t.Fatalf("confirm with the resent token: %q, %v", live, err)
	}
	if _, live, err := s.Confirm(ctx, first); !errors.Is(err, console.ErrTokenInvalid) || live != "" {
		t.Fatalf("confirm with the first token after: %q, %v; want ErrTokenInvalid", live, err)
	}
	// A developer's confirmation makes no key.
	if _, err := s.Invite(ctx, m.TenantID, "dev@example.com", console.RoleDeveloper); err != nil {
		t.Fatal(err)
	}
	dev, err := s.MemberByEmail(ctx, "dev@example.com")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.IssueToken(ctx, m.TenantID, dev.ID, console.PurposeConfirm)
	if err != nil {
		t.Fatal(err)
	}
	if got, live, err := s.Confirm(ctx, tok); err != nil || live != "" || got.ConfirmedAt == nil {
		t.Fatalf("a developer's confirmation: %+v, %q, %v; want confirmed, no key", got, live, err)
	}
	if live, _ := keysOf(t, pool, c.Tenant.ID); live != 1 {
		t.Fatalf("%d live keys, want 1", live)
	}
}

// TestMemberConfirmRace: two confirmations racing with one token make one
// live key.
func TestMemberConfirmRace(t *testing.T) {
	t.Parallel()
	s, pool, _ := newMembers(t)
	ctx := context.Background()
	_, c, tok := signUp(t, s, "owner@example.com")
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, _, errs[i] = s.Confirm(ctx, tok) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, console.ErrTokenInvalid):
			t.Errorf("confirm: %v", err)
		}
	}
	if live, _ := keysOf(t, pool, c.Tenant.ID); ok != 1 || live != 1 {
		t.Fatalf("%d confirmations succeeded, %d live keys; want 1 and 1", ok, live)
	}
}

func TestMemberTokenExpiredOrOtherPurpose(t *testing.T) {
	t.Parallel()
	s, _, clk := newMembers(t)
	ctx := context.Background()
	m, _, confirm := signUp(t, s, "owner@example.com")
	reset, err := s.IssueToken(ctx, m.TenantID, m.ID, console.PurposeReset)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UseToken(ctx, console.PurposeInvite, reset); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("reset token used as invite: %v, want ErrTokenInvalid", err)
	}
	if _, err := s.UseToken(ctx, console.PurposeReset, confirm); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("confirm token used as reset: %v, want ErrTokenInvalid", err)
	}
	if _, err := s.UseToken(ctx, console.PurposeReset, "not a token"); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("unknown token: %v, want ErrTokenInvalid", err)
	}
	clk.add(console.ResetTTL)
	if _, err := s.UseToken(ctx, console.PurposeReset, reset); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("expired reset token: %v, want ErrTokenInvalid", err)
	}
	// The confirm token lasts longer; the reset one was refused, not spent
	// by a purpose it is not.
	if _, _, err := s.Confirm(ctx, confirm); err != nil {
		t.Fatalf("confirm within its TTL: %v", err)
	}
	clk.add(-console.ResetTTL)
	got, err := s.UseToken(ctx, console.PurposeReset, reset)
	if err != nil || got.ID != m.ID {
		t.Fatalf("reset token within its TTL: %+v, %v", got, err)
	}
	if _, err := s.UseToken(ctx, console.PurposeReset, reset); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("reset token twice: %v, want ErrTokenInvalid", err)
	}
}

func TestMemberSessions(t *testing.T) {
	t.Parallel()
	s, _, clk := newMembers(t)
	ctx := context.Background()
	m, _, _ := signUp(t, s, "owner@example.com")
	a, err := s.CreateSession(ctx, m.TenantID, m.ID, clk.now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateSession(ctx, m.TenantID, m.ID, clk.now().Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	sess, got, err := s.SessionMember(ctx, a)
	if err != nil || got.ID != m.ID || sess.TenantID != m.TenantID || sess.ExpiresAt.IsZero() {
		t.Fatalf("session: %+v %+v, %v", sess, got, err)
	}
	clk.add(time.Hour)
	if _, _, err := s.SessionMember(ctx, a); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("expired session: %v, want ErrNotFound", err)
	}
	if _, _, err := s.SessionMember(ctx, b); err != nil {
		t.Fatalf("live session: %v", err)
	}
	if _, err := s.SetPassword(ctx, m.TenantID, m.ID, hashA); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SessionMember(ctx, b); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("session after a password change: %v, want ErrNotFound", err)
	}
	c, _ := s.CreateSession(ctx, m.TenantID, m.ID, clk.now().Add(time.Hour))
	d, _ := s.CreateSession(ctx, m.TenantID, m.ID, clk.now().Add(time.Hour))
	if err := s.DeleteSession(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SessionMember(ctx, c); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("signed-out session: %v, want ErrNotFound", err)
	}
	if n, err := s.DeleteSessions(ctx, m.TenantID, m.ID); err != nil || n != 1 {
		t.Fatalf("delete sessions: %d, %v; want 1", n, err)
	}
	if _, _, err := s.SessionMember(ctx, d); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("session after delete sessions: %v, want ErrNotFound", err)
	}
}

// TestMemberResetPassword: a reset token sets the password and ends the
// member's sessions, once.
func TestMemberResetPassword(t *testing.T) {
	t.Parallel()
	s, _, clk := newMembers(t)
	ctx := context.Background()
	m, _, _ := signUp(t, s, "owner@example.com")
	sess, _ := s.CreateSession(ctx, m.TenantID, m.ID, clk.now().Add(time.Hour))
	tok, err := s.IssueToken(ctx, m.TenantID, m.ID, console.PurposeReset)
	if err != nil {
		t.Fatal(err)
	}
	const hashB = hashA + "B"
	got, err := s.ResetPassword(ctx, tok, hashB)
	if err != nil || got.PasswordHash != hashB {
		t.Fatalf("reset: %+v, %v", got, err)
	}
	if _, _, err := s.SessionMember(ctx, sess); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("session after a reset: %v, want ErrNotFound", err)
	}
	if _, err := s.ResetPassword(ctx, tok, hashA); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("reset twice: %v, want ErrTokenInvalid", err)
	}
}

func TestMemberInviteAccept(t *testing.T) {
	t.Parallel()
	s, _, c := newMembers(t)
	ctx := context.Background()
	owner, _, _ := signUp(t, s, "owner@example.com")
	tok, err := s.Invite(ctx, owner.TenantID, "dev@example.com", console.RoleDeveloper)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Invite(ctx, owner.TenantID, "owner@example.com", console.RoleDeveloper); !errors.Is(err, console.ErrEmailTaken) {
		t.Fatalf("inviting a member: %v, want ErrEmailTaken", err)
	}
	if _, err := s.Invite(ctx, "00000000-0000-0000-0000-000000000000", "x@example.com", console.RoleDeveloper); !errors.Is(err, console.ErrNotFound) {
		t.Fatalf("inviting to no tenant: %v, want ErrNotFound", err)
	}
	invited, err := s.MemberByEmail(ctx, "dev@example.com")
	if err != nil || invited.PasswordHash != "" || invited.ConfirmedAt != nil || invited.Role != console.RoleDeveloper {
		t.Fatalf("invited: %+v, %v; want a developer with no password, unconfirmed", invited, err)
	}
	// The invitation's page reads the token's member without spending it,
	// however often it is opened; a token of another purpose is none.
	for range 2 {
		if peek, err := s.TokenMember(ctx, console.PurposeInvite, tok); err != nil || peek.ID != invited.ID || peek.Email != "dev@example.com" || peek.TenantID != owner.TenantID {
			t.Fatalf("token member: %+v, %v; want the invited member", peek, err)
		}
	}
	if _, err := s.TokenMember(ctx, console.PurposeReset, tok); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("an invite token read as a reset token: %v, want ErrTokenInvalid", err)
	}
	if _, err := s.TokenMember(ctx, console.PurposeInvite, "unknown"); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("an unknown token: %v, want ErrTokenInvalid", err)
	}
	got, err := s.AcceptInvite(ctx, tok, hashA)
	if err != nil || got.ID != invited.ID || got.PasswordHash != hashA || got.ConfirmedAt == nil || got.TenantID != owner.TenantID {
		t.Fatalf("accept: %+v, %v", got, err)
	}
	if _, err := s.AcceptInvite(ctx, tok, hashA); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("accept twice: %v, want ErrTokenInvalid", err)
	}
	if _, err := s.TokenMember(ctx, console.PurposeInvite, tok); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("a spent token read: %v, want ErrTokenInvalid", err)
	}
	all, err := s.Members(ctx, owner.TenantID)
	if err != nil || len(all) != 2 || all[0].ID != invited.ID || all[1].ID != owner.ID {
		t.Fatalf("members %+v, %v; want dev then owner", all, err)
	}
	// An invitation past its 7 days reads as none.
	late, err := s.Invite(ctx, owner.TenantID, "late@example.com", console.RoleDeveloper)
	if err != nil {
		t.Fatal(err)
	}
	c.add(console.InviteTTL)
	if _, err := s.TokenMember(ctx, console.PurposeInvite, late); !errors.Is(err, console.ErrTokenInvalid) {
		t.Fatalf("an expired token read: %v, want ErrTokenInvalid", err)
	}
}

func TestMemberLastOwner(t *testing.T) {
	t.Parallel()
	s, _, _ := newMembers(t)
	ctx := context.Background()
	owner, _, _ := signUp(t, s, "owner@example.com")
	if err := s.RemoveMember(ctx, owner.TenantID, owner.ID); !errors.Is(err, console.ErrLastOwner) {
		t.Fatalf("removing the only owner: %v, want ErrLastOwner", err)
	}
	// An owner invited but without a password yet is no one to hand over to.
	tok, err := s.Invite(ctx, owner.TenantID, "second@example.com", console.RoleOwner)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMember(ctx, owner.TenantID, owner.ID); !errors.Is(err, console.ErrLastOwner) {
		t.Fatalf("removing the owner beside a pending invitation: %v, want ErrLastOwner", err)
	}
	if _, err := s.AcceptInvite(ctx, tok, hashA); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMember(ctx, owner.TenantID, owner.ID); err != nil {
		t.Fatalf("removing an owner beside another: %v", err)
	}
}

// TestMemberLastOwnerRace: in each of many tenants, two owners remove each
// other at once; in each, one removal succeeds and the other is
// ErrLastOwner. (Without the owners' lock both would see the other and
// both go.)
func TestMemberLastOwnerRace(t *testing.T) {
	t.Parallel()
	s, _, _ := newMembers(t)
	ctx := context.Background()
	const tenants = 16
	pairs := make([][2]console.Member, tenants)
	for i := range pairs {
		owner, _, _ := signUp(t, s, fmt.Sprintf("owner%d@example.com", i))
		tok, err := s.Invite(ctx, owner.TenantID, fmt.Sprintf("second%d@example.com", i), console.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.AcceptInvite(ctx, tok, hashA)
		if err != nil {
			t.Fatal(err)
		}
		pairs[i] = [2]console.Member{owner, second}
	}
	errs := make([][2]error, tenants)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range pairs {
		for j, m := range p {
			wg.Go(func() {
				<-start
				errs[i][j] = s.RemoveMember(ctx, m.TenantID, m.ID)
			})
		}
	}
	close(start)
	wg.Wait()
	for i, e := range errs {
		if (e[0] == nil) == (e[1] == nil) {
			t.Errorf("tenant %d: racing removals: %v, %v; want one removal and one ErrLastOwner", i, e[0], e[1])
			continue
		}
		for _, err := range e {
			if err != nil && !errors.Is(err, console.ErrLastOwner) {
				t.Errorf("tenant %d: racing removal: %v, want ErrLastOwner", i, err)
			}
		}
		if all, err := s.Members(ctx, pairs[i][0].TenantID); err != nil || len(all) != 1 {
			t.Errorf("tenant %d: members after the race: %d, %v; want one owner", i, len(all), err)
		}
	}
}

// TestMemberOtherTenant: a member of tenant A is neither read, signed in,
// given a token, changed nor removed through tenant B's id.
func TestMemberOtherTenant(t *testing.T) {
	t.Parallel()
	s, _, clk := newMembers(t)
	ctx := context.Background()
	a, _, _ := signUp(t, s, "a@example.com")
	b, _, _ := signUp(t, s, "b@example.com")
	tok, err := s.Invite(ctx, a.TenantID, "dev@example.com", console.RoleDeveloper)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := s.AcceptInvite(ctx, tok, hashA)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, a.TenantID, dev.ID, clk.now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"read":   func() error { _, err := s.MemberByID(ctx, b.TenantID, dev.ID); return err }(),
		"remove": s.RemoveMember(ctx, b.TenantID, dev.ID),
		"set password": func() error {
			_, err := s.SetPassword(ctx, b.TenantID, dev.ID, hashA+"X")
			return err
		}(),
		"session": func() error {
			_, err := s.CreateSession(ctx, b.TenantID, dev.ID, clk.now().Add(time.Hour))
			return err
		}(),
		"token": func() error {
			_, err := s.IssueToken(ctx, b.TenantID, dev.ID, console.PurposeReset)
			return err
		}(),
		"not an id": func() error { _, err := s.MemberByID(ctx, "tenant", dev.ID); return err }(),
	} {
		if !errors.Is(err, console.ErrNotFound) {
			t.Errorf("%s through another tenant: %v, want ErrNotFound", name, err)
		}
	}
	if n, err := s.DeleteSessions(ctx, b.TenantID, dev.ID); err != nil || n != 0 {
		t.Errorf("delete sessions through another tenant: %d, %v; want 0", n, err)
	}
	if all, err := s.Members(ctx, b.TenantID); err != nil || len(all) != 1 || all[0].ID != b.ID {
		t.Errorf("tenant B's members: %+v, %v; want B's owner only", all, err)
	}
	got, err := s.MemberByID(ctx, a.TenantID, dev.ID)
	if err != nil || got.PasswordHash != hashA {
		t.Fatalf("dev through tenant A: %+v, %v; want unchanged", got, err)
	}
	if _, _, err := s.SessionMember(ctx, sess); err != nil {
		t.Fatalf("dev's session: %v", err)
	}
	if err := s.RemoveMember(ctx, a.TenantID, dev.ID); err != nil {
		t.Fatalf("remove through tenant A: %v", err)
	}
}
