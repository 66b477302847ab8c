// Package counter is the contract between Tollgate's admission pipeline and
// the places counters live: memory, PostgreSQL and Redis. A Store answers a
// batch of counter items in one round trip, all or nothing, with the
// arithmetic of internal/limit.
//
// counter imports only internal/limit; the backends live in its
// subpackages, and countertest holds the conformance suite they all pass.
package counter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
)

// ErrUnavailable is returned (wrapped) when the store cannot be reached or does
// not answer within its deadline. Callers fall back (fail open or closed);
// nothing was consumed, or at worst a consumption was applied that the caller
// never learns about, which a rate limit tolerates.
var ErrUnavailable = errors.New("counter store unavailable")

// ErrInvalid is returned (wrapped) for a malformed request: no items, too many,
// an empty or oversized key, or limit arguments that fail limit.Validate.
var ErrInvalid = errors.New("invalid counter request")

// Mode says whether a check counts.
type Mode uint8

const (
	// Consume counts every item when all of them allow, and none otherwise.
	Consume Mode = iota
	// Peek answers what Consume would answer, counting nothing.
	Peek
)

// Bounds of one request.
const (
	MaxItems  = 64
	MaxKeyLen = 256
)

// Item is one counter to check. Key is opaque to the store and already free of
// anything secret (the gate hashes subjects and IPs into it).
type Item struct {
	Key       string
	Algorithm limit.Algorithm
	Limit     int64
	Window    limit.Window
	Cost      int64
}

// Request is one all-or-nothing batch.
type Request struct {
	Mode  Mode
	Items []Item
	// Group names the keys' owner (a tenant id). A counter is named by Group
	// and Key together; the Redis store also uses Group as the hash tag, so
	// one request's keys share a cluster slot.
	Group string
	// Now, when not zero, replaces the store's own clock. Only tests and
	// replays set it; production lets the store's server pick the time, so
	// instances with skewed clocks agree.
	Now time.Time
}

// Result is the answer to a Request: Decisions[i] answers Items[i].
type Result struct {
	// Allowed is true when every item allowed; only then was anything consumed
	// (and never in Peek mode).
	Allowed   bool
	Decisions []limit.Decision
	// Now is the store clock reading the decisions were made at.
	Now time.Time
}

// Store checks batches of counters. Implementations are safe for concurrent
// use and make one round trip to their server per Check (several concurrent
// Checks may share one). Errors wrap ErrUnavailable or ErrInvalid.
type Store interface {
	Check(ctx context.Context, req Request) (Result, error)
	// Close releases the store's connections and background work.
	Close() error
}

// Validate checks a request's shape before it is sent anywhere.
func Validate(req Request) error {
	if req.Mode != Consume && req.Mode != Peek {
		return fmt.Errorf("mode %d: %w", req.Mode, ErrInvalid)
	}
	if len(req.Items) == 0 || len(req.Items) > MaxItems {
		return fmt.Errorf("%d items: must be 1 to %d: %w", len(req.Items), MaxItems, ErrInvalid)
	}
	for i, it := range req.Items {
		if it.Key == "" || len(it.Key) > MaxKeyLen {
			return fmt.Errorf("item %d: key of %d bytes: must be 1 to %d: %w", i, len(it.Key), MaxKeyLen, ErrInvalid)
		}
		if err := limit.Validate(it.Algorithm, it.Limit, it.Cost, it.Window); err != nil {
			return fmt.Errorf("item %d: %w: %w", i, ErrInvalid, err)
		}
	}
	return nil
}

// Seen is what a store reports for one item: the state it found (after any
// earlier item of the same request on the same key) and whether its own
// arithmetic admitted the item.
type Seen struct {
	State   limit.State
	Allowed bool
}

// Answer turns the states a store saw at instant now into a Result, deriving
// each decision with limit.Decide. A store whose arithmetic disagrees with
// limit.Admit is a bug; the store's own verdict stands, since it is what was
// written.
func Answer(req Request, seen []Seen, now time.Time) Result {
	res := Result{Allowed: true, Decisions: make([]limit.Decision, len(req.Items)), Now: now}
	for i, it := range req.Items {
		d, _ := limit.Decide(it.Algorithm, seen[i].State, now, it.Cost, it.Limit, it.Window)
		d.Allowed = seen[i].Allowed
		if d.Allowed {
			d.RetryAfter = 0
		}
		res.Decisions[i] = d
		res.Allowed = res.Allowed && d.Allowed
	}
	return res
}
