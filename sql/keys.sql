-- name: CreateKey :one
INSERT INTO api_keys (id, tenant_id, prefix, hash, test, name, expires_at)
VALUES (@id, @tenant_id, @prefix, @hash, @test, @name, @expires_at)
RETURNING *;

-- name: KeyByPrefix :one
SELECT * FROM api_keys WHERE prefix = @prefix;

-- name: ListKeys :many
SELECT * FROM api_keys WHERE tenant_id = @tenant_id ORDER BY created_at, id;

-- name: RevokeKey :one
-- RevokeKey keeps the first revocation time of a key revoked twice.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = @id
RETURNING *;

-- name: TouchKeys :execrows
-- TouchKeys moves last_used_at forward for a batch of keys in one statement.
-- Instances flush overlapping batches at the same moments: the rows are
-- locked in one order (by id) first, so that two batches cannot deadlock.
WITH used AS (
    -- Set-returning functions in one select list run in step (PostgreSQL 10+).
    SELECT unnest(@ids::text[]) AS id, unnest(@ats::timestamptz[]) AS at
), locked AS MATERIALIZED (
    SELECT k.id FROM api_keys AS k
    WHERE k.id IN (SELECT used.id FROM used)
    ORDER BY k.id
    FOR UPDATE
)
UPDATE api_keys AS k
SET last_used_at = used.at
FROM used, locked
WHERE k.id = locked.id AND used.id = locked.id
  AND (k.last_used_at IS NULL OR k.last_used_at < used.at);

-- name: ShortenKeyExpiry :one
-- ShortenKeyExpiry brings a live key's expiry forward to @expires_at (a
-- roll's grace period), never back; a revoked key, or one of another
-- tenant, is no row.
UPDATE api_keys SET expires_at = least(coalesce(expires_at, @expires_at), @expires_at)
WHERE id = @id AND tenant_id = @tenant_id AND revoked_at IS NULL
RETURNING *;
