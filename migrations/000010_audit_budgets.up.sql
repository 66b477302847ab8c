-- Budgets against floods of refusal entries and alerts, and the audit log's
-- retention (internal/audit).

-- Audit entries older than the retention (TOLLGATE_AUDIT_RETENTION_DAYS) are
-- deleted, oldest first.
CREATE INDEX audit_at ON audit (at);

-- One row per tenant and UTC minute in which a counter key refused for the
-- first time in its window: how many refusal entries were written one by one
-- for that minute (at most the budget), and the refusal_flood entry that
-- counts the rest (NULL until one is needed). A flush locks the row while it
-- spends the budget, so that every instance shares one budget. Pruned an hour
-- after the minute.
CREATE TABLE refusal_minutes (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    minute    timestamptz NOT NULL,
    entries   integer NOT NULL DEFAULT 0 CHECK (entries >= 0),
    flood_id  bigint,
    PRIMARY KEY (tenant_id, minute)
);
CREATE INDEX refusal_minutes_minute ON refusal_minutes (minute);

-- One row per tenant and UTC day in which a subject reached a policy's
-- alert_after: how many alerts of their own subjects got that day (at most
-- the budget). Locked like refusal_minutes. Pruned after two days.
CREATE TABLE alert_days (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    day       date NOT NULL,
    raised    integer NOT NULL DEFAULT 0 CHECK (raised >= 0),
    PRIMARY KEY (tenant_id, day)
);
CREATE INDEX alert_days_day ON alert_days (day);

-- The subjects that reached alert_after once the day's budget was spent: each
-- is counted once in its policy's aggregate alert of the day (subject_key
-- '*'). Pruned after two days.
CREATE TABLE alert_overflow (
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    policy      text NOT NULL,
    subject_key text COLLATE "C" NOT NULL,
    day         date NOT NULL,
    PRIMARY KEY (tenant_id, policy, subject_key, day)
);
CREATE INDEX alert_overflow_day ON alert_overflow (day);

-- An alert stands for one subject, or, with subject_key '*', for the
-- subjects past the day's budget: their number, and in count the sum of
-- their refusals in 24 hours when each was counted.
ALTER TABLE alerts ADD COLUMN subjects bigint NOT NULL DEFAULT 1 CHECK (subjects > 0);
