package console_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/console"
)

// TestConsolePurposeTTL: each purpose's token lasts its own time, and a
// purpose the package does not know gets the shortest.
func TestConsolePurposeTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		purpose console.Purpose
		want    time.Duration
	}{
		{console.PurposeConfirm, 48 * time.Hour},
		{console.PurposeReset, time.Hour},
		{console.PurposeInvite, 7 * 24 * time.Hour},
		{"unknown", time.Hour},
	} {
		t.Run(string(tc.purpose), func(t *testing.T) {
			t.Parallel()
			if got := tc.purpose.TTL(); got != tc.want {
				t.Errorf("TTL %v, want %v", got, tc.want)
			}
		})
	}
}
