-- name: CountRefusals :exec
-- CountRefusals adds refusals per (tenant, policy, subject key, hour), once
-- per batch id (see AddUsage). The arrays are parallel and name each row at
-- most once; rows are upserted in key order so that concurrent calls cannot
-- deadlock; rows of tenants that no longer exist are dropped.
WITH batch AS (
    INSERT INTO applied_batches (id) VALUES (@batch_id::uuid)
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO refusal_hours AS h (tenant_id, policy, subject_key, hour, refusals)
SELECT i.tenant_id, i.policy, i.subject_key, i.hour, i.refusals
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@policies::text[]) AS policy,
    unnest(@subject_keys::text[]) AS subject_key,
    unnest(@hours::timestamptz[]) AS hour,
    unnest(@refusals::bigint[]) AS refusals
) AS i
WHERE EXISTS (SELECT 1 FROM batch)
  AND EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
ORDER BY i.tenant_id, i.policy, i.subject_key, i.hour
ON CONFLICT (tenant_id, policy, subject_key, hour)
DO UPDATE SET refusals = h.refusals + EXCLUDED.refusals;

-- name: RaiseAlerts :execrows
-- RaiseAlerts raises or updates the alert of each (tenant, policy, subject
-- key) whose refusals in the 24 hourly buckets up to at (the bucket of at and
-- the 23 before it) reach alert_after: one row per UTC day of at. Run it
-- after CountRefusals has committed, in a statement of its own, so that it
-- sees the counts of every instance committed before it. Returns the number
-- of alerts raised or updated.
INSERT INTO alerts AS a (tenant_id, policy, subject_key, day, first_at, last_at, count, alert_after, shadow)
SELECT i.tenant_id, i.policy, i.subject_key, i.day, i.at, i.at, s.total, i.alert_after, i.shadow
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@policies::text[]) AS policy,
    unnest(@subject_keys::text[]) AS subject_key,
    unnest(@alert_after::bigint[]) AS alert_after,
    unnest(@ats::timestamptz[]) AS at,
    unnest(@days::date[]) AS day,
    unnest(@shadow::boolean[]) AS shadow
) AS i
CROSS JOIN LATERAL (
    SELECT coalesce(sum(h.refusals), 0)::bigint AS total
    FROM refusal_hours AS h
    WHERE h.tenant_id = i.tenant_id AND h.policy = i.policy AND h.subject_key = i.subject_key
      AND h.hour > i.at - interval '24 hours' AND h.hour <= i.at
) AS s
WHERE i.alert_after > 0 AND s.total >= i.alert_after
  AND EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
ORDER BY i.tenant_id, i.policy, i.subject_key, i.day
ON CONFLICT (tenant_id, policy, subject_key, day) DO UPDATE SET
    first_at = least(a.first_at, EXCLUDED.first_at),
    last_at = greatest(a.last_at, EXCLUDED.last_at),
    count = CASE WHEN EXCLUDED.last_at >= a.last_at THEN EXCLUDED.count ELSE a.count END,
    alert_after = EXCLUDED.alert_after,
    shadow = EXCLUDED.shadow;

-- name: ListAlerts :many
-- ListAlerts returns a tenant's alerts whose last refusal is at or after
-- since, latest first.
SELECT policy, subject_key, day, first_at, last_at, count, alert_after, shadow
FROM alerts
WHERE tenant_id = @tenant_id AND last_at >= @since
ORDER BY last_at DESC, policy, subject_key
LIMIT @max_rows;

-- name: PruneRefusalHours :execrows
-- PruneRefusalHours deletes up to max_rows hourly counts older than before.
DELETE FROM refusal_hours AS h
USING (
    SELECT tenant_id, policy, subject_key, hour FROM refusal_hours
    WHERE refusal_hours.hour < @before
    ORDER BY hour
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE h.tenant_id = old.tenant_id AND h.policy = old.policy
  AND h.subject_key = old.subject_key AND h.hour = old.hour;

-- name: PruneAlerts :execrows
-- PruneAlerts deletes up to max_rows alerts whose latest refusal counted is
-- before before. No index leads with last_at, so the rows are not ordered:
-- the scan stops at the first max_rows it finds.
DELETE FROM alerts AS a
USING (
    SELECT tenant_id, policy, subject_key, day FROM alerts
    WHERE alerts.last_at < @before
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE a.tenant_id = old.tenant_id AND a.policy = old.policy
  AND a.subject_key = old.subject_key AND a.day = old.day;
