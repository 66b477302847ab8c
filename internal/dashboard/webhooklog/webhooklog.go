// Package webhooklog is what the operators' dashboard reads of the Stripe
// events Tollgate received (table stripe_events, written by
// internal/billing): the rows, their outcome and their payload. It imports
// no driver: pgstore implements its Store.
package webhooklog

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is an event id the log does not hold.
var ErrNotFound = errors.New("not found")

// Outcomes as stored, and the one the log derives: an event delivered more
// than once was replayed (the later deliveries changed nothing).
const (
	OutcomeApplied         = "applied"
	OutcomeStale           = "stale"
	OutcomeUnknownCustomer = "unknown_customer"
	OutcomeIgnored         = "ignored"
	OutcomeFailed          = "failed"
	// OutcomeCustomerConflict is a checkout that named a tenant with another
	// Stripe customer; the tenant kept its own.
	OutcomeCustomerConflict = "customer_conflict"
	// OutcomeReplay selects events delivered more than once, whatever their
	// stored outcome.
	OutcomeReplay = "replay"
)

// Event is one received Stripe event.
type Event struct {
	ID       string
	Type     string
	Outcome  string
	Note     string
	Error    string
	TenantID string
	// TenantName is the tenant's name when the event names a tenant that
	// still exists.
	TenantName string
	CustomerID string
	Livemode   bool
	// Created is Stripe's time of the event; ReceivedAt is the first
	// delivery.
	Created        time.Time
	ReceivedAt     time.Time
	LastDeliveryAt time.Time
	Deliveries     int
	// Payload is the body as received (only Event returns it), at most 64
	// KiB of it; PayloadTruncated says when it was cut.
	Payload          string
	PayloadTruncated bool
}

// Filter selects events, newest first.
type Filter struct {
	// TenantID keeps one tenant's events; empty keeps all.
	TenantID string
	// Outcome keeps one stored outcome, or OutcomeReplay; empty keeps all.
	Outcome string
	// Offset skips that many events; Limit bounds the rest.
	Offset int
	Limit  int
}

// Store reads the log. Every method is safe for concurrent use.
type Store interface {
	// WebhookEvents returns the events f selects, newest first, without
	// their payloads.
	WebhookEvents(ctx context.Context, f Filter) ([]Event, error)
	// WebhookEvent returns one event with its payload; ErrNotFound when the
	// log holds none with id.
	WebhookEvent(ctx context.Context, id string) (Event, error)
}
