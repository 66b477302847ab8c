-- Usage of every route, not only /v1/check; batches of counts applied once;
-- first refusals per window for the audit log; refusal counts per hour and
-- the alerts they raise.

-- checked tells /v1/check calls (the ones allotments count) from the other
-- routes of the tenant API, so that a refusal of any route keeps its layer.
-- Rows written before this migration were all checks.
ALTER TABLE usage_minutes ADD COLUMN checked boolean NOT NULL DEFAULT true;
ALTER TABLE usage_minutes ALTER COLUMN checked DROP DEFAULT;
ALTER TABLE usage_minutes
    DROP CONSTRAINT usage_minutes_pkey,
    ADD PRIMARY KEY (tenant_id, minute, live, checked, outcome);

-- Batches of counts applied (usage_minutes, refusal_hours): a batch is
-- applied in the statement that inserts its id, so that a batch sent again
-- after an error that left its fate unknown (a timeout, a lost connection)
-- counts once. Rows are pruned after a day.
CREATE TABLE applied_batches (
    id         uuid PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX applied_batches_applied_at ON applied_batches (applied_at);

-- Audit pages are read newest first by id (keyset paging).
CREATE INDEX audit_tenant_id ON audit (tenant_id, id DESC);
CREATE INDEX audit_kind_id ON audit (kind, id DESC);

-- One row per counter key and window that has refused at least once: the
-- instance whose insert makes the row writes the audit entry, every other
-- instance learns that it is not the first. Rows are pruned once their window
-- has ended (internal/audit).
CREATE TABLE refusal_windows (
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    counter_key text COLLATE "C" NOT NULL,
    window_end  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, counter_key, window_end)
);
CREATE INDEX refusal_windows_window_end ON refusal_windows (window_end);

-- Refusals of one subject (its counter key, a digest) by one policy with
-- alert_after set, per UTC hour; pruned after two days.
CREATE TABLE refusal_hours (
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    policy      text NOT NULL,
    subject_key text COLLATE "C" NOT NULL,
    hour        timestamptz NOT NULL,
    refusals    bigint NOT NULL CHECK (refusals > 0),
    PRIMARY KEY (tenant_id, policy, subject_key, hour)
);
CREATE INDEX refusal_hours_hour ON refusal_hours (hour);

-- An alert: a subject refused alert_after times or more within 24 hours. One
-- row per tenant, policy, subject and UTC day; first_at is when the threshold
-- was reached, last_at the latest refusal counted, count the refusals in the
-- 24 hours up to last_at (at least alert_after).
CREATE TABLE alerts (
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    policy      text NOT NULL,
    subject_key text COLLATE "C" NOT NULL,
    day         date NOT NULL,
    first_at    timestamptz NOT NULL,
    last_at     timestamptz NOT NULL,
    count       bigint NOT NULL CHECK (count > 0),
    alert_after bigint NOT NULL CHECK (alert_after > 0),
    -- The policy was in shadow mode: nothing was refused, this is what it
    -- would have done.
    shadow      boolean NOT NULL,
    PRIMARY KEY (tenant_id, policy, subject_key, day)
);
CREATE INDEX alerts_tenant_last_at ON alerts (tenant_id, last_at DESC);
