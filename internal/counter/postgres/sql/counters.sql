-- name: CheckCounters :many
-- CheckCounters decides one coalesced batch; see tollgate_check in
-- migrations/000013_counter_check_lean.up.sql for the arguments. Now is NULL
-- for the database clock. (The casts give sqlc the column types: it does not
-- read a function's RETURNS TABLE.)
SELECT c.seen_start::bigint AS seen_start, c.seen_count::bigint AS seen_count,
    c.seen_prev::bigint AS seen_prev, c.seen_tat::double precision AS seen_tat,
    c.allowed::boolean AS allowed, c.now_us::bigint AS now_us
FROM tollgate_check(
    @keys::text[],
    @reqs::integer[],
    @slots::integer[],
    @algorithms::smallint[],
    @limits::bigint[],
    @windows::bigint[],
    @costs::bigint[],
    @advisory::boolean[],
    @consume::boolean[],
    @ceilings::integer[],
    sqlc.narg('now')::bigint
) AS c;

-- name: CheckCountersFixedPacked :one
-- CheckCountersFixedPacked decides a batch of one-item consuming
-- fixed-window requests, those on one key alike; see
-- tollgate_check_fixed_packed in
-- migrations/000015_counter_check_fixed_packed.up.sql. Keys are distinct
-- and sorted bytewise, and the answers come back in their order, as arrays.
SELECT c.starts::bigint[] AS starts, c.counts::bigint[] AS counts,
    c.admitted::integer[] AS admitted, c.now_us::bigint AS now_us
FROM tollgate_check_fixed_packed(
    @keys::text[],
    @ns::integer[],
    @limits::bigint[],
    @windows::bigint[],
    @costs::bigint[],
    sqlc.narg('now')::bigint
) AS c;

-- name: PruneCounters :execrows
-- PruneCounters deletes up to batch expired counters, skipping rows a check
-- holds: a counter past its expiry is the same as no counter. The locking
-- runs once, materialized, and the delete finds its rows by key.
WITH expired AS MATERIALIZED (
    SELECT key FROM counters
    WHERE expires_at < now()
    ORDER BY expires_at
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM counters AS c
USING expired AS e
WHERE c.key = e.key;
