-- name: AddUsage :exec
-- AddUsage adds one flush of per-minute counts, once per batch id: the
-- batch's row in applied_batches is inserted by the same statement, and a
-- batch already applied adds nothing. The arrays are parallel, one element
-- per row, and name each (tenant, minute, live, checked, outcome) at most
-- once. Rows are upserted in key order so that two instances flushing the
-- same rows cannot deadlock; rows of tenants that no longer exist are
-- dropped.
WITH batch AS (
    INSERT INTO applied_batches (id) VALUES (@batch_id::uuid)
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO usage_minutes AS u (tenant_id, minute, live, checked, outcome, checks)
SELECT i.tenant_id, i.minute, i.live, i.checked, i.outcome, i.checks
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@minutes::timestamptz[]) AS minute,
    unnest(@live::boolean[]) AS live,
    unnest(@checked::boolean[]) AS checked,
    unnest(@outcomes::text[]) AS outcome,
    unnest(@checks::bigint[]) AS checks
) AS i
WHERE EXISTS (SELECT 1 FROM batch)
  AND EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
ORDER BY i.tenant_id, i.minute, i.live, i.checked, i.outcome
ON CONFLICT (tenant_id, minute, live, checked, outcome)
DO UPDATE SET checks = u.checks + EXCLUDED.checks;

-- name: UsageTotals :many
-- UsageTotals sums a tenant's counts over the minutes in [from, until).
SELECT live, checked, outcome, sum(checks)::bigint AS checks
FROM usage_minutes
WHERE tenant_id = @tenant_id AND minute >= @from_minute AND minute < @until_minute
GROUP BY live, checked, outcome
ORDER BY live, checked, outcome;

-- name: BatchApplied :one
-- BatchApplied reports whether the batch was applied.
SELECT EXISTS (SELECT 1 FROM applied_batches WHERE id = @batch_id::uuid) AS applied;

-- name: PruneAppliedBatches :execrows
-- PruneAppliedBatches deletes up to max_rows batch ids applied before
-- before: no batch is retried for that long.
DELETE FROM applied_batches AS b
USING (
    SELECT applied_batches.id FROM applied_batches
    WHERE applied_batches.applied_at < @before
    ORDER BY applied_batches.applied_at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE b.id = old.id;
