-- name: InsertAudit :one
-- InsertAudit writes one audit entry; at NULL means now.
INSERT INTO audit (at, tenant_id, actor, kind, detail)
VALUES (coalesce(sqlc.narg('at')::timestamptz, now()), sqlc.narg('tenant_id')::uuid, @actor, @kind, @detail::jsonb)
RETURNING id, at;

-- name: ListAudit :many
-- ListAudit returns entries newest first (by id), optionally of one tenant
-- and one kind, with ids below before_id when it is positive.
SELECT id, at, tenant_id, actor, kind, detail
FROM audit
WHERE (sqlc.narg('tenant_id')::uuid IS NULL OR tenant_id = sqlc.narg('tenant_id')::uuid)
  AND (@kind::text = '' OR kind = @kind::text)
  AND (@before_id::bigint <= 0 OR id < @before_id::bigint)
ORDER BY id DESC
LIMIT @max_rows;

-- name: RecordFirstRefusals :execrows
-- RecordFirstRefusals writes an audit entry for each refusal that is the
-- first of its (tenant, counter key, window end), in one statement: the
-- window row is inserted if absent, and the entry written only when this
-- statement inserted it, so that any number of instances write one entry per
-- window. Keys must be distinct within a call; rows are inserted in key order
-- so that concurrent calls cannot deadlock. Refusals of tenants that no
-- longer exist are dropped. Returns the number of entries written.
WITH input AS (
    SELECT i.tenant_id, i.counter_key, i.window_end, i.at, i.detail
    FROM (SELECT
        unnest(@tenant_ids::uuid[]) AS tenant_id,
        unnest(@counter_keys::text[]) AS counter_key,
        unnest(@window_ends::timestamptz[]) AS window_end,
        unnest(@ats::timestamptz[]) AS at,
        unnest(@details::text[]) AS detail
    ) AS i
    WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
), first AS (
    INSERT INTO refusal_windows (tenant_id, counter_key, window_end)
    SELECT tenant_id, counter_key, window_end FROM input
    ORDER BY tenant_id, counter_key, window_end
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, counter_key, window_end
)
INSERT INTO audit (at, tenant_id, actor, kind, detail)
SELECT i.at, i.tenant_id, 'tollgate', 'refusal', i.detail::jsonb
FROM first AS f
JOIN input AS i
  ON i.tenant_id = f.tenant_id AND i.counter_key = f.counter_key AND i.window_end = f.window_end
ORDER BY i.at;

-- name: PruneRefusalWindows :execrows
-- PruneRefusalWindows deletes up to max_rows window rows that ended before
-- before: a later refusal of that key is in a new window anyway.
DELETE FROM refusal_windows AS w
USING (
    SELECT tenant_id, counter_key, window_end FROM refusal_windows
    WHERE refusal_windows.window_end < @before
    ORDER BY window_end
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE w.tenant_id = old.tenant_id AND w.counter_key = old.counter_key AND w.window_end = old.window_end;
