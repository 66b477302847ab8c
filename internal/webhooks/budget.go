package webhooks

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// BudgetPercents are the shares of a budget's window that send
// budget.threshold, once each per budget and window.
var BudgetPercents = []int{50, 80, 100}

// budgetSeenMax bounds the thresholds a Service remembers having written:
// past it, it forgets them all, and the store's idempotency keys still
// write each event once.
const budgetSeenMax = 100_000

// BudgetLevel is how much of one budget's window is taken (issue 40), as
// a reservation or a settlement of it left it: its live keys' counter.
type BudgetLevel struct {
	TenantID string
	Policy   string
	// SubjectDigest is the counter's subject part: a digest of the
	// subject (the raw subject is never stored), or "*" for a policy of
	// scope global.
	SubjectDigest string
	Unit          string
	// Limit is the budget's limit and Taken what its window counts, the
	// spent and the reserved alike (past Limit when overdrawn).
	Limit, Taken int64
	// WindowStart and WindowEnd bound the window the thresholds are
	// counted in: a threshold is sent once in each.
	WindowStart, WindowEnd time.Time
}

// Key is the idempotency key of l's event at percent.
func (l BudgetLevel) Key(percent int) string {
	return EventBudgetThreshold + ":" + l.TenantID + ":" + l.Policy + ":" + l.SubjectDigest + ":" +
		strconv.FormatInt(l.WindowStart.UnixMicro(), 10) + ":" + strconv.Itoa(percent)
}

// BudgetPercentsReached returns the BudgetPercents that taken reaches of
// limit, in order; none for a limit of 0.
func BudgetPercentsReached(limit, taken int64) []int {
	var out []int
	for _, p := range BudgetPercents {
		if limit > 0 && taken*100 >= limit*int64(p) {
			out = append(out, p)
		}
	}
	return out
}

// BudgetLevel writes budget.threshold for each of BudgetPercents that l
// reaches, once per budget, window and percent across every instance (the
// store's idempotency key). It remembers what it wrote, so that the
// reservations after a threshold cost the database nothing; one that
// failed is tried again at the next level reported. Safe for concurrent
// use. Errors wrap ErrUnavailable.
func (s *Service) BudgetLevel(ctx context.Context, l BudgetLevel) error {
	for _, p := range BudgetPercentsReached(l.Limit, l.Taken) {
		key := l.Key(p)
		s.budgetMu.Lock()
		_, seen := s.budgetSeen[key]
		s.budgetMu.Unlock()
		if seen {
			continue
		}
		if _, err := s.Store.EmitBudgetThreshold(ctx, l, p); err != nil {
			return fmt.Errorf("budget threshold %d%% of %s: %w", p, l.Policy, err)
		}
		s.budgetMu.Lock()
		if s.budgetSeen == nil || len(s.budgetSeen) >= budgetSeenMax {
			s.budgetSeen = map[string]struct{}{}
		}
		s.budgetSeen[key] = struct{}{}
		s.budgetMu.Unlock()
	}
	return nil
}
