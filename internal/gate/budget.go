package gate

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
)

// Budget is where one budget of a tenant stands for its current window
// (issue 40): what its counter counts, split into what reservations hold
// and the rest.
type Budget struct {
	Policy string
	Unit   string
	// Subject is the subject whose counter this is; "" for a policy of
	// scope global.
	Subject string
	// Limit is the budget's limit for the subject, after overrides.
	Limit int64
	// Spent is what was charged and settled: the counter's count less
	// Reserved, never below zero.
	Spent int64
	// Reserved is what live reservations hold (counter.Reserver's
	// ReservedSums).
	Reserved int64
	// Left is Limit less Spent and Reserved: what the next reservation may
	// take. It is never below zero: a counter asked without counting
	// answers what is left, not how far past its limit it is.
	Left    int64
	ResetAt time.Time
}

// Budgets returns where each of the named policies of a tenant that is a
// budget (policy.Policy.Budget) stands now, live keys' (not the
// sandbox's), in the order named: a policy of scope global for its one
// counter, a policy of scope subject for subject's (and not at all when
// subject is ""). A name that is no budget, or no policy, is left out. It
// asks the store twice per counter.MaxItems budgets, counting nothing; the
// two answers are read one after the other, so a reservation made or
// settled between them may show in one and not the other. Errors wrap
// ErrUnavailable (the policies or the store could not be read) or are a
// *policy.FieldError for a malformed subject.
func (g *Gate) Budgets(ctx context.Context, tenantID string, names []string, subject string) ([]Budget, error) {
	set, err := g.cfg.Policies.For(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("%w: policies of tenant %s: %w", ErrUnavailable, tenantID, err)
	}
	now := g.cfg.Now()
	var out []Budget
	var items []counter.Item
	for _, name := range names {
		p, ok := set.Lookup(name)
		if !ok || !p.Budget() || (p.Scope != policy.ScopeGlobal && subject == "") {
			continue
		}
		b := Budget{Policy: p.Name, Unit: p.Unit, Limit: p.Limit}
		if p.Scope != policy.ScopeGlobal {
			if reason := subjectFault(p, subject); reason != "" {
				return nil, &policy.FieldError{Field: "subject", Reason: reason}
			}
			b.Subject, b.Limit = subject, set.LimitFor(p, subject, now)
		}
		b.Limit = min(b.Limit, limit.MaxLimit)
		out = append(out, b)
		key := string(g.appendPolicyKey(nil, tenantID, false, p, subject))
		items = append(items, counter.Item{Key: key, Algorithm: p.Algorithm, Limit: b.Limit, Window: p.Window, Cost: 1})
	}
	for done := 0; done < len(items); {
		chunk := items[done:min(len(items), done+counter.MaxItems)]
		if err := g.budgetChunk(ctx, tenantID, chunk, out[done:done+len(chunk)]); err != nil {
			return nil, err
		}
		done += len(chunk)
	}
	return out, nil
}

// budgetChunk fills out, one Budget per item, from a peek of items and
// their reserved sums.
func (g *Gate) budgetChunk(ctx context.Context, tenantID string, items []counter.Item, out []Budget) error {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	var res counter.Result
	var reserved []int64
	err := g.storeCall(ctx, opCheck, func() (err error) {
		res, err = g.cfg.Store.Check(ctx, counter.Request{Mode: counter.Peek, Group: tenantID, Items: items})
		return err
	})
	if err == nil {
		err = g.storeCall(ctx, opHeld, func() (err error) {
			reserved, err = g.cfg.Store.ReservedSums(ctx, tenantID, keys, time.Time{})
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("budgets of tenant %s: %w", tenantID, err)
	}
	for i, d := range res.Decisions {
		// The counter counts the spent and the reserved alike; a live
		// reservation charged in a window that has ended no longer counts
		// in this one, hence the floor.
		out[i].Reserved, out[i].Left, out[i].ResetAt = reserved[i], d.Remaining, d.ResetAt
		out[i].Spent = max(0, out[i].Limit-d.Remaining-reserved[i])
	}
	return nil
}
