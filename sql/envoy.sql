-- Tenants' envoyproxy/ratelimit configuration files (internal/policy/envoyconf,
-- internal/pgstore/envoy.go).

-- name: LockTenantEnvoyDomains :one
-- LockTenantEnvoyDomains holds the tenant row until the transaction ends,
-- so that concurrent puts cannot together pass the bounds on domains and
-- rules. No row: no tenant. As LockTenantPolicies, the count must be a
-- later statement.
SELECT id FROM tenants WHERE id = @tenant_id FOR NO KEY UPDATE;

-- name: CountEnvoyDomains :one
-- CountEnvoyDomains counts a tenant's domains other than @domain and the
-- rules they hold together.
SELECT count(*)::bigint AS domains, coalesce(sum(rules), 0)::bigint AS rules
FROM envoy_domains WHERE tenant_id = @tenant_id AND domain <> @domain;

-- name: UpsertEnvoyDomain :one
INSERT INTO envoy_domains (tenant_id, domain, source, rules)
VALUES (@tenant_id, @domain, @source, @rules)
ON CONFLICT (tenant_id, domain) DO UPDATE SET
    source = EXCLUDED.source,
    rules = EXCLUDED.rules,
    version = nextval('envoy_domains_version'),
    updated_at = now()
RETURNING domain, rules, version, created_at, updated_at;

-- name: GetEnvoyDomain :one
SELECT * FROM envoy_domains WHERE tenant_id = @tenant_id AND domain = @domain;

-- name: ListEnvoyDomains :many
-- ListEnvoyDomains leaves the sources out: a list is read by people.
SELECT domain, rules, created_at, updated_at FROM envoy_domains
WHERE tenant_id = @tenant_id ORDER BY domain;

-- name: LoadEnvoyDomains :many
-- LoadEnvoyDomains reads a tenant's files in one statement, so one
-- snapshot: each with its source, or with held true and no source when
-- its version is in @held (a version is one content of one row, never
-- reused: the caller holds that file already).
SELECT domain, rules, version, created_at, updated_at,
    coalesce(version = ANY (@held::bigint[]), false)::boolean AS held,
    (CASE WHEN version = ANY (@held::bigint[]) THEN '' ELSE source END)::text AS source
FROM envoy_domains
WHERE tenant_id = @tenant_id
ORDER BY domain;

-- name: DeleteEnvoyDomain :execrows
DELETE FROM envoy_domains WHERE tenant_id = @tenant_id AND domain = @domain;
