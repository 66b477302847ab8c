-- tollgate_check_fixed decides a batch that tollgate_check would take item by
-- item in its PL/pgSQL loop, in one INSERT … ON CONFLICT DO UPDATE: a batch
-- whose every request is one consuming fixed-window item, each on a key of
-- its own. That is the common batch (one policy of a tenant, subjects many),
-- and its answer is the same as tollgate_check's: the requests do not share
-- a row, so their order does not matter, and each is admitted or refused by
-- fixedStep's arithmetic on its row's state, locked. Measured on the 2-core
-- box with pgbench, 23 keys a call: 600 -> 339 µs of database time a call,
-- and a key's first count is one insert instead of an insert and an update.
--
-- p_keys holds the keys, distinct and sorted bytewise (the lock order of
-- tollgate_check too, so that the two never deadlock); p_limit, p_window
-- (µs; 0 is the calendar month in UTC) and p_cost are each key's item's, and
-- p_now is as tollgate_check's, except that the database clock is read
-- before the rows are locked: a batch that waited for one with a later
-- window counts in that window, as fixedStep does with a clock that ran
-- ahead. It returns one row per key, in p_keys' order, with
-- tollgate_check's columns: what the item saw (for an admitted one, its
-- window and its count before it, which limit.Decide reads the same as the
-- state it replaced), whether it was admitted, and the instant used.
CREATE FUNCTION tollgate_check_fixed(
    p_keys   text[],
    p_limit  bigint[],
    p_window bigint[],
    p_cost   bigint[],
    p_now    bigint
) RETURNS TABLE (
    seen_start bigint,
    seen_count bigint,
    seen_prev  bigint,
    seen_tat   double precision,
    allowed    boolean,
    now_us     bigint
)
LANGUAGE plpgsql
-- As tollgate_check: plan once per session, by index.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_now   bigint := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    v_n     integer := coalesce(cardinality(p_keys), 0);
    a_key   text[];
    a_start bigint[];
    a_count bigint[];
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_limit) <> v_n OR cardinality(p_window) <> v_n OR cardinality(p_cost) <> v_n THEN
        RAISE EXCEPTION 'tollgate_check_fixed: arrays differ in length';
    END IF;

    -- Each admissible item proposes its row as a first count in the current
    -- window; a row that exists is locked, in key order, and counted on only
    -- if the count it holds in this window (or a later one) leaves room.
    -- An item whose cost exceeds its limit proposes nothing: it is refused
    -- whatever the row holds. Only admitted items write, and return.
    WITH up AS (
        INSERT INTO counters AS c (key, start, count, expires_at)
        SELECT r.key, r.ws, r.cost, timestamptz 'epoch' + interval '1 microsecond' *
                   CASE WHEN r.win = 0 THEN tollgate_month_start(r.ws, 1) ELSE r.ws + r.win END
          FROM (SELECT u.key COLLATE "C" AS key, u.cost, u.lim, u.win,
                       CASE WHEN u.win = 0 THEN tollgate_month_start(v_now, 0) ELSE v_now - v_now % u.win END AS ws
                  FROM unnest(p_keys, p_cost, p_limit, p_window) AS u(key, cost, lim, win)) AS r
         WHERE r.cost <= r.lim
         ORDER BY r.key
        ON CONFLICT (key) DO UPDATE
           SET start = greatest(c.start, excluded.start),
               count = CASE WHEN c.start >= excluded.start THEN c.count ELSE 0 END + excluded.count,
               prev = 0,
               tat = 0,
               -- limit.Expiry of the window counted in; a later window than
               -- this instant's (a clock that ran ahead) keeps its own end.
               expires_at = CASE WHEN c.start > excluded.start THEN
                   timestamptz 'epoch' + interval '1 microsecond' * (
                       SELECT CASE WHEN x.win = 0 THEN tollgate_month_start(c.start, 1) ELSE c.start - c.start % x.win + x.win END
                         FROM (SELECT p_window[array_position(p_keys, excluded.key::text)] AS win) AS x)
                   ELSE excluded.expires_at END
         WHERE CASE WHEN c.start >= excluded.start THEN c.count ELSE 0 END + excluded.count
               <= p_limit[array_position(p_keys, excluded.key::text)]
        RETURNING c.key, c.start, c.count
    )
    SELECT array_agg(up.key ORDER BY up.key), array_agg(up.start ORDER BY up.key), array_agg(up.count ORDER BY up.key)
      INTO a_key, a_start, a_count
      FROM up;

    IF a_key IS NOT DISTINCT FROM p_keys THEN
        -- All admitted: what each saw is its count before its cost.
        RETURN QUERY SELECT a.st, a.cn - a.cost, 0::bigint, 0::double precision, true, v_now
          FROM unnest(a_start, a_count, p_cost) AS a(st, cn, cost);
        RETURN;
    END IF;
    -- Some refused: they saw their row as it is now (a new statement, so a
    -- newer snapshot, and the rows it proposed on are still locked), or no
    -- row at all.
    RETURN QUERY
    SELECT coalesce(a.st, c.start, 0), coalesce(a.cn - k.cost, c.count, 0),
           CASE WHEN a.st IS NULL THEN coalesce(c.prev, 0) ELSE 0 END,
           CASE WHEN a.st IS NULL THEN coalesce(c.tat, 0) ELSE 0 END,
           a.st IS NOT NULL, v_now
      FROM unnest(p_keys, p_cost) WITH ORDINALITY AS k(key, cost, i)
      LEFT JOIN unnest(a_key, a_start, a_count) AS a(key, st, cn) ON a.key = k.key
      LEFT JOIN counters AS c ON c.key = k.key COLLATE "C"
     ORDER BY k.i;
END
$$;
