DROP INDEX webhook_deliveries_dropped;
CREATE OR REPLACE FUNCTION webhook_notify_delivery() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('tollgate_changes', 'webhook:' || NEW.tenant_id::text);
    RETURN NULL;
END
$$;
DROP TRIGGER webhook_deliveries_bound ON webhook_deliveries;
DROP FUNCTION webhook_bound_delivery();
UPDATE webhook_deliveries SET status = 'failed' WHERE status = 'dropped';
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check
        CHECK (status IN ('pending', 'sending', 'retrying', 'delivered', 'failed'));
DROP FUNCTION webhook_endpoint_full(uuid);
