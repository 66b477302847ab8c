-- Outbound webhooks of tenants (internal/webhooks): the endpoints a tenant
-- registers, an outbox of events written in the transaction of the change
-- that caused them, and one delivery per event and endpoint that any
-- instance may claim.

-- An endpoint's signing secret must be usable to sign, so it is sealed
-- (AES-GCM under a key derived from the pepper), not hashed. After a
-- rotation the previous secret still signs until previous_expires_at.
CREATE TABLE webhook_endpoints (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id           uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url                 text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    events              text[] NOT NULL CHECK (cardinality(events) BETWEEN 1 AND 16),
    secret              bytea NOT NULL,
    previous_secret     bytea,
    previous_expires_at timestamptz,
    enabled             boolean NOT NULL DEFAULT true,
    -- Why the endpoint was disabled: by its tenant, by an operator, or
    -- after failing for three days. Empty while enabled.
    disabled_reason     text NOT NULL DEFAULT '' CHECK (length(disabled_reason) <= 500),
    -- The first failed delivery since the last one that succeeded.
    failing_since       timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at);

-- The outbox. An event decided in memory (a threshold crossed, an alert
-- resolved) is inserted with an idempotency key naming the occurrence, so
-- that instances that decide it at once emit it once.
CREATE TABLE webhook_events (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    type            text NOT NULL,
    data            jsonb NOT NULL,
    idempotency_key text NOT NULL UNIQUE CHECK (length(idempotency_key) <= 300),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_events_created_at ON webhook_events (created_at);

-- One delivery of an event to an endpoint. next_attempt_at is when an
-- instance may next claim it: the time of its next try while it waits,
-- the end of its claim while one instance sends it (so that a delivery
-- whose instance died is claimed again), NULL once settled.
CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id         uuid NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    endpoint_id      uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    status           text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'sending', 'retrying', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz DEFAULT now(),
    last_attempt_at  timestamptz,
    last_status_code integer,
    last_latency_ms  integer,
    last_error       text NOT NULL DEFAULT '' CHECK (length(last_error) <= 300),
    -- At most 256 bytes of the receiver's answer: enough to debug, never
    -- a store of what receivers send back.
    response_excerpt text NOT NULL DEFAULT '' CHECK (octet_length(response_excerpt) <= 256),
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at DESC);

-- Fan-out: an event becomes a delivery to each enabled endpoint of its
-- tenant that listens to its type, in the same transaction. test.ping is
-- addressed to one endpoint by the code that makes it.
CREATE FUNCTION webhook_fan_out() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.type <> 'test.ping' THEN
        INSERT INTO webhook_deliveries (event_id, endpoint_id, tenant_id)
        SELECT NEW.id, e.id, NEW.tenant_id
        FROM webhook_endpoints AS e
        WHERE e.tenant_id = NEW.tenant_id AND e.enabled AND NEW.type = ANY (e.events);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_events_fan_out
AFTER INSERT ON webhook_events
FOR EACH ROW EXECUTE FUNCTION webhook_fan_out();

-- A new delivery wakes the delivery workers of every instance at commit
-- ('webhook:<tenant id>' on the change channel), so that an event does
-- not wait for the next poll.
CREATE FUNCTION webhook_notify_delivery() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('tollgate_changes', 'webhook:' || NEW.tenant_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_notify
AFTER INSERT ON webhook_deliveries
FOR EACH ROW EXECUTE FUNCTION webhook_notify_delivery();

-- key.revoked, in the transaction that revokes the key, once per key.
CREATE FUNCTION webhook_key_revoked() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
    VALUES (NEW.tenant_id, 'key.revoked', jsonb_build_object(
        'key_id', NEW.id, 'key_prefix', NEW.prefix, 'test', NEW.test, 'revoked_at', NEW.revoked_at),
        'key.revoked:' || NEW.id)
    ON CONFLICT (idempotency_key) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_webhook_revoked
AFTER UPDATE OF revoked_at ON api_keys
FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
EXECUTE FUNCTION webhook_key_revoked();

-- alert.triggered, in the transaction that raises the alert: one event per
-- alert row (a subject's, or its policy's aggregate of subjects past the
-- day's budget, subject_digest '*').
CREATE FUNCTION webhook_alert_triggered() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO webhook_events (tenant_id, type, data, idempotency_key)
    VALUES (NEW.tenant_id, 'alert.triggered', jsonb_build_object(
        'policy', NEW.policy, 'subject_digest', NEW.subject_key, 'count', NEW.count,
        'threshold', NEW.alert_after, 'day', NEW.day, 'first_at', NEW.first_at,
        'shadow', NEW.shadow, 'subjects', NEW.subjects),
        'alert.triggered:' || NEW.tenant_id || ':' || NEW.policy || ':' || NEW.subject_key || ':' || NEW.day)
    ON CONFLICT (idempotency_key) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER alerts_webhook_triggered
AFTER INSERT ON alerts
FOR EACH ROW EXECUTE FUNCTION webhook_alert_triggered();
