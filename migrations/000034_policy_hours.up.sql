-- Checks and refusals per tenant, policy and UTC hour (usage.PolicyRecorder),
-- for the per-policy charts of the console's usage page and the dashboard's
-- tenant page. A check counts once for each policy its items named (live
-- and test keys alike); a refusal counts for the enforced policy that
-- refused (a shadow policy's "would have refused" is not counted). Rows
-- exist only for policies that exist: a flush drops rows of a policy
-- deleted since, and deleting a policy deletes its rows, so that the table
-- holds at most (a tenant's policies) x (hours kept) rows per tenant:
-- 1,000 x 745 at most. Rows are pruned after about 31 days.
CREATE TABLE policy_hours (
    tenant_id uuid NOT NULL,
    policy    text NOT NULL,
    hour      timestamptz NOT NULL,
    checks    bigint NOT NULL DEFAULT 0 CHECK (checks >= 0),
    refusals  bigint NOT NULL DEFAULT 0 CHECK (refusals >= 0),
    PRIMARY KEY (tenant_id, policy, hour),
    FOREIGN KEY (tenant_id, policy) REFERENCES policies (tenant_id, name) ON DELETE CASCADE
);
-- Pruning deletes by hour across tenants.
CREATE INDEX policy_hours_hour ON policy_hours (hour);
