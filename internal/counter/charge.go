package counter

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// Charger counts usage that is known only once the work is done (Envoy's
// apply_on_stream_done with the response's hits_addend, a check of mode
// "charge"): the usage happened already, so it is counted whatever the
// limit says, and refusing it would only let it go uncounted.
type Charger interface {
	// Charge adds each item's Cost to its counter, in order, past its
	// limit if need be, as a settlement's excess is (limit.Adjust with
	// delta Cost), in one atomic step: it never refuses. A counter pushed
	// past its limit is overdrawn, and Check and Reserve refuse it until
	// that much has rolled out or refilled. Advisory is ignored (a shadow
	// policy's usage is counted as well). Items[i] of the answer is item
	// i's counter once the whole charge is counted. Errors wrap ErrInvalid
	// (ValidateCharge) or ErrUnavailable.
	Charge(ctx context.Context, req Request) (Charged, error)
}

// Charged is what a Charge left.
type Charged struct {
	// Items[i] is req.Items[i]'s counter once the charge is counted: its
	// Amount is the item's Cost, its Overdrawn how far past its limit the
	// counter is.
	Items []SettledItem
	// Now is the store clock reading the charge was counted at.
	Now time.Time
}

// ValidateCharge checks a charge's request: a valid request (Validate) in
// mode Consume without ceilings, which are Tollgate's own and decided
// before it. Its errors wrap ErrInvalid.
func ValidateCharge(req Request) error {
	if req.Mode != Consume || req.Ceilings != 0 {
		return fmt.Errorf("charge in mode %d with %d ceilings: must consume, without ceilings: %w", req.Mode, req.Ceilings, ErrInvalid)
	}
	return Validate(req)
}

// ChargedOf answers a charge of req whose items left their counters in
// after (after[i] the state once item i is counted) at instant now: each
// item reads the state of the last item on its key.
func ChargedOf(req Request, after []limit.State, now time.Time) Charged {
	out := Charged{Items: make([]SettledItem, len(req.Items)), Now: now}
	for i, it := range req.Items {
		st := after[i]
		for j := len(req.Items) - 1; j > i; j-- {
			if req.Items[j].Key == it.Key {
				st = after[j]
				break
			}
		}
		c := Charge{Key: it.Key, Algorithm: it.Algorithm, Limit: it.Limit, Window: it.Window, Amount: it.Cost}
		out.Items[i] = c.Settled(st, now)
	}
	return out
}

// Decision is s as a check's decision describes a counter: Allowed when it
// is within its limit (not overdrawn), its Remaining and ResetAt.
func (s SettledItem) Decision() limit.Decision {
	return limit.Decision{Allowed: s.Overdrawn == 0, Limit: s.Limit, Remaining: s.Remaining, ResetAt: s.ResetAt}
}
