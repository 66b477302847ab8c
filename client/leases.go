package client

import (
	"cmp"
	"context"
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
	// Degraded is true when the client's FailMode decided because Tollgate
	// gave no decision.
	Degraded bool
}

type leaseIn struct {
	Policy  string `json:"policy,omitempty"`
	Subject string `json:"subject,omitempty"`
	TTL     string `json:"ttl"`
}

type leaseOut struct {
	Allowed      bool      `json:"allowed"`
	LeaseID      string    `json:"lease_id"`
	ExpiresAt    time.Time `json:"expires_at"`
	InFlight     int64     `json:"in_flight"`
	Limit        int64     `json:"limit"`
	RetryAfterMS int64     `json:"retry_after_ms"`
}

func (o leaseOut) lease() Lease {
	return Lease{
		Allowed: o.Allowed, ID: o.LeaseID, ExpiresAt: o.ExpiresAt, InFlight: o.InFlight, Limit: o.Limit,
		RetryAfter: time.Duration(o.RetryAfterMS) * time.Millisecond,
	}
}

// Acquire asks for a lease of a concurrency policy for subject, held for
// ttl unless released or renewed first. A subject at its limit is a Lease
// with Allowed false and a nil error.
//
// When Tollgate gives no decision, Acquire returns the FailMode's Lease
// (Allowed under FailOpen, with no ID, Degraded) and an error, as Check
// does; releasing a Lease without an ID does nothing.
func (c *Client) Acquire(ctx context.Context, policy, subject string, ttl time.Duration) (Lease, error) {
	var out leaseOut
	if err := c.do(ctx, "POST", "/v1/leases", leaseIn{Policy: policy, Subject: subject, TTL: ttlString(ttl)}, &out); err != nil {
		return Lease{Allowed: c.failMode == FailOpen, Degraded: true}, err
	}
	return out.lease(), nil
}

// Release gives a lease back, freeing its place at once. Releasing a
// lease without an ID (not granted, or granted by the FailMode) does
// nothing; releasing one that already lapsed or was released is an
// *APIError with Status 404.
func (c *Client) Release(ctx context.Context, l Lease) error {
	if l.ID == "" {
		return nil
	}
	return c.do(ctx, "DELETE", "/v1/leases/"+url.PathEscape(l.ID), nil, nil)
}

// Renew extends a held lease to ttl from now and returns it renewed. A
// lease that already lapsed is an *APIError with Status 404: acquire a new
// one. Renewing a lease without an ID returns it as it is.
func (c *Client) Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if l.ID == "" {
		return l, nil
	}
	var out leaseOut
	if err := c.do(ctx, "POST", "/v1/leases/"+url.PathEscape(l.ID)+"/renew", leaseIn{TTL: ttlString(ttl)}, &out); err != nil {
		return l, err
	}
	r := out.lease()
	r.ID, r.Allowed = cmp.Or(r.ID, l.ID), true
	return r, nil
}

// ttlString is ttl as Tollgate reads durations: whole seconds, at least 1.
func ttlString(ttl time.Duration) string {
	s := max(1, int64((ttl+time.Second-1)/time.Second))
	return (time.Duration(s) * time.Second).String()
}
