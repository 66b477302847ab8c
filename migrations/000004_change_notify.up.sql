-- Change notification: every instance caches tenants, keys, plans and
-- policies in memory and drops an entry when PostgreSQL says it changed.
-- Each trigger sends '<kind>:<id>' on the channel tollgate_changes after the
-- row is inserted, updated or deleted; the notification is delivered when
-- the transaction commits (and not at all when it rolls back), and
-- PostgreSQL folds identical payloads of one transaction into one.
--
--   tenants          tenant:<tenant id>
--   api_keys         key:<prefix>          (the public lookup part of the key)
--   plans            plan:<plan name>
--   policies,
--   policy_overrides policy:<tenant id>
--
-- Listeners that lose their connection miss notifications; they drop every
-- cache when they reconnect (pgstore.Listen).

-- tollgate_notify_change sends TG_ARGV[0] || ':' || the row's column
-- TG_ARGV[1]; an update that changes that column notifies both values, so
-- that the entry cached under the old one goes too.
CREATE FUNCTION tollgate_notify_change() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_old text;
    v_new text;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        v_old := to_jsonb(OLD) ->> TG_ARGV[1];
        PERFORM pg_notify('tollgate_changes', TG_ARGV[0] || ':' || v_old);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        v_new := to_jsonb(NEW) ->> TG_ARGV[1];
        IF v_new IS DISTINCT FROM v_old THEN
            PERFORM pg_notify('tollgate_changes', TG_ARGV[0] || ':' || v_new);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tenants_notify_change
AFTER INSERT OR UPDATE OR DELETE ON tenants
FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change('tenant', 'id');

-- Recording last_used_at (a batch every few seconds from every instance)
-- changes nothing a cache holds: such updates stay silent, or every instance
-- would reload every busy key after every flush.
CREATE TRIGGER api_keys_notify_change
AFTER INSERT OR DELETE ON api_keys
FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change('key', 'prefix');
CREATE TRIGGER api_keys_notify_update
AFTER UPDATE ON api_keys
FOR EACH ROW
WHEN (to_jsonb(OLD) - 'last_used_at' IS DISTINCT FROM to_jsonb(NEW) - 'last_used_at')
EXECUTE FUNCTION tollgate_notify_change('key', 'prefix');

CREATE TRIGGER plans_notify_change
AFTER INSERT OR UPDATE OR DELETE ON plans
FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change('plan', 'name');

CREATE TRIGGER policies_notify_change
AFTER INSERT OR UPDATE OR DELETE ON policies
FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change('policy', 'tenant_id');

CREATE TRIGGER policy_overrides_notify_change
AFTER INSERT OR UPDATE OR DELETE ON policy_overrides
FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change('policy', 'tenant_id');
