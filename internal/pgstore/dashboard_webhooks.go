package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/dashboard/webhooklog"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

var _ webhooklog.Store = (*Dashboard)(nil)

// WebhookEvents implements webhooklog.Store from stripe_events (written by
// Billing). A tenant id that is not a UUID has no events.
func (s *Dashboard) WebhookEvents(ctx context.Context, f webhooklog.Filter) ([]webhooklog.Event, error) {
	p := sqlcgen.WebhookEventsParams{Outcome: f.Outcome, SkipRows: int32(max(f.Offset, 0)), MaxRows: int32(max(f.Limit, 0))}
	if f.TenantID != "" {
		id, ok := parseUUID(f.TenantID)
		if !ok {
			return nil, nil
		}
		p.TenantID = id
	}
	rows, err := s.q.WebhookEvents(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("webhook events: %w", auditErr(err))
	}
	out := make([]webhooklog.Event, len(rows))
	for i, r := range rows {
		out[i] = webhookEventOf(sqlcgen.WebhookEventRow{
			ID: r.ID, Type: r.Type, Created: r.Created, Livemode: r.Livemode, CustomerID: r.CustomerID,
			TenantID: r.TenantID, TenantName: r.TenantName, Outcome: r.Outcome, Note: r.Note, Error: r.Error,
			Deliveries: r.Deliveries, ReceivedAt: r.ReceivedAt, LastDeliveryAt: r.LastDeliveryAt,
		})
	}
	return out, nil
}

// WebhookEvent implements webhooklog.Store.
func (s *Dashboard) WebhookEvent(ctx context.Context, id string) (webhooklog.Event, error) {
	r, err := s.q.WebhookEvent(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return webhooklog.Event{}, fmt.Errorf("webhook event %s: %w", id, webhooklog.ErrNotFound)
	}
	if err != nil {
		return webhooklog.Event{}, fmt.Errorf("webhook event %s: %w", id, auditErr(err))
	}
	return webhookEventOf(r), nil
}

// webhookEventOf turns a stripe_events row into a webhooklog.Event.
func webhookEventOf(r sqlcgen.WebhookEventRow) webhooklog.Event {
	e := webhooklog.Event{
		ID: r.ID, Type: r.Type, Outcome: r.Outcome, Note: r.Note, Error: deref(r.Error),
		TenantName: deref(r.TenantName), CustomerID: deref(r.CustomerID), Livemode: r.Livemode,
		Created: r.Created.Time.UTC(), ReceivedAt: r.ReceivedAt.Time.UTC(), LastDeliveryAt: r.LastDeliveryAt.Time.UTC(),
		Deliveries: int(r.Deliveries), Payload: r.Payload, PayloadTruncated: r.PayloadTruncated,
	}
	if r.TenantID.Valid {
		e.TenantID = r.TenantID.String()
	}
	return e
}
