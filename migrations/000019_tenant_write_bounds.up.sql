-- Bounds on what one tenant writes whatever its subjects (internal/audit):
-- the subjects whose refusals are counted one by one per day, and the
-- tenant API's changes audited one by one per minute (counter resets).

-- The subjects of a tenant's day whose refusals got hourly counts of their
-- own (refusal_hours), at most the watch budget; the refusals of the others
-- are counted per policy and hour under subject_key '*'.
ALTER TABLE alert_days ADD COLUMN watched integer NOT NULL DEFAULT 0 CHECK (watched >= 0);

-- An aggregate alert (subject_key '*') also counts, in unwatched, the
-- refusals of its day of subjects past the watch budget, which no subject's
-- count holds; such an aggregate may count no subject past the alert budget.
ALTER TABLE alerts ADD COLUMN unwatched bigint NOT NULL DEFAULT 0 CHECK (unwatched >= 0);
ALTER TABLE alerts
    DROP CONSTRAINT alerts_count_check,
    DROP CONSTRAINT alerts_subjects_check,
    ADD CONSTRAINT alerts_count_check CHECK (count > 0 OR (subject_key = '*' AND count >= 0)),
    ADD CONSTRAINT alerts_subjects_check CHECK (subjects > 0 OR (subject_key = '*' AND subjects >= 0));

-- One row per tenant, budget scope (such as counter_reset, or
-- counter_reset:sandbox for test keys) and UTC minute: how many entries of
-- that scope were written one by one (at most the budget), and the flood
-- entry (kind <kind>_flood) that counts the rest (NULL until one is needed).
-- Locked like refusal_minutes. Pruned an hour after the minute.
CREATE TABLE audit_minutes (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    scope     text NOT NULL,
    minute    timestamptz NOT NULL,
    entries   integer NOT NULL DEFAULT 0 CHECK (entries >= 0),
    flood_id  bigint,
    PRIMARY KEY (tenant_id, scope, minute)
);
CREATE INDEX audit_minutes_minute ON audit_minutes (minute);
