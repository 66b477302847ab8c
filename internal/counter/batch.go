package counter

import (
	"context"
	"fmt"
)

// MaxBatch bounds the requests of one Store.CheckBatch.
const MaxBatch = 1000

// CheckEach is a CheckBatch of one Check each, in order: for a store whose
// requests cannot share a round trip (see postgres's requests of several
// instants).
func CheckEach(ctx context.Context, s Store, reqs []Request) ([]Result, []error) {
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
