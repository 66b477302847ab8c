-- name: ClaimStripeEvent :one
-- ClaimStripeEvent records a delivery of an event, in the transaction that
-- applies it. A new event is inserted as 'processing' (and only this
-- transaction ever sees that outcome); an event already recorded gets one
-- more delivery, and its row stays locked until the transaction ends, so a
-- second delivery at the same moment waits here for the first to commit or
-- roll back. The outcome returned says which: 'processing' is a first
-- delivery, 'failed' one to process again, anything else a replay.
INSERT INTO stripe_events AS e (id, type, created, livemode, customer_id, outcome, event, payload, payload_truncated)
VALUES (@id, @type, @created, @livemode, sqlc.narg('customer_id'), 'processing', @event::jsonb, @payload, @payload_truncated)
ON CONFLICT (id) DO UPDATE SET deliveries = e.deliveries + 1, last_delivery_at = now()
RETURNING e.outcome, e.tenant_id, e.note;

-- name: FinishStripeEvent :exec
-- FinishStripeEvent records what processing decided.
UPDATE stripe_events
SET outcome = @outcome, tenant_id = sqlc.narg('tenant_id'), note = @note, error = NULL, processed_at = now()
WHERE id = @id;

-- name: FailStripeEvent :exec
-- FailStripeEvent records a delivery whose processing failed (and rolled
-- back), unless the event has been processed meanwhile.
INSERT INTO stripe_events AS e (id, type, created, livemode, customer_id, outcome, error, event, payload, payload_truncated)
VALUES (@id, @type, @created, @livemode, sqlc.narg('customer_id'), 'failed', @error, @event::jsonb, @payload, @payload_truncated)
ON CONFLICT (id) DO UPDATE SET error = excluded.error, deliveries = e.deliveries + 1, last_delivery_at = now()
WHERE e.outcome = 'failed';

-- name: LockStripeCustomer :exec
-- LockStripeCustomer serializes the events of one Stripe customer until the
-- transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('tollgate stripe customer ' || @customer_id::text, 0));

-- name: BillingAccountByCustomer :one
-- BillingAccountByCustomer returns the billing state of the tenant with the
-- customer, locked.
SELECT t.id, t.plan, t.billing_status, t.stripe_customer_id, t.stripe_subscription_id, t.billing_updated_at,
       b.plan_updated_at, coalesce(b.usage_item_id, '')::text AS usage_item_id, t.billing_anchor
FROM tenants AS t
LEFT JOIN billing_accounts AS b ON b.tenant_id = t.id
WHERE t.stripe_customer_id = @customer_id
FOR UPDATE OF t;

-- name: BillingAccount :one
-- BillingAccount returns the billing state of a tenant, locked.
SELECT t.id, t.plan, t.billing_status, t.stripe_customer_id, t.stripe_subscription_id, t.billing_updated_at,
       b.plan_updated_at, coalesce(b.usage_item_id, '')::text AS usage_item_id, t.billing_anchor
FROM tenants AS t
LEFT JOIN billing_accounts AS b ON b.tenant_id = t.id
WHERE t.id = @id
FOR UPDATE OF t;

-- name: PlanPrices :many
SELECT name, stripe_price_id::text AS stripe_price_id FROM plans WHERE stripe_price_id IS NOT NULL;

-- name: SaveBillingAccount :execrows
-- SaveBillingAccount writes what Stripe events change of a tenant; the
-- tenants trigger tells every instance's cache.
UPDATE tenants
SET plan = @plan,
    billing_status = @billing_status,
    stripe_customer_id = sqlc.narg('stripe_customer_id'),
    stripe_subscription_id = sqlc.narg('stripe_subscription_id'),
    billing_updated_at = sqlc.narg('billing_updated_at'),
    billing_anchor = sqlc.narg('billing_anchor'),
    updated_at = now()
WHERE id = @id;

-- name: SaveBillingExtras :exec
-- SaveBillingExtras writes the tenant's plan clock and metered item. A new
-- item is reported on from usage_from, or from where reporting got to if
-- that is later; an empty item stops reporting. The hour reporting got to is
-- kept whatever happens to the item, so that no hour is reported twice.
INSERT INTO billing_accounts AS b (tenant_id, plan_updated_at, usage_item_id, usage_next_hour)
VALUES (@tenant_id, sqlc.narg('plan_updated_at'), @usage_item_id,
        CASE WHEN @usage_item_id::text <> '' THEN @usage_from::timestamptz END)
ON CONFLICT (tenant_id) DO UPDATE
SET plan_updated_at = excluded.plan_updated_at,
    usage_item_id = excluded.usage_item_id,
    usage_next_hour = CASE
        WHEN excluded.usage_item_id <> '' AND excluded.usage_item_id <> b.usage_item_id
            THEN greatest(b.usage_next_hour, excluded.usage_next_hour)
        ELSE b.usage_next_hour
    END,
    updated_at = now();

-- name: HeldStripeEvents :many
-- HeldStripeEvents returns the events of a customer that no tenant had,
-- oldest first.
SELECT event FROM stripe_events
WHERE customer_id = @customer_id AND outcome = 'unknown_customer'
ORDER BY created, id;

-- name: ListStripeEvents :many
-- ListStripeEvents returns received events newest first, without their
-- payloads, optionally of one tenant, of one outcome ('replay': delivered
-- more than once) and received before a time, with the name of the tenant
-- when it still exists.
SELECT e.id, e.type, e.created, e.livemode, e.customer_id, e.tenant_id, t.name AS tenant_name,
       e.outcome, e.note, e.error, e.payload_truncated, e.deliveries, e.received_at, e.last_delivery_at,
       e.processed_at
FROM stripe_events AS e
LEFT JOIN tenants AS t ON t.id = e.tenant_id
WHERE e.outcome <> 'processing'
  AND (sqlc.narg('tenant_id')::uuid IS NULL OR e.tenant_id = sqlc.narg('tenant_id')::uuid)
  AND (@outcome::text = ''
       OR (@outcome::text = 'replay' AND e.deliveries > 1)
       OR e.outcome = @outcome::text)
  AND (sqlc.narg('before')::timestamptz IS NULL OR e.received_at < sqlc.narg('before')::timestamptz)
ORDER BY e.received_at DESC, e.id DESC
LIMIT @max_rows OFFSET @skip_rows;

-- name: GetStripeEvent :one
-- GetStripeEvent returns one received event with its payload and the name
-- of its tenant when it still exists.
SELECT e.id, e.type, e.created, e.livemode, e.customer_id, e.tenant_id, t.name AS tenant_name,
       e.outcome, e.note, e.error, e.payload_truncated, e.deliveries, e.received_at, e.last_delivery_at,
       e.processed_at, e.payload
FROM stripe_events AS e
LEFT JOIN tenants AS t ON t.id = e.tenant_id
WHERE e.id = @id AND e.outcome <> 'processing';

-- name: ClaimUsageHour :one
-- ClaimUsageHour locks the tenant with the earliest unreported hour that
-- starts at or before due, passing over tenants in skip and those another
-- transaction holds.
SELECT b.tenant_id, b.usage_item_id, b.usage_next_hour::timestamptz AS usage_next_hour, t.plan, t.billing_status
FROM billing_accounts AS b
JOIN tenants AS t ON t.id = b.tenant_id
WHERE b.usage_item_id <> '' AND b.usage_next_hour <= @due AND NOT (b.tenant_id = ANY (@skip::uuid[]))
ORDER BY b.usage_next_hour, b.tenant_id
LIMIT 1
FOR UPDATE OF b SKIP LOCKED;

-- name: InsertUsageReport :exec
INSERT INTO billing_usage_reports (tenant_id, hour, item_id, quantity, outcome, idempotency_key, note)
VALUES (@tenant_id, @hour, @item_id, @quantity, @outcome, @idempotency_key, @note);

-- name: AdvanceUsageHour :exec
UPDATE billing_accounts
SET usage_next_hour = usage_next_hour + interval '1 hour', updated_at = now()
WHERE tenant_id = @tenant_id;

-- name: ListUsageReports :many
-- ListUsageReports returns a tenant's usage reports, latest hour first.
SELECT tenant_id, hour, item_id, quantity, outcome, idempotency_key, note, reported_at
FROM billing_usage_reports
WHERE tenant_id = @tenant_id
ORDER BY hour DESC
LIMIT @max_rows;

-- name: PruneStripeEvents :execrows
-- PruneStripeEvents deletes up to max_rows events received before before,
-- except those still held for an operator: an unknown_customer event is
-- applied, and its outcome changed, only when its customer gets linked.
DELETE FROM stripe_events
WHERE id IN (
    SELECT e.id FROM stripe_events AS e
    WHERE e.received_at < @before AND e.outcome <> 'unknown_customer'
    ORDER BY e.received_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
);
