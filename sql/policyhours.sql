-- Checks and refusals per tenant, policy and UTC hour (usage.PolicyRecorder).

-- name: AddPolicyHours :exec
-- AddPolicyHours adds one flush of per-hour counts, once per batch id (the
-- batch's row in applied_batches is inserted by the same statement). The
-- arrays are parallel, one element per row, and name each (tenant, policy,
-- hour) at most once. Rows of a policy that no longer exists are dropped
-- (a policy deleted as the statement runs fails it; sent again, its rows
-- are dropped). Rows are upserted in key order so that two instances
-- flushing the same rows cannot deadlock.
WITH batch AS (
    INSERT INTO applied_batches (id) VALUES (@batch_id::uuid)
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO policy_hours AS h (tenant_id, policy, hour, checks, refusals)
SELECT i.tenant_id, i.policy, i.hour, i.checks, i.refusals
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@policies::text[]) AS policy,
    unnest(@hours::timestamptz[]) AS hour,
    unnest(@checks::bigint[]) AS checks,
    unnest(@refusals::bigint[]) AS refusals
) AS i
WHERE EXISTS (SELECT 1 FROM batch)
  AND EXISTS (SELECT 1 FROM policies AS p WHERE p.tenant_id = i.tenant_id AND p.name = i.policy)
ORDER BY i.tenant_id, i.policy, i.hour
ON CONFLICT (tenant_id, policy, hour)
DO UPDATE SET checks = h.checks + EXCLUDED.checks, refusals = h.refusals + EXCLUDED.refusals;

-- name: PolicyHours :many
-- PolicyHours lists a tenant's counts per policy and hour over the hours in
-- [from_hour, until_hour).
SELECT policy, hour, checks, refusals
FROM policy_hours
WHERE tenant_id = @tenant_id AND hour >= @from_hour AND hour < @until_hour
ORDER BY policy, hour;

-- name: PolicyDays :many
-- PolicyDays sums a tenant's counts per policy and UTC day over the hours
-- in [from_hour, until_hour).
SELECT policy, date_trunc('day', hour, 'UTC')::timestamptz AS day,
    sum(checks)::bigint AS checks, sum(refusals)::bigint AS refusals
FROM policy_hours
WHERE tenant_id = @tenant_id AND hour >= @from_hour AND hour < @until_hour
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: PrunePolicyHours :execrows
-- PrunePolicyHours deletes up to max_rows rows of hours before before.
DELETE FROM policy_hours AS h
USING (
    SELECT policy_hours.tenant_id, policy_hours.policy, policy_hours.hour FROM policy_hours
    WHERE policy_hours.hour < @before
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE h.tenant_id = old.tenant_id AND h.policy = old.policy AND h.hour = old.hour;
