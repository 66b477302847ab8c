-- tollgate_check_fixed decides, set-based, a batch that tollgate_check would
-- take item by item in its PL/pgSQL loop: one whose every request is one
-- consuming fixed-window item, where the requests on one key share its limit,
-- window and cost. That is the common batch (one policy of a tenant, over many
-- subjects or over one keyless counter), and its answer is tollgate_check's:
-- requests on different keys do not interact, so only the order of those on
-- one key matters, and with one cost the first ones admitted are as many as
-- the window's room holds, the rest refused. Measured on the 2-core box with
-- pgbench, 23 distinct keys a call: 600 -> 339 µs of database time, and a
-- key's first count is one insert instead of an insert and an update.
--
-- p_keys holds the batch's distinct keys, sorted bytewise (the lock order of
-- tollgate_check too, so that the two never deadlock); p_n, p_limit,
-- p_window (µs; 0 is the calendar month in UTC) and p_cost are each key's
-- number of requests and their item's limit, window and cost; p_now is as
-- tollgate_check's, except that the database clock is read before the rows
-- are locked: a batch that waited for one with a later window counts in that
-- window, as fixedStep does with a clock that ran ahead. It returns one row
-- per key, in p_keys' order: the window the key's first request saw and the
-- count in it (a counter from an older window is an empty one in this
-- window: limit.Decide reads the two alike), how many of its requests were
-- admitted (its first ones), and the instant used. The caller derives what
-- each request saw: the same window, and the count left by the admitted
-- requests before it.
CREATE FUNCTION tollgate_check_fixed(
    p_keys   text[],
    p_n      integer[],
    p_limit  bigint[],
    p_window bigint[],
    p_cost   bigint[],
    p_now    bigint
) RETURNS TABLE (
    seen_start bigint,
    seen_count bigint,
    admitted   integer,
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
    IF cardinality(p_n) <> v_n OR cardinality(p_limit) <> v_n OR cardinality(p_window) <> v_n
        OR cardinality(p_cost) <> v_n THEN
        RAISE EXCEPTION 'tollgate_check_fixed: arrays differ in length';
    END IF;
    IF EXISTS (SELECT FROM unnest(p_n) AS u(n) WHERE n IS NULL OR n < 1) THEN
        RAISE EXCEPTION 'tollgate_check_fixed: a key without requests';
    END IF;

    IF EXISTS (SELECT FROM unnest(p_n) AS u(n) WHERE n > 1) THEN
        -- Some key has several requests: lock every row (creating the
        -- missing ones) in key order, read their states, and write each
        -- admitted key's count once. The same steps as tollgate_check's,
        -- without its loop.
        INSERT INTO counters AS c (key)
        SELECT u.key COLLATE "C" FROM unnest(p_keys) AS u(key) ORDER BY 1
        ON CONFLICT (key) DO UPDATE SET key = excluded.key WHERE false;

        RETURN QUERY
        WITH r AS (
            SELECT k.i, c.ctid AS tid, k.lim, k.win, k.cost, d.ws,
                   CASE WHEN c.start >= d.ws THEN c.start ELSE d.ws END AS st,
                   CASE WHEN c.start >= d.ws THEN c.count ELSE 0 END AS cn,
                   least(k.n, greatest(0, (k.lim - CASE WHEN c.start >= d.ws THEN c.count ELSE 0 END) / k.cost))::integer AS ok
              FROM unnest(p_keys, p_n, p_limit, p_window, p_cost) WITH ORDINALITY AS k(key, n, lim, win, cost, i)
              CROSS JOIN LATERAL (SELECT CASE WHEN k.win = 0 THEN tollgate_month_start(v_now, 0) ELSE v_now - v_now % k.win END AS ws) AS d
              JOIN counters AS c ON c.key = k.key COLLATE "C"
        ), w AS (
            -- limit.Expiry of the window counted in.
            UPDATE counters AS c
               SET start = r.st, count = r.cn + r.ok * r.cost, prev = 0, tat = 0,
                   expires_at = timestamptz 'epoch' + interval '1 microsecond' *
                       CASE WHEN r.win = 0 THEN tollgate_month_start(r.st, 1) ELSE r.st - r.st % r.win + r.win END
              FROM r
             WHERE r.ok > 0 AND c.ctid = r.tid
        )
        SELECT r.st, r.cn, r.ok, v_now FROM r ORDER BY r.i;
        RETURN;
    END IF;

    -- One request a key. Each admissible item proposes its row as a first
    -- count in the current window; a row that exists is locked, in key
    -- order, and counted on only if the count it holds in this window (or a
    -- later one) leaves room. An item whose cost exceeds its limit proposes
    -- nothing: it is refused whatever the row holds. Only admitted items
    -- write, and return.
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
        -- All admitted: each saw its count before its cost.
        RETURN QUERY SELECT a.st, a.cn - a.cost, 1, v_now
          FROM unnest(a_start, a_count, p_cost) AS a(st, cn, cost);
        RETURN;
    END IF;
    -- Some refused: they saw their row as it is now (a new statement, so a
    -- newer snapshot, and the rows it proposed on are still locked), or no
    -- row at all, in this instant's window.
    RETURN QUERY
    SELECT coalesce(a.st, CASE WHEN c.start >= d.ws THEN c.start ELSE d.ws END),
           coalesce(a.cn - k.cost, CASE WHEN c.start >= d.ws THEN c.count ELSE 0 END),
           CASE WHEN a.st IS NULL THEN 0 ELSE 1 END, v_now
      FROM unnest(p_keys, p_cost, p_window) WITH ORDINALITY AS k(key, cost, win, i)
      CROSS JOIN LATERAL (SELECT CASE WHEN k.win = 0 THEN tollgate_month_start(v_now, 0) ELSE v_now - v_now % k.win END AS ws) AS d
      LEFT JOIN unnest(a_key, a_start, a_count) AS a(key, st, cn) ON a.key = k.key
      LEFT JOIN counters AS c ON c.key = k.key COLLATE "C"
     ORDER BY k.i;
END
$$;
