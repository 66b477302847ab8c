package postgres

import (
	"time"

	"github.com/tollgate/tollgate/internal/counter"
)

// Statements returns the number of function calls s has sent.
func Statements(s *Store) int64 { return s.statements.Load() }

// FixedStatements returns the number of those that went to
// tollgate_check_fixed_packed.
func FixedStatements(s *Store) int64 { return s.fixedStatements.Load() }

// SplitStatements returns the number of statements sent as two: the
// one-item fixed-window checks set-based, the others item by item.
func SplitStatements(s *Store) int64 { return s.splitStatements.Load() }

// CheckCoalesced sends reqs as one statement decided at instant now, as
// the coalescer would send concurrent Checks, and answers each.
func CheckCoalesced(s *Store, reqs []counter.Request, now time.Time) ([]counter.Result, error) {
	calls := make([]*call, len(reqs))
	for i, r := range reqs {
		if err := counter.Validate(r); err != nil {
			return nil, err
		}
		calls[i] = &call{req: r, done: make(chan struct{}, 1)}
	}
	us := now.UnixMicro()
	s.send(calls, &us)
	res := make([]counter.Result, len(reqs))
	for i, c := range calls {
		<-c.done
		if c.err != nil {
			return nil, c.err
		}
		res[i] = counter.Answer(c.req, c.seen, c.now)
	}
	return res, nil
}

// RegisterArrayEncoders is registerArrayEncoders, for testing it on a
// connection of the test's own.
var RegisterArrayEncoders = registerArrayEncoders
