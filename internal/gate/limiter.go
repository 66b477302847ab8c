package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/limit"
)

// Limiter counts Tollgate's own limits on the routes Admit does not admit
// (the dashboard's sign-ins, the billing links): in the shared counter
// store, else, while that store is unavailable, in this instance's memory.
// The limits then hold per instance, which is better than none and better
// than refusing everyone during a store outage. Safe for concurrent use.
type Limiter struct {
	name   string
	shared counter.Store // nil: local only
	local  counter.Store // nil: shared only
	log    *slog.Logger
}

// NewLimiter returns a Limiter counting in shared, else in local (either
// may be nil, not both); name says what it limits in its log lines and
// errors ("sign-in limiter").
func NewLimiter(name string, shared, local counter.Store, log *slog.Logger) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{name: name, shared: shared, local: local, log: log}
}

// Rule is one of a Limiter's limits: at most Limit requests per Window on
// Key.
type Rule struct {
	Key    string
	Limit  int64
	Window time.Duration
	// Fixed counts in fixed windows, which start afresh at their end;
	// otherwise a rule counts in a sliding window.
	Fixed bool
}

// Limits is one question to a Limiter: its Rules decided together, all or
// nothing, in one round trip.
type Limits struct {
	// Group namespaces the Rules' keys (counter.Request.Group).
	Group string
	// Peek answers without counting, but for the first Ceilings rules,
	// which count whenever they allow (counter.Request.Ceilings).
	Peek     bool
	Ceilings int
	Rules    []Rule
}

// RuleDecision is a Limiter's answer for one Rule.
type RuleDecision struct {
	Allowed    bool
	RetryAfter time.Duration
}

// Check decides q, one RuleDecision per Rule in order. Its error wraps
// ErrStoreUnavailable when neither store could answer.
func (l *Limiter) Check(ctx context.Context, q Limits) ([]RuleDecision, error) {
	req := counter.Request{Mode: counter.Consume, Group: q.Group, Ceilings: q.Ceilings, Items: make([]counter.Item, len(q.Rules))}
	if q.Peek {
		req.Mode = counter.Peek
	}
	for i, r := range q.Rules {
		alg := limit.SlidingWindow
		if r.Fixed {
			alg = limit.FixedWindow
		}
		req.Items[i] = counter.Item{Key: r.Key, Algorithm: alg, Limit: r.Limit, Window: limit.Every(r.Window), Cost: 1}
	}
	var res counter.Result
	err := counter.ErrUnavailable
	if l.shared != nil {
		res, err = l.shared.Check(ctx, req)
		if errors.Is(err, counter.ErrUnavailable) {
			l.log.WarnContext(ctx, l.name+": counter store unavailable, counting in this instance's memory", "err", err)
		}
	}
	if errors.Is(err, counter.ErrUnavailable) && l.local != nil {
		res, err = l.local.Check(ctx, req)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.name, err)
	}
	ds := make([]RuleDecision, len(res.Decisions))
	for i, d := range res.Decisions {
		ds[i] = RuleDecision{Allowed: d.Allowed, RetryAfter: d.RetryAfter}
	}
	return ds, nil
}
