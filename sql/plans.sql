-- name: ListPlans :many
SELECT * FROM plans ORDER BY ip_per_minute, name;
