-- Tenant policies and their overrides (internal/policy, internal/pgstore/policies.go).
-- Expired overrides stay in the table until the next PutOverride of their
-- policy prunes them; every read here leaves them out.

-- name: LockTenantPolicies :one
-- LockTenantPolicies holds the tenant row until the transaction ends, so
-- that concurrent puts cannot together exceed the policy cap. No row: no
-- tenant. (FOR NO KEY UPDATE does not block the key-share locks of foreign
-- keys.) The count must be a later statement: in READ COMMITTED a statement
-- that waited for the lock still reads the snapshot it started with.
SELECT id FROM tenants WHERE id = @tenant_id FOR NO KEY UPDATE;

-- name: CountPolicies :one
-- CountPolicies counts a tenant's policies and says whether one is @name.
SELECT count(*)::bigint AS policies, coalesce(bool_or(name = @name), false)::boolean AS exists
FROM policies WHERE tenant_id = @tenant_id;

-- name: UpsertPolicy :one
INSERT INTO policies (tenant_id, name, "limit", "window", algorithm, scope, fail_mode, shadow, alert_after, unit, on_expiry)
VALUES (@tenant_id, @name, @limit_, @window_, @algorithm, @scope, @fail_mode, @shadow, @alert_after, @unit, @on_expiry)
ON CONFLICT (tenant_id, name) DO UPDATE SET
    "limit" = EXCLUDED."limit",
    "window" = EXCLUDED."window",
    algorithm = EXCLUDED.algorithm,
    scope = EXCLUDED.scope,
    fail_mode = EXCLUDED.fail_mode,
    shadow = EXCLUDED.shadow,
    alert_after = EXCLUDED.alert_after,
    unit = EXCLUDED.unit,
    on_expiry = EXCLUDED.on_expiry,
    updated_at = now()
RETURNING *;

-- name: GetPolicy :one
SELECT * FROM policies WHERE tenant_id = @tenant_id AND name = @name;

-- name: ListPolicies :many
SELECT * FROM policies WHERE tenant_id = @tenant_id ORDER BY name;

-- name: DeletePolicy :execrows
DELETE FROM policies WHERE tenant_id = @tenant_id AND name = @name;

-- name: LockPolicyOverrides :one
-- LockPolicyOverrides holds the policy row until the transaction ends (see
-- LockTenantPolicies) and returns its scope. No row: no policy.
SELECT scope FROM policies WHERE tenant_id = @tenant_id AND name = @policy FOR NO KEY UPDATE;

-- name: CountOverrides :one
-- CountOverrides counts a tenant's unexpired overrides and those of @policy
-- with a "*", and says whether @policy has one with @pattern.
SELECT count(*)::bigint AS overrides,
       count(*) FILTER (WHERE policy = @policy AND strpos(pattern, '*') > 0)::bigint AS wildcards,
       coalesce(bool_or(policy = @policy AND pattern = @pattern), false)::boolean AS exists
FROM policy_overrides
WHERE tenant_id = @tenant_id AND (expires_at IS NULL OR expires_at > now());

-- name: PruneOverrides :exec
DELETE FROM policy_overrides
WHERE tenant_id = @tenant_id AND policy = @policy AND expires_at <= now();

-- name: UpsertOverride :one
INSERT INTO policy_overrides (tenant_id, policy, pattern, "limit", expires_at)
VALUES (@tenant_id, @policy, @pattern, @limit_, @expires_at)
ON CONFLICT (tenant_id, policy, pattern) DO UPDATE SET
    "limit" = EXCLUDED."limit",
    expires_at = EXCLUDED.expires_at
RETURNING *;

-- name: GetOverride :one
SELECT * FROM policy_overrides
WHERE tenant_id = @tenant_id AND policy = @policy AND pattern = @pattern
  AND (expires_at IS NULL OR expires_at > now());

-- name: ListOverrides :many
SELECT * FROM policy_overrides
WHERE tenant_id = @tenant_id AND policy = @policy
  AND (expires_at IS NULL OR expires_at > now())
ORDER BY pattern;

-- name: DeleteOverride :execrows
DELETE FROM policy_overrides
WHERE tenant_id = @tenant_id AND policy = @policy AND pattern = @pattern
  AND (expires_at IS NULL OR expires_at > now());

-- name: LoadPolicySet :many
-- LoadPolicySet reads a tenant's policies and unexpired overrides in one
-- statement, so one snapshot: a row per override, or one with NULL override
-- columns for a policy without any; with the tenant's billing anchor, from
-- which its policies of window "billing" count.
SELECT sqlc.embed(p), o.pattern AS override_pattern, o."limit" AS override_limit,
    o.expires_at AS override_expires_at, t.billing_anchor
FROM policies p
JOIN tenants t ON t.id = p.tenant_id
LEFT JOIN policy_overrides o
    ON o.tenant_id = p.tenant_id AND o.policy = p.name
   AND (o.expires_at IS NULL OR o.expires_at > now())
WHERE p.tenant_id = @tenant_id
ORDER BY p.name, o.pattern;
