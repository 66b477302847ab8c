-- name: InsertAudit :one
-- InsertAudit writes one audit entry; at NULL means now.
INSERT INTO audit (at, tenant_id, actor, kind, detail)
VALUES (coalesce(sqlc.narg('at')::timestamptz, now()), sqlc.narg('tenant_id')::uuid, @actor, @kind, @detail::jsonb)
RETURNING id, at;

-- name: ListAudit :many
-- ListAudit returns entries newest first (by id), optionally of one tenant,
-- of one of kinds (all when empty) and of none of not_kinds, with ids below
-- before_id when it is positive.
SELECT id, at, tenant_id, actor, kind, detail
FROM audit
WHERE (sqlc.narg('tenant_id')::uuid IS NULL OR tenant_id = sqlc.narg('tenant_id')::uuid)
  AND (cardinality(@kinds::text[]) = 0 OR kind = ANY (@kinds::text[]))
  AND NOT (kind = ANY (@not_kinds::text[]))
  AND (@before_id::bigint <= 0 OR id < @before_id::bigint)
ORDER BY id DESC
LIMIT @max_rows;

-- name: ClaimBatch :execrows
-- ClaimBatch records a batch id as applied, in the transaction that applies
-- the batch, and returns 1; it returns 0 when the batch was applied before,
-- and the transaction should then apply nothing.
INSERT INTO applied_batches (id) VALUES (@batch_id::uuid)
ON CONFLICT DO NOTHING;

-- name: LockRefusalMinutes :many
-- LockRefusalMinutes makes the row of each (tenant, minute) and locks it
-- until the transaction ends, in key order, so that the budget of one
-- tenant's minute is spent by one flush at a time whatever the number of
-- instances; it returns each row's entries written so far and its flood
-- entry's id (0 when it has none). The pairs must be distinct; tenants that
-- no longer exist are left out.
INSERT INTO refusal_minutes AS m (tenant_id, minute)
SELECT i.tenant_id, i.minute
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@minutes::timestamptz[]) AS minute
) AS i
WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
ORDER BY i.tenant_id, i.minute
ON CONFLICT (tenant_id, minute) DO UPDATE SET entries = m.entries
RETURNING m.tenant_id, m.minute, m.entries, coalesce(m.flood_id, 0)::bigint AS flood_id;

-- name: RecordFirstRefusals :many
-- RecordFirstRefusals finds, among the refusals given, those that are the
-- first of their (tenant, counter key, window end) of any instance: the
-- window row is inserted if absent, and a refusal is first only when this
-- statement inserted it. Of the first refusals of each (tenant, minute), in
-- order of time, the first room ones (room as given per tenant and minute)
-- get an audit entry; the statement returns, per (tenant, minute), how many
-- got one and how many did not (past_budget), and when the first of those
-- happened. Run it in the transaction that locked the minutes
-- (LockRefusalMinutes). Keys must be distinct within a call; window rows are
-- inserted in key order so that concurrent calls cannot deadlock. Refusals
-- of tenants that no longer exist are dropped.
WITH input AS (
    SELECT i.tenant_id, i.counter_key, i.window_end, i.at, i.minute, i.detail
    FROM (SELECT
        unnest(@tenant_ids::uuid[]) AS tenant_id,
        unnest(@counter_keys::text[]) AS counter_key,
        unnest(@window_ends::timestamptz[]) AS window_end,
        unnest(@ats::timestamptz[]) AS at,
        unnest(@minutes::timestamptz[]) AS minute,
        unnest(@details::text[]) AS detail
    ) AS i
    WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
), room AS (
    SELECT
        unnest(@room_tenant_ids::uuid[]) AS tenant_id,
        unnest(@room_minutes::timestamptz[]) AS minute,
        unnest(@rooms::bigint[]) AS room
), first AS (
    INSERT INTO refusal_windows (tenant_id, counter_key, window_end)
    SELECT tenant_id, counter_key, window_end FROM input
    ORDER BY tenant_id, counter_key, window_end
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, counter_key, window_end
), fresh AS (
    SELECT i.tenant_id, i.minute, i.at, i.detail, r.room,
        row_number() OVER (PARTITION BY i.tenant_id, i.minute ORDER BY i.at, i.counter_key, i.window_end) AS rank
    FROM first AS f
    JOIN input AS i
      ON i.tenant_id = f.tenant_id AND i.counter_key = f.counter_key AND i.window_end = f.window_end
    JOIN room AS r ON r.tenant_id = i.tenant_id AND r.minute = i.minute
), written AS (
    INSERT INTO audit (at, tenant_id, actor, kind, detail)
    SELECT at, tenant_id, 'tollgate', 'refusal', detail::jsonb
    FROM fresh
    WHERE rank <= room
    ORDER BY at
)
SELECT tenant_id::uuid AS tenant_id, minute::timestamptz AS minute,
    count(*) FILTER (WHERE rank <= room)::bigint AS written,
    count(*) FILTER (WHERE rank > room)::bigint AS past_budget,
    coalesce(min(at) FILTER (WHERE rank > room), minute)::timestamptz AS first_past_at
FROM fresh
GROUP BY tenant_id, minute;

-- name: AddToRefusalFlood :exec
-- AddToRefusalFlood adds refusals to the count of a refusal_flood entry.
UPDATE audit
SET detail = jsonb_set(detail, '{refusals}', to_jsonb((detail->>'refusals')::bigint + @refusals::bigint))
WHERE id = @id AND kind = 'refusal_flood';

-- name: SettleRefusalMinutes :exec
-- SettleRefusalMinutes adds the entries a flush wrote to each (tenant,
-- minute) and names its flood entry when it had none (flood_id 0 leaves it).
UPDATE refusal_minutes AS m
SET entries = m.entries + i.entries,
    flood_id = coalesce(m.flood_id, nullif(i.flood_id, 0))
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@minutes::timestamptz[]) AS minute,
    unnest(@entries::integer[]) AS entries,
    unnest(@flood_ids::bigint[]) AS flood_id
) AS i
WHERE m.tenant_id = i.tenant_id AND m.minute = i.minute;

-- name: PruneRefusalMinutes :execrows
-- PruneRefusalMinutes deletes up to max_rows minute rows before before.
DELETE FROM refusal_minutes AS m
USING (
    SELECT tenant_id, minute FROM refusal_minutes
    WHERE refusal_minutes.minute < @before
    ORDER BY minute
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE m.tenant_id = old.tenant_id AND m.minute = old.minute;

-- name: PruneAudit :execrows
-- PruneAudit deletes up to max_rows audit entries, oldest first, dated
-- before before.
DELETE FROM audit AS a
USING (
    SELECT audit.id FROM audit
    WHERE audit.at < @before
    ORDER BY audit.at
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE a.id = old.id;

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

-- name: LockAuditMinutes :many
-- LockAuditMinutes makes the row of each (tenant, scope, minute) and locks it
-- until the transaction ends, in key order, so that the budget of one
-- tenant's scope and minute is spent by one flush at a time whatever the
-- number of instances; it returns each row's entries written so far and its
-- flood entry's id (0 when it has none). The triples must be distinct;
-- tenants that no longer exist are left out.
INSERT INTO audit_minutes AS m (tenant_id, scope, minute)
SELECT i.tenant_id, i.scope, i.minute
FROM (SELECT
    unnest(@tenant_ids::uuid[]) AS tenant_id,
    unnest(@scopes::text[]) AS scope,
    unnest(@minutes::timestamptz[]) AS minute
) AS i
WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = i.tenant_id)
ORDER BY i.tenant_id, i.scope, i.minute
ON CONFLICT (tenant_id, scope, minute) DO UPDATE SET entries = m.entries
RETURNING m.tenant_id, m.scope, m.minute, m.entries, coalesce(m.flood_id, 0)::bigint AS flood_id;

-- name: AddToAuditFlood :exec
-- AddToAuditFlood adds entries to the count of a flood entry.
UPDATE audit
SET detail = jsonb_set(detail, '{entries}', to_jsonb((detail->>'entries')::bigint + @entries::bigint))
WHERE id = @id;

-- name: SettleAuditMinute :exec
-- SettleAuditMinute adds the entries a flush wrote to a (tenant, scope,
-- minute) and names its flood entry when it had none (flood_id 0 leaves it).
UPDATE audit_minutes
SET entries = entries + @entries::integer,
    flood_id = coalesce(flood_id, nullif(@flood_id::bigint, 0))
WHERE tenant_id = @tenant_id AND scope = @scope AND minute = @minute;

-- name: PruneAuditMinutes :execrows
-- PruneAuditMinutes deletes up to max_rows minute rows before before.
DELETE FROM audit_minutes AS m
USING (
    SELECT tenant_id, scope, minute FROM audit_minutes
    WHERE audit_minutes.minute < @before
    ORDER BY minute
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
) AS old
WHERE m.tenant_id = old.tenant_id AND m.scope = old.scope AND m.minute = old.minute;
