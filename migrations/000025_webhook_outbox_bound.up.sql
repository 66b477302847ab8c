-- An endpoint holds at most 1,000 deliveries not settled (webhooks.MaxPending),
-- so a tenant at most 5,000: a receiver that is gone, or a flood of events,
-- cannot grow the outbox without bound. A delivery made past the bound is
-- kept settled as dropped, with the reason, and never sent (the tenant may
-- resend it once the endpoint has room); test sends and resends past it are
-- refused (pgstore.Webhooks).

-- webhook_endpoint_full reads at most 1,000 entries of the endpoint's range
-- of webhook_deliveries_endpoint_due.
CREATE FUNCTION webhook_endpoint_full(endpoint uuid) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT count(*) >= 1000 FROM (
        SELECT 1 FROM webhook_deliveries AS d
        WHERE d.endpoint_id = endpoint AND d.next_attempt_at IS NOT NULL
        LIMIT 1000
    ) AS waiting
$$;

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check
        CHECK (status IN ('pending', 'sending', 'retrying', 'delivered', 'failed', 'dropped'));

-- Every way a delivery is made (the fan-out of events, a test send) passes
-- the bound here. Two transactions that insert at once may each see room
-- for one: the bound holds to within the deliveries made concurrently.
CREATE FUNCTION webhook_bound_delivery() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF webhook_endpoint_full(NEW.endpoint_id) THEN
        NEW.status := 'dropped';
        NEW.next_attempt_at := NULL;
        NEW.last_error := 'not queued: 1,000 deliveries to this endpoint were waiting';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER webhook_deliveries_bound
BEFORE INSERT ON webhook_deliveries
FOR EACH ROW EXECUTE FUNCTION webhook_bound_delivery();

-- Only a delivery queued wakes the workers.
CREATE OR REPLACE FUNCTION webhook_notify_delivery() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.next_attempt_at IS NOT NULL THEN
        PERFORM pg_notify('tollgate_changes', 'webhook:' || NEW.tenant_id::text);
    END IF;
    RETURN NULL;
END
$$;

-- The dropped deliveries, counted every few seconds (WebhookOutbox).
CREATE INDEX webhook_deliveries_dropped ON webhook_deliveries (created_at) WHERE status = 'dropped';
