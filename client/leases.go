package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Lease is a place among a concurrency policy's holders: at most the
// policy's limit of leases of one subject are held at once. It is given
// back by Release, or lapses at ExpiresAt unless renewed.
type Lease struct {
	// Allowed is true when the lease was granted; false when the subject
	// already holds the limit (RetryAfter then says when one lapses at
	// the latest).
	Allowed bool
	// ID names the lease for Release and Renew; empty when not granted or
	// when the client's FailMode granted it.
	ID string
	// ExpiresAt is when the lease lapses unless renewed.
	ExpiresAt time.Time
	// InFlight is how many leases the subject holds, this one included;
	// Limit is the policy's limit.
	InFlight, Limit int64
	// RetryAfter is how long until a place frees at the latest, when not
	// granted.
	RetryAfter time.Duration
	// Degraded is true when the decision was made without an exact count:
	// Tollgate's counter store was unreachable and the policy's fail_mode
	// decided (a lease so allowed holds no place), or Tollgate gave no
	// decision and the client's FailMode did.
	Degraded bool
}

type leaseIn struct {
	Policy  string  `json:"policy,omitempty"`
	Subject string  `json:"subject,omitempty"`
	TTL     *string `json:"ttl,omitempty"`
}

type leaseOut struct {
	Allowed      bool      `json:"allowed"`
	LeaseID      string    `json:"lease_id"`
	ExpiresAt    time.Time `json:"expires_at"`
	InFlight     int64     `json:"in_flight"`
	Limit        int64     `json:"limit"`
	RetryAfterMS int64     `json:"retry_after_ms"`
	Degraded     bool      `json:"degraded"`
}

// readAnswer reads the answer to POST /v1/leases, with the members
// LeaseResponse requires: a zero Lease is a refusal, not an outage.
func (out *leaseOut) readAnswer(b []byte) error {
	return readJSON(b, out, "allowed", "in_flight", "limit", "retry_after_ms", "degraded")
}

// renewOut is the answer to POST /v1/leases/{id}/renew.
type renewOut struct {
	ExpiresAt time.Time `json:"expires_at"`
}

func (out *renewOut) readAnswer(b []byte) error {
	return readJSON(b, out, "lease_id", "expires_at")
}

// Acquire asks for a lease of a concurrency policy for subject, held for
// ttl (Tollgate's default when 0; whole seconds) unless released or renewed
// first. A subject at its limit is a Lease with Allowed false and a nil
// error.
//
// When Tollgate is unavailable or its own ceilings or billing refuse the
// tenant, Acquire returns the FailMode's Lease (Allowed under FailOpen,
// with no ID, Degraded) and an error, as Check does; releasing a Lease
// without an ID does nothing. When Tollgate refuses the call as wrong (an
// unknown key or policy), it returns an *APIError and a zero Lease, which
// allows nothing. The subject is sent as Check sends it.
func (c *Client) Acquire(ctx context.Context, policy, subject string, ttl time.Duration) (Lease, error) {
	var out leaseOut
	if err := c.do(ctx, "POST", "/v1/leases", leaseIn{Policy: policy, Subject: subjectOf(subject), TTL: ttlString(ttl)}, &out); err != nil {
		if failModeDecides(err) {
			return Lease{Allowed: c.failMode == FailOpen, Degraded: true}, err
		}
		return Lease{}, err
	}
	return Lease{
		Allowed: out.Allowed, ID: out.LeaseID, ExpiresAt: out.ExpiresAt, InFlight: out.InFlight, Limit: out.Limit,
		RetryAfter: time.Duration(out.RetryAfterMS) * time.Millisecond, Degraded: out.Degraded,
	}, nil
}

// Release gives a lease back, freeing its place at once. It is idempotent:
// a lease that is already gone (released, lapsed, dropped by Reset) holds
// no place either, and releasing it returns nil, as does releasing a Lease
// without an ID (not granted, or granted by the FailMode).
func (c *Client) Release(ctx context.Context, l Lease) error {
	if l.ID == "" {
		return nil
	}
	err := c.do(ctx, "DELETE", "/v1/leases/"+url.PathEscape(l.ID), nil, nil)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil
	}
	return err
}

// ErrLeaseGone is wrapped by Renew's error when the lease no longer holds
// a place: it lapsed, was released, or was dropped by Reset. Acquire a new
// one.
var ErrLeaseGone = errors.New("lease gone")

// Renew extends a held lease to ttl from now (Tollgate's default when 0)
// and returns it with its new ExpiresAt. A lease that is gone is an error
// wrapping ErrLeaseGone (and an *APIError with Status 404). Renewing a
// Lease without an ID returns it as it is.
func (c *Client) Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if l.ID == "" {
		return l, nil
	}
	var out renewOut
	err := c.do(ctx, "POST", "/v1/leases/"+url.PathEscape(l.ID)+"/renew", leaseIn{TTL: ttlString(ttl)}, &out)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return l, fmt.Errorf("%w: %w", ErrLeaseGone, err)
	}
	if err != nil {
		return l, err
	}
	l.ExpiresAt = out.ExpiresAt
	return l, nil
}

// ttlString is ttl as Tollgate reads durations, in whole seconds rounded
// up; nil (Tollgate's default) for 0 or less.
func ttlString(ttl time.Duration) *string {
	if ttl <= 0 {
		return nil
	}
	s := (time.Duration(int64((ttl+time.Second-1)/time.Second)) * time.Second).String()
	return &s
}
