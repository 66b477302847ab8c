package admin

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"
)

// ErrBusy is a password check that got no turn to hash within the
// Hasher's wait: the server is busy, and the caller should answer "try
// again shortly", not "wrong password".
var ErrBusy = errors.New("password hashing busy")

// DefaultMaxHashes is the number of argon2id checks a Hasher runs at once
// unless told otherwise: the machine's cores, at least 2 and at most 4.
// Each check holds its hash's memory (19 MiB at DefaultArgon2) and a core
// for about 25 ms, so this bounds sign-ins to about 80 MiB and to a share
// of the CPU the API keeps the rest of.
func DefaultMaxHashes() int { return min(4, max(2, runtime.GOMAXPROCS(0))) }

// DefaultHashWait is how long a check waits for its turn before ErrBusy.
const DefaultHashWait = time.Second

// Hasher runs argon2id password checks, at most a fixed number at once
// across every caller: whatever the number of sign-ins in flight, their
// hashes never hold more than that many times a hash's memory. A check
// waits a short while for its turn, then gives up with ErrBusy. It is safe
// for concurrent use.
type Hasher struct {
	turns chan struct{}
	wait  time.Duration
	// running and peak count checks taking their turn, and the most that
	// ever did at once.
	running, peak atomic.Int64
}

// NewHasher returns a Hasher that runs at most maxHashes checks at once
// (DefaultMaxHashes when not positive) and lets a check wait up to wait
// for its turn (DefaultHashWait when not positive).
func NewHasher(maxHashes int, wait time.Duration) *Hasher {
	if maxHashes <= 0 {
		maxHashes = DefaultMaxHashes()
	}
	if wait <= 0 {
		wait = DefaultHashWait
	}
	return &Hasher{turns: make(chan struct{}, maxHashes), wait: wait}
}

// Check is CheckPassword within the bound. Errors: ErrBusy when no turn
// came within the wait (or ctx ended first), else CheckPassword's.
func (h *Hasher) Check(ctx context.Context, encoded, password string) (bool, error) {
	var ok bool
	err := h.run(ctx, func() (err error) {
		ok, err = CheckPassword(encoded, password)
		return err
	})
	return ok, err
}

// Hash is HashPassword within the bound: a new admin's password costs what
// a sign-in's check does. It returns ErrBusy as Check does.
func (h *Hasher) Hash(ctx context.Context, password string, p Argon2Params) (string, error) {
	var hash string
	err := h.run(ctx, func() (err error) {
		hash, err = HashPassword(password, p)
		return err
	})
	return hash, err
}

// Decoy is CheckDecoy within the bound: the time of a check, for an
// unknown account. It returns ErrBusy as Check does.
func (h *Hasher) Decoy(ctx context.Context, password string) error {
	return h.run(ctx, func() error {
		CheckDecoy(password)
		return nil
	})
}

// Peak is the largest number of checks that ever ran at once on h.
func (h *Hasher) Peak() int { return int(h.peak.Load()) }

func (h *Hasher) run(ctx context.Context, f func() error) error {
	select {
	case h.turns <- struct{}{}:
	default:
		t := time.NewTimer(h.wait)
		defer t.Stop()
		select {
		case h.turns <- struct{}{}:
		case <-t.C:
			return ErrBusy
		case <-ctx.Done():
			return ErrBusy
		}
	}
	defer func() { <-h.turns }()
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for {
		p := h.peak.Load()
		if n <= p || h.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return f()
}
