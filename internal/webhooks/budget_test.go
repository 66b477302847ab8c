package webhooks_test

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/internal/webhooks"
)

func TestBudgetPercentsReached(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		limit, taken int64
		want         string
	}{
		{"nothing taken", 1000, 0, "[]"},
		{"just under half", 1000, 499, "[]"},
		{"half exactly", 1000, 500, "[50]"},
		{"a limit that does not divide", 3, 2, "[50]"},
		{"four fifths", 1000, 800, "[50 80]"},
		{"all of it", 1000, 1000, "[50 80 100]"},
		{"overdrawn", 1000, 1500, "[50 80 100]"},
		{"a limit of zero", 0, 10, "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := fmt.Sprint(webhooks.BudgetPercentsReached(c.limit, c.taken)); got != c.want {
				t.Errorf("BudgetPercentsReached(%d, %d) = %s, want %s", c.limit, c.taken, got, c.want)
			}
		})
	}
}
