package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/admin"
)

// TestTouchSession: a session keeps the last-seen time it was created with,
// and touching moves it forward, never back.
func TestTouchSession(t *testing.T) {
	t.Parallel()
	s, _ := newAdmins(t)
	ctx := context.Background()
	a, err := s.CreateAdmin(ctx, "ops@example.com", hashA)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	_, token, _ := admin.NewToken()
	if err := s.CreateSession(ctx, admin.Session{TokenHash: token, AdminID: a.ID, ExpiresAt: start.Add(12 * time.Hour), LastSeenAt: start}); err != nil {
		t.Fatal(err)
	}
	seen := func() time.Time {
		t.Helper()
		sess, _, err := s.SessionAdmin(ctx, token, start)
		if err != nil {
			t.Fatal(err)
		}
		return sess.LastSeenAt
	}
	for _, tc := range []struct {
		name   string
		seenAt time.Time
		want   time.Time
	}{
		{"as created", time.Time{}, start},
		{"forward", start.Add(5 * time.Minute), start.Add(5 * time.Minute)},
		{"not back", start.Add(time.Minute), start.Add(5 * time.Minute)},
	} {
		if !tc.seenAt.IsZero() {
			if err := s.TouchSession(ctx, token, tc.seenAt); err != nil {
				t.Fatal(err)
			}
		}
		if got := seen(); !got.Equal(tc.want) {
			t.Errorf("%s: last seen %v, want %v", tc.name, got, tc.want)
		}
	}
	_, unknown, _ := admin.NewToken()
	if err := s.TouchSession(ctx, unknown, start); err != nil {
		t.Errorf("touching an unknown session: %v", err)
	}
}
