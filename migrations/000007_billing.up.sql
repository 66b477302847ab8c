-- Billing with Stripe (internal/billing): the webhook events received, once
-- each, and the hourly usage reports of metered subscriptions.

-- One row per Stripe event id. The row is inserted in the transaction that
-- applies the event, so an event counts once however often, and by however
-- many instances at the same moment, it is delivered: a delivery whose
-- insert finds the row is a replay and changes nothing but deliveries. A
-- delivery that failed leaves a row with outcome 'failed', which the next
-- delivery takes over.
--
-- outcome is what processing decided (billing.Outcome): applied, stale
-- (older than the tenant's last billing change), unknown_customer (for an
-- operator to resolve; applied by itself once the customer is linked),
-- ignored (a type Tollgate does not act on, or another subscription), failed
-- (error holds why); 'processing' only ever exists inside the transaction
-- that inserted the row.
CREATE TABLE stripe_events (
    id                text PRIMARY KEY,
    type              text NOT NULL,
    -- Stripe's "created" of the event: what orders a tenant's events.
    created           timestamptz NOT NULL,
    livemode          boolean NOT NULL,
    customer_id       text,
    tenant_id         uuid REFERENCES tenants (id) ON DELETE SET NULL,
    outcome           text NOT NULL CHECK (outcome IN
        ('processing', 'applied', 'stale', 'unknown_customer', 'ignored', 'failed')),
    note              text NOT NULL DEFAULT '',
    error             text,
    -- The fields of the event Tollgate reads (a billing.Event), from which
    -- an event held for an unknown customer is applied later.
    event             jsonb NOT NULL,
    -- The body as received, for operators; at most 64 KiB of it
    -- (payload_truncated says when it was cut).
    payload           text NOT NULL,
    payload_truncated boolean NOT NULL DEFAULT false,
    deliveries        integer NOT NULL DEFAULT 1 CHECK (deliveries > 0),
    received_at       timestamptz NOT NULL DEFAULT now(),
    last_delivery_at  timestamptz NOT NULL DEFAULT now(),
    processed_at      timestamptz
);
CREATE INDEX stripe_events_received ON stripe_events (received_at DESC, id);
CREATE INDEX stripe_events_tenant ON stripe_events (tenant_id, received_at DESC);
CREATE INDEX stripe_events_outcome ON stripe_events (outcome, received_at DESC);
CREATE INDEX stripe_events_unknown ON stripe_events (customer_id, created, id)
    WHERE outcome = 'unknown_customer';

-- What billing keeps of a tenant besides the tenants columns (plan,
-- billing_status, stripe_customer_id, stripe_subscription_id,
-- billing_updated_at), one row per tenant that Stripe events have touched.
--
-- plan_updated_at is the "created" of the newest subscription event applied:
-- the plan follows it, as billing_status follows billing_updated_at (invoice
-- events carry a status but no price, hence two clocks; billing.Apply).
--
-- usage_item_id is the subscription's metered item ('' for none), and
-- usage_next_hour the next hour whose usage is to be reported on it. A
-- reporter claims a due row with FOR UPDATE SKIP LOCKED, reports the hour and
-- moves usage_next_hour on in the same transaction, so that any number of
-- instances report each hour once; usage_next_hour never moves back.
CREATE TABLE billing_accounts (
    tenant_id       uuid PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    plan_updated_at timestamptz,
    usage_item_id   text NOT NULL DEFAULT '',
    usage_next_hour timestamptz CHECK (date_trunc('hour', usage_next_hour) = usage_next_hour),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (usage_item_id = '' OR usage_next_hour IS NOT NULL)
);
CREATE INDEX billing_accounts_usage_next_hour ON billing_accounts (usage_next_hour) WHERE usage_item_id <> '';

-- What was reported for each tenant and hour: one row each, ever.
--   reported: sent to Stripe (quantity, under idempotency_key)
--   zero:     no checks, nothing sent
--   skipped:  the tenant was held to starter (nothing to bill)
--   rejected: Stripe refused it for good (note says why)
CREATE TABLE billing_usage_reports (
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    hour            timestamptz NOT NULL,
    item_id         text NOT NULL,
    quantity        bigint NOT NULL CHECK (quantity >= 0),
    outcome         text NOT NULL CHECK (outcome IN ('reported', 'zero', 'skipped', 'rejected')),
    idempotency_key text NOT NULL,
    note            text NOT NULL DEFAULT '',
    reported_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, hour)
);
