DROP TABLE IF EXISTS alerts, refusal_hours, refusal_windows, applied_batches;
DROP INDEX IF EXISTS audit_tenant_id, audit_kind_id;
-- Requests other than checks had no place before 000005: they are dropped.
DELETE FROM usage_minutes WHERE NOT checked;
ALTER TABLE usage_minutes
    DROP CONSTRAINT usage_minutes_pkey,
    DROP COLUMN checked,
    ADD PRIMARY KEY (tenant_id, minute, live, outcome);
