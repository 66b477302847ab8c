-- Reservations of the PostgreSQL counter store (internal/counter/postgres/
-- reserve.go); see migrations/000027_reservations.up.sql.

-- name: Reserve :many
-- Reserve decides one reservation: a row per item of its request (op 0),
-- then one for the reservation (op 1); see tollgate_reserve. Now is NULL
-- for the database clock.
SELECT c.op::integer AS op,
    c.seen_start::bigint AS seen_start, c.seen_count::bigint AS seen_count,
    c.seen_prev::bigint AS seen_prev, c.seen_tat::double precision AS seen_tat,
    c.allowed::boolean AS allowed, c.status::smallint AS status,
    c.expires_us::bigint AS expires_us, c.now_us::bigint AS now_us
FROM tollgate_reserve(
    @keys::text[],
    @slots::integer[],
    @algorithms::smallint[],
    @limits::bigint[],
    @windows::bigint[],
    @costs::bigint[],
    @advisory::boolean[],
    @ceilings::integer,
    @item_keys::bytea[],
    @grp::text,
    @id::bytea,
    @ttl::bigint,
    @release::boolean,
    @group_limit::bigint,
    sqlc.narg('now')::bigint
) AS c;

-- name: Settle :one
-- Settle settles one reservation; see tollgate_settle. Now is NULL for the
-- database clock.
SELECT c.status::smallint AS status, c.used::bigint AS used, c.settled_us::bigint AS settled_us,
    coalesce(c.item_keys, '{}')::bytea[] AS item_keys, coalesce(c.algs, '{}')::smallint[] AS algs,
    coalesce(c.limits, '{}')::bigint[] AS limits, coalesce(c.windows, '{}')::bigint[] AS windows,
    coalesce(c.amounts, '{}')::bigint[] AS amounts, coalesce(c.charged, '{}')::bigint[] AS charged,
    coalesce(c.a_start, '{}')::bigint[] AS a_start, coalesce(c.a_count, '{}')::bigint[] AS a_count,
    coalesce(c.a_prev, '{}')::bigint[] AS a_prev, coalesce(c.a_tat, '{}')::double precision[] AS a_tat
FROM tollgate_settle(@grp::text, @id::bytea, @used::bigint, @kept::bigint, @kmax::bigint, sqlc.narg('now')::bigint) AS c;

-- name: SweepReservations :one
-- SweepReservations deals with the groups of up to batch reservations that
-- fell due a minute or more ago by the database's clock (a minute of grace
-- for clocks of Tollgate instances that run behind it), as their next
-- reservation or settlement would; see tollgate_reserve_sweep.
SELECT tollgate_reserve_sweep(@batch::integer, (extract(epoch FROM now()) * 1000000)::bigint - 60000000)::bigint AS deleted;

-- name: ReadReservation :one
-- ReadReservation reads one reservation as it is kept, writing nothing,
-- and the instant it is read at (Now, or the database clock when NULL):
-- whether it is still held then (live before its expiry, settled before
-- the end of the time its outcome is kept) is reserve.go's to decide. It
-- answers one row, found false when there is no such reservation, so that
-- "no rows" is never taken for a failing store.
SELECT (r.grp IS NOT NULL)::boolean AS found,
    coalesce(r.expires_us, 0)::bigint AS expires_us, (r.settled_us IS NOT NULL)::boolean AS settled,
    coalesce(r.used, 0)::bigint AS used, coalesce(r.due_us, 0)::bigint AS due_us,
    coalesce(r.item_keys, '{}')::bytea[] AS item_keys, coalesce(r.algs, '{}')::smallint[] AS algs,
    coalesce(r.limits, '{}')::bigint[] AS limits, coalesce(r.windows, '{}')::bigint[] AS windows,
    coalesce(r.amounts, '{}')::bigint[] AS amounts, coalesce(r.charged, '{}')::bigint[] AS charged,
    coalesce(sqlc.narg('now')::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)::bigint AS now_us
FROM (SELECT 1) AS one
LEFT JOIN reservations r ON r.grp = @grp::text AND r.id = @id::bytea;

-- name: ReservedSums :many
-- ReservedSums sums, for each of the item keys, the amounts that the
-- group's live reservations (unsettled, expiring after now) hold on it:
-- one row per key, in the order given. Now is NULL for the database clock.
SELECT k.ord::integer AS ord, coalesce(sum(c.amount), 0)::bigint AS reserved
FROM unnest(@item_keys::bytea[]) WITH ORDINALITY AS k(key, ord)
LEFT JOIN (
    SELECT r.item_keys[i] AS item_key, r.amounts[i] AS amount
    FROM reservations AS r, generate_subscripts(r.amounts, 1) AS i
    WHERE r.grp = @grp::text AND r.settled_us IS NULL
        AND r.expires_us > coalesce(sqlc.narg('now')::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
) AS c ON c.item_key = k.key
GROUP BY k.ord
ORDER BY k.ord;

-- name: Charge :one
-- Charge counts usage after the fact; see tollgate_charge in
-- migrations/000030_charge.up.sql. Now is NULL for the database clock.
SELECT c.now_us::bigint AS now_us,
    coalesce(c.a_start, '{}')::bigint[] AS a_start, coalesce(c.a_count, '{}')::bigint[] AS a_count,
    coalesce(c.a_prev, '{}')::bigint[] AS a_prev, coalesce(c.a_tat, '{}')::double precision[] AS a_tat
FROM tollgate_charge(@keys::text[], @algs::smallint[], @limits::bigint[], @windows::bigint[], @costs::bigint[],
    sqlc.narg('now')::bigint) AS c;
