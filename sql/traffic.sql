-- The service's traffic as operators read it (internal/traffic): usage
-- minutes summed per minute, day and tenant, the tenant list with this
-- month's checks, and the degraded minutes.

-- name: TrafficByMinute :many
-- TrafficByMinute sums /v1/check calls (live and test) per minute and
-- outcome over the minutes in [from_minute, until_minute), of one tenant, or
-- of every tenant when tenant_id is NULL.
SELECT minute, outcome, sum(checks)::bigint AS requests
FROM usage_minutes
WHERE minute >= @from_minute AND minute < @until_minute
  AND checked
  AND (sqlc.narg('tenant_id')::uuid IS NULL OR tenant_id = sqlc.narg('tenant_id')::uuid)
GROUP BY minute, outcome
ORDER BY minute, outcome;

-- name: DailyChecks :many
-- DailyChecks sums a tenant's live checks that count toward its allotment
-- (outcomes allowed and policy; usage.CountsAsCheck) per UTC day over the
-- minutes in [from_minute, until_minute).
SELECT date_trunc('day', minute, 'UTC')::timestamptz AS day, sum(checks)::bigint AS checks
FROM usage_minutes
WHERE tenant_id = @tenant_id AND minute >= @from_minute AND minute < @until_minute
  AND live AND checked AND outcome IN ('allowed', 'policy')
GROUP BY 1
ORDER BY 1;

-- name: TopTenantsByChecks :many
-- TopTenantsByChecks ranks tenants by their /v1/check calls in
-- [from_minute, until_minute); refusals count every route.
SELECT t.id, t.name,
    coalesce(sum(u.checks) FILTER (WHERE u.checked), 0)::bigint AS checks,
    coalesce(sum(u.checks) FILTER (WHERE u.outcome <> 'allowed'), 0)::bigint AS refusals
FROM usage_minutes AS u
JOIN tenants AS t ON t.id = u.tenant_id
WHERE u.minute >= @from_minute AND u.minute < @until_minute
GROUP BY t.id, t.name
ORDER BY checks DESC, refusals DESC, t.name
LIMIT @max_rows;

-- name: TopTenantsByRefusals :many
-- TopTenantsByRefusals ranks tenants by their refused requests (every
-- route) in [from_minute, until_minute); tenants without refusals are left
-- out.
SELECT t.id, t.name,
    coalesce(sum(u.checks) FILTER (WHERE u.checked), 0)::bigint AS checks,
    coalesce(sum(u.checks) FILTER (WHERE u.outcome <> 'allowed'), 0)::bigint AS refusals
FROM usage_minutes AS u
JOIN tenants AS t ON t.id = u.tenant_id
WHERE u.minute >= @from_minute AND u.minute < @until_minute
GROUP BY t.id, t.name
HAVING coalesce(sum(u.checks) FILTER (WHERE u.outcome <> 'allowed'), 0) > 0
ORDER BY refusals DESC, checks DESC, t.name
LIMIT @max_rows;

-- name: SearchTenants :many
-- SearchTenants returns a page of the tenants whose name matches pattern
-- (ILIKE, wildcards in the search text already escaped) or whose id is
-- query, by name, with their live checks that count toward the allotment
-- since month_start.
SELECT t.id, t.name, t.plan, t.billing_status, t.rate_limit_per_minute, t.quota_per_minute,
    t.quota_per_hour, t.stripe_customer_id, t.stripe_subscription_id, t.billing_updated_at,
    t.created_at, t.disabled_at, t.disabled_reason,
    coalesce((
        SELECT sum(u.checks) FROM usage_minutes AS u
        WHERE u.tenant_id = t.id AND u.minute >= @month_start
          AND u.live AND u.checked AND u.outcome IN ('allowed', 'policy')
    ), 0)::bigint AS month_checks
FROM tenants AS t
WHERE t.name ILIKE @pattern::text OR t.id::text = @query::text
ORDER BY lower(t.name), t.id
LIMIT @max_rows OFFSET @skip_rows;

-- name: CountTenants :one
-- CountTenants counts the tenants SearchTenants pages through.
SELECT count(*) FROM tenants AS t
WHERE t.name ILIKE @pattern::text OR t.id::text = @query::text;

-- name: AddDegraded :exec
-- AddDegraded adds answers given without the shared counter store to their
-- minutes; the arrays are parallel and name each minute at most once.
INSERT INTO degraded_minutes AS d (minute, answers)
SELECT i.minute, i.answers
FROM (SELECT unnest(@minutes::timestamptz[]) AS minute, unnest(@answers::bigint[]) AS answers) AS i
WHERE i.answers > 0
ORDER BY i.minute
ON CONFLICT (minute) DO UPDATE SET answers = d.answers + EXCLUDED.answers;

-- name: DegradedMinutes :many
-- DegradedMinutes lists the minutes in [from_minute, until_minute) with
-- degraded answers.
SELECT minute, answers FROM degraded_minutes
WHERE minute >= @from_minute AND minute < @until_minute
ORDER BY minute;

-- name: PruneDegraded :execrows
-- PruneDegraded forgets degraded minutes before before.
DELETE FROM degraded_minutes WHERE minute < @before;

-- name: TrafficByDay :many
-- TrafficByDay sums a tenant's /v1/check calls (live and test) per UTC day
-- and outcome over the minutes in [from_minute, until_minute).
SELECT date_trunc('day', minute, 'UTC')::timestamptz AS day, outcome, sum(checks)::bigint AS requests
FROM usage_minutes
WHERE tenant_id = @tenant_id AND minute >= @from_minute AND minute < @until_minute
  AND checked
GROUP BY 1, 2
ORDER BY 1, 2;
