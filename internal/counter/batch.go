package counter

import (
	"context"
	"fmt"
)

// MaxBatch bounds the requests of one CheckBatch.
const MaxBatch = 1000

// Batcher is a Store that decides many independent requests in one round
// trip to its server: the checks of a batch (POST /v1/check/batch) travel
// together, so their HTTP request and their store call are paid once.
type Batcher interface {
	Store
	// CheckBatch decides reqs, each all or nothing on its own, as if each
	// were Checked alone, one after the other in some order: no request
	// sees part of another. results[i] and errs[i] answer reqs[i]; errs[i]
	// is nil when results[i] holds the answer, and wraps ErrInvalid (that
	// request is malformed: the others are still decided) or ErrUnavailable
	// (the store did not answer it: perhaps none of them). More than
	// MaxBatch requests are all ErrInvalid.
	CheckBatch(ctx context.Context, reqs []Request) (results []Result, errs []error)
}

// CheckBatch asks s about reqs: in one round trip when s is a Batcher,
// else with one Check each, in order.
func CheckBatch(ctx context.Context, s Store, reqs []Request) ([]Result, []error) {
	if b, ok := s.(Batcher); ok {
		return b.CheckBatch(ctx, reqs)
	}
	res, errs := make([]Result, len(reqs)), make([]error, len(reqs))
	if TooLarge(reqs, errs) {
		return res, errs
	}
	for i, req := range reqs {
		res[i], errs[i] = s.Check(ctx, req)
	}
	return res, errs
}

// TooLarge sets every one of errs (one per request) to ErrInvalid and
// reports true when reqs are more than MaxBatch.
func TooLarge(reqs []Request, errs []error) bool {
	if len(reqs) <= MaxBatch {
		return false
	}
	err := fmt.Errorf("%d requests in a batch: at most %d: %w", len(reqs), MaxBatch, ErrInvalid)
	for i := range errs {
		errs[i] = err
	}
	return true
}
