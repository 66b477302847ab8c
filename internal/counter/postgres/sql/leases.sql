-- Leases of the PostgreSQL counter store (internal/counter/postgres/lease.go
-- and leaseops.go); see migrations/000012_leases.up.sql and
-- 000016_lease_ops.up.sql. (tollgate_acquire and tollgate_renew stay in the
-- database for instances of an earlier release during an upgrade.)

-- name: HeldLeases :many
-- HeldLeases counts the live leases of each tally at the instant now (NULL:
-- the database clock).
SELECT t.tally::bytea AS tally, count(l.id)::bigint AS held
FROM unnest(@tallies::bytea[]) AS t(tally)
LEFT JOIN leases AS l
    ON l.grp = @grp AND l.tally = t.tally
   AND l.expires_us > coalesce(sqlc.narg('now')::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
GROUP BY t.tally;

-- name: ResetKey :exec
-- ResetKey forgets a counter (its row key) and the leases of a key, in one
-- statement, under the key's lease lock (tollgate_reset,
-- migrations/000020_reset_lock.up.sql).
SELECT tollgate_reset(@grp::text, @key::bytea, @counter_key::text);

-- name: PruneLeases :execrows
-- PruneLeases deletes up to batch leases that expired a minute or more ago
-- by the database's clock (a minute of grace for clocks of Tollgate
-- instances that run behind it), skipping rows an acquire holds.
WITH expired AS MATERIALIZED (
    SELECT grp, id FROM leases
    WHERE expires_us < (extract(epoch FROM now()) * 1000000)::bigint - 60000000
    ORDER BY expires_us
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM leases AS l
USING expired AS e
WHERE l.grp = e.grp AND l.id = e.id;

-- name: LeaseOps :many
-- LeaseOps decides one coalesced batch of lease operations: a row per
-- ceiling item (op 0), then a row per operation; see tollgate_lease_ops in
-- migrations/000016_lease_ops.up.sql. Now is NULL for the database clock.
SELECT c.op::integer AS op,
    c.seen_start::bigint AS seen_start, c.seen_count::bigint AS seen_count,
    c.seen_prev::bigint AS seen_prev, c.seen_tat::double precision AS seen_tat,
    c.allowed::boolean AS allowed, c.status::smallint AS status,
    c.in_flight::bigint AS in_flight, c.expires_us::bigint AS expires_us, c.now_us::bigint AS now_us
FROM tollgate_lease_ops(
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
    @ops::smallint[],
    @creqs::integer[],
    @grps::text[],
    @lease_keys::bytea[],
    @tallies::bytea[],
    @ids::bytea[],
    @maxes::bigint[],
    @ttls::bigint[],
    @group_limits::bigint[],
    sqlc.narg('now')::bigint
) AS c;
