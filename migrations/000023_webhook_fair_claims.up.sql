-- Deliveries are claimed oldest due first across endpoints, with a share of
-- an instance's slots per tenant (ClaimWebhookDeliveries). Both indexes keep
-- the claim's cost to a few probes per endpoint, whatever an endpoint's
-- backlog: its oldest unsettled delivery is the first entry of its range in
-- webhook_deliveries_endpoint_due, and the due ones it takes the next; its
-- deliveries in flight are the few rows of webhook_deliveries_sending.
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (endpoint_id, next_attempt_at, id)
    WHERE next_attempt_at IS NOT NULL;
CREATE INDEX webhook_deliveries_sending ON webhook_deliveries (endpoint_id, next_attempt_at)
    WHERE status = 'sending';
