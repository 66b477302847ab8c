-- name: CreateTenant :one
INSERT INTO tenants (name, plan) VALUES (@name, @plan)
RETURNING *;

-- name: GetTenant :one
SELECT * FROM tenants WHERE id = @id;

-- name: ListTenants :many
SELECT * FROM tenants ORDER BY created_at, id;

-- name: SetTenantLimits :one
-- SetTenantLimits replaces the tenant's per-IP limit (0: the plan's) and its
-- quota overrides (NULL: the plan's).
UPDATE tenants
SET rate_limit_per_minute = @rate_limit_per_minute,
    quota_per_minute = sqlc.narg('quota_per_minute'),
    quota_per_hour = sqlc.narg('quota_per_hour'),
    updated_at = now()
WHERE id = @id
RETURNING *;
