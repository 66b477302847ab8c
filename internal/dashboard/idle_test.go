package dashboard_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admin"
	"github.com/tollgate/tollgate/internal/dashboard"
)

// clock is a settable time for the dashboard.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestIdleTimeout: a session ends after 30 minutes without a request,
// each request extends it, and the stored last-seen time is written at most
// once a minute.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now().UTC().Truncate(time.Second)}
	e := newEnv(t, func(c *dashboard.Config) { c.Now = clk.now })
	e.admin("ops@example.com")
	b := e.browser()
	b.signIn("ops@example.com")
	token := b.cookie("tg_admin").Value
	lastSeen := func() time.Time {
		t.Helper()
		s, _, err := e.admins.SessionAdmin(context.Background(), admin.HashToken(token), clk.now())
		if err != nil {
			t.Fatal(err)
		}
		return s.LastSeenAt
	}
	signedIn := func(step string, want bool) {
		t.Helper()
		got := b.get("/admin/plans").status == http.StatusOK
		if got != want {
			t.Fatalf("%s: signed in %v, want %v", step, got, want)
		}
	}

	signedIn("just signed in", true)
	signIn := lastSeen()
	clk.advance(30 * time.Second)
	signedIn("30 s later", true)
	if got := lastSeen(); !got.Equal(signIn) {
		t.Errorf("last seen written %v after 30 s, want no write (still %v)", got, signIn)
	}
	// Busy for longer than the idle timeout, never idle for that long.
	for i := range 3 {
		clk.advance(25 * time.Minute)
		signedIn("busy", true)
		if got, want := lastSeen(), clk.now(); !got.Equal(want) {
			t.Errorf("request %d: last seen %v, want %v", i, got, want)
		}
	}
	clk.advance(30 * time.Minute)
	signedIn("after 30 idle minutes", false)
	// The session is gone, not just refused.
	if _, _, err := e.admins.SessionAdmin(context.Background(), admin.HashToken(token), clk.now().Add(-time.Hour)); err == nil {
		t.Error("the idle session's row is still there")
	}
}
