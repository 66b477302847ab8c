-- name: ListPlans :many
SELECT * FROM plans ORDER BY ip_per_minute, name;

-- name: GetPlan :one
SELECT * FROM plans WHERE name = @name;

-- name: SetPlanPrice :one
UPDATE plans SET stripe_price_id = @stripe_price_id, updated_at = now()
WHERE name = @name
RETURNING *;

-- name: SetPlanLimits :one
-- SetPlanLimits changes the limits given and keeps the others; set_unlimited
-- removes the monthly cap.
UPDATE plans
SET ip_per_minute = coalesce(sqlc.narg('ip_per_minute'), ip_per_minute),
    quota_per_minute = coalesce(sqlc.narg('quota_per_minute'), quota_per_minute),
    quota_per_hour = coalesce(sqlc.narg('quota_per_hour'), quota_per_hour),
    monthly_checks = CASE
        WHEN @set_unlimited::boolean THEN NULL
        ELSE coalesce(sqlc.narg('monthly_checks'), monthly_checks)
    END,
    updated_at = now()
WHERE name = @name
RETURNING *;
