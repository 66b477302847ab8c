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

-- name: SetTenantDisabled :one
-- SetTenantDisabled disables the tenant (keeping the first instant it was
-- disabled at, and replacing the reason) or enables it again (the reason
-- cleared).
UPDATE tenants
SET disabled_at = CASE WHEN @disabled::boolean THEN COALESCE(disabled_at, now()) END,
    disabled_reason = CASE WHEN @disabled::boolean THEN @reason::text ELSE '' END,
    updated_at = now()
WHERE id = @id
RETURNING *;
